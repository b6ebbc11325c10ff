// subscription.js: a subscription of the Switchyard JavaScript client
// (switchyard.js exports it): its handler or message queue, the positions
// it resumes from, duplicate suppression, and what it forgets of a topic
// the gateway deleted.

import { AsyncQueue, RecentSet, tpKey } from "./client_base.js";

/** The most deleted topics a subscription remembers per connection (see _forgetTopic); past it the marks start again. */
const maxDeletedTopics = 1024;

/**
 * A subscription to a pattern, optionally as a member of a consumer group.
 * Created by {@link Client#subscribe}.
 */
export class Subscription {
  /** @package */
  constructor(client, pattern, handler, opts) {
    /** @private */
    this._client = client;
    /** The subscribed pattern. @type {string} */
    this.pattern = pattern;
    /** The consumer group, or undefined for a plain subscription. @type {string|undefined} */
    this.group = opts.group || undefined;
    /** @private */
    this._handler = handler;
    /** @private */
    this._opts = opts;
    /**
     * `pending` until the first `subscribed` reply, then `active`; `closed`
     * after unsubscribe or when a resubscribe failed.
     * @type {"pending"|"active"|"closed"}
     */
    this.state = "pending";
    /**
     * From the last `subscribed` reply that carried it: whether a resume from
     * positions succeeded. Undefined when no positions were sent.
     * @type {boolean|undefined}
     */
    this.recovered = undefined;
    /** Duplicate deliveries dropped so far. */
    this.duplicates = 0;
    /** Records handed to the handler so far. */
    this.delivered = 0;
    /**
     * Plain subscriptions: last delivered offset per (topic, partition), and
     * the log epoch those offsets belong to.
     * @private @type {Map<string, {topic: string, partition: number, offset: number}>}
     */
    this._last = new Map();
    /** @private @type {string|undefined} */
    this._epoch = undefined;
    /**
     * A reset not yet confirmed: the positions of another epoch, sent on
     * every resubscribe until a reply says whether they still apply, so a
     * connection lost before that reply does not lose the reset.
     * @private @type {{epoch: string|undefined, last: Map<string, object>}|null}
     */
    this._stale = null;
    /**
     * Topics deleted while this connection was read: their offsets may go
     * back (the topic made again). Forgotten on the next connection, at
     * most maxDeletedTopics.
     * @private @type {Set<string>|null}
     */
    this._deleted = null;
    /**
     * Per partition of a deleted topic not yet seen made again: the last
     * offset of the deleted incarnation delivered. Never resumed from;
     * forgotten on the next connection.
     * @private @type {Map<string, number>|null}
     */
    this._stragglers = null;
    /** Group subscriptions: recently handled records, value "handling" or "acked". @private */
    this._recent = this.group ? new RecentSet(client._opts.recentGroupRecords) : null;

    const from = opts.from;
    if (!this.group && from && typeof from === "object" && Array.isArray(from.positions)) {
      // The caller has already seen these: seed the duplicate filter with them.
      this._epoch = from.epoch;
      for (const p of from.positions) {
        this._last.set(tpKey(p.topic, p.partition), { topic: p.topic, partition: p.partition, offset: p.offset });
      }
    }
    /** Stream form: where messages wait for the loop. @private @type {AsyncQueue|null} */
    this._queue = null;
    /** Removes the AbortSignal listener. @private @type {(() => void)|null} */
    this._offAbort = null;
    /** @private */
    this._ready = null;
    /** @private */
    this._readyPromise = new Promise((resolve, reject) => {
      this._ready = { resolve, reject };
    });
  }

  /**
   * The last delivered position on every (topic, partition) this plain
   * subscription has seen, in the form `from.positions` expects.
   * @returns {Array<{topic: string, partition: number, offset: number}>}
   */
  positions() {
    return Array.from(this._last.values(), (p) => ({ ...p }));
  }

  /**
   * Ends the subscription. Resolves when the server confirms, or at once
   * when the client is not connected (the server forgot it with the session).
   * No message is handed to the handler after this is called.
   * @returns {Promise<void>}
   */
  unsubscribe() {
    return this._client._unsubscribe(this);
  }

  /** The subscription ended: stop its abort listener and stream. @private */
  _ended(err) {
    if (this._offAbort) this._offAbort();
    this._offAbort = null;
    if (this._queue) this._queue.end(err);
  }

  /**
   * A topic this plain subscription matched was deleted: its positions and
   * delta bases go, and until the next connection its offsets may restart.
   * @private
   */
  _forgetTopic(topic) {
    if (this._deleted === null || this._deleted.size >= maxDeletedTopics) this._deleted = new Set();
    this._deleted.add(topic);
    for (const [k, p] of this._last) {
      if (p.topic !== topic) continue;
      if (this._stragglers === null) this._stragglers = new Map();
      if (this._stragglers.size < maxDeletedTopics) this._stragglers.set(k, p.offset);
      this._last.delete(k);
    }
    if (this._fossil) for (const k of this._fossil.keys()) if (k.startsWith(topic + "\u0000")) this._fossil.delete(k);
  }

  /** The `subscribe` frame for the current connection. @private */
  _frame() {
    this._deleted = null; // a new connection resumes from the positions
    this._stragglers = null;
    const f = { op: "subscribe", pattern: this.pattern };
    if (this.group) f.group = this.group;
    const o = this._opts;
    if (o.on_full !== undefined) f.on_full = o.on_full;
    if (o.filter !== undefined) f.filter = o.filter;
    if (o.presence) f.presence = true;
    if (o.delta !== undefined && !this.group) {
      f.delta = o.delta;
      this._fossil = new Map(); // last payload per partition (fossil.js); the server starts full
    }
    if (!this.group && this._last.size > 0) {
      f.from = { epoch: this._epoch, positions: this.positions() };
    } else if (!this.group && this._stale) {
      f.from = { epoch: this._stale.epoch, positions: Array.from(this._stale.last.values(), (p) => ({ ...p })) };
    } else if (o.from !== undefined) {
      f.from = o.from;
    }
    return f;
  }
}
