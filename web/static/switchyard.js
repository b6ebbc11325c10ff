// switchyard.js: the Switchyard JavaScript client.
//
// A dependency-free ES module for browsers (and Node, with an injected
// WebSocket implementation) that speaks the Switchyard v1 WebSocket protocol:
// subscribe to topic patterns, publish, ack and nack consumer-group
// deliveries, and survive reconnects without losing what is still in the log.
//
//     import { connect } from "/switchyard.js";
//
//     const client = await connect("wss://gateway.example/v1/ws", { token });
//     const sub = await client.subscribe("orders.#", (msg) => {
//       console.log(msg.topic, msg.offset, msg.data);
//     });
//     await client.publish("orders.created", { id: 42 }, { key: "customer-7" });
//     client.on("gap", (gap) => console.warn("missed", gap.from, "to", gap.to));
//
//     // Or iterate: leaving the loop unsubscribes.
//     for await (const msg of client.subscribe("orders.#")) console.log(msg.data);
//
// Installed with npm it is the package @switchyard/client (web/package.json);
// web/switchyard.d.ts declares its types. connect, subscribe and publish
// take an AbortSignal (`signal`); closed() and status() report the
// connection's end and states.
//
// Delivery guarantees provided by this library on top of the protocol:
//
//  - Reconnect. When the socket drops, the client reconnects with exponential
//    backoff and jitter, then resubscribes. A plain subscription resumes with
//    `from: {epoch, positions}` built from the last record it delivered on
//    every (topic, partition), so records still retained by the log are not
//    lost. When the server cannot resume (`recovered: false`) the client emits
//    a `reset` event. Group subscriptions simply rejoin their group.
//  - Liveness. A connection can die without a close (a NAT that forgot it,
//    a laptop that slept): no close event comes and nothing arrives. When
//    nothing has arrived for `pingIntervalMs`, the client sends a `ping` op;
//    when nothing arrives within `pongTimeoutMs` after it, the client closes
//    the socket itself and reconnects as after any other drop.
//  - Duplicates. A plain subscription never hands the same (topic, partition,
//    offset) to its handler twice within one log epoch. A group subscription
//    remembers a bounded set of recently handled records; a redelivery of one
//    that was already acked is acked again and not handed to the handler.
//
// Concurrency: JavaScript is single-threaded; a Client may be used from any
// callback. Handlers run synchronously from the socket's message event, in
// the order the server sent the frames.

import { keepText, takeMessage, forgetPart } from "./fossil.js";

/** Default options; every option of {@link connect} falls back to these. */
export const DEFAULTS = Object.freeze({
  /** First reconnect delay, before jitter. */
  minDelayMs: 250,
  /** Largest reconnect delay, before jitter. */
  maxDelayMs: 10000,
  /** How long a request (and the wait for `welcome`) may take. */
  requestTimeoutMs: 10000,
  /** How many handled group records are remembered for duplicate detection. */
  recentGroupRecords: 4096,
  /** How many messages a subscription iterated with `for await` buffers. */
  streamBuffer: 1024,
  /**
   * After how long without a frame the client sends a `ping` op, to check
   * that the connection is alive (a browser cannot send WebSocket pings).
   */
  pingIntervalMs: 15000,
  /** How long after a ping the client waits for any frame before it counts the connection as dead. */
  pongTimeoutMs: 10000,
});

/** WebSocket readyState values, spelled out so injected implementations need not define them. */
const OPEN = 1;

/**
 * An error reported by the server or by the client library. `code` is one of
 * the protocol's error codes (`bad_request`, `invalid_pattern`, `forbidden`,
 * ...) or one of the client's own:
 *
 *  - `timeout`: no reply within `requestTimeoutMs`;
 *  - `disconnected`: the connection dropped after the request was sent, so
 *    its outcome is unknown (a publish with `msg_id` can be retried safely);
 *  - `closed`: the client was closed;
 *  - `connect_failed`: the first connection attempt failed;
 *  - `already_subscribed`: this client already has a subscription with the
 *    same pattern and group;
 *  - `not_a_group_message`: `ack`/`nack` of a message without `group`;
 *  - `handler_failed`: a message handler threw (reported through `error`).
 */
export class SwitchyardError extends Error {
  /**
   * @param {string} code machine-readable error code
   * @param {string} message human-readable description
   * @param {object} [details] extra fields copied onto the error
   */
  constructor(code, message, details) {
    super(message || code);
    this.name = "SwitchyardError";
    /** @type {string} */
    this.code = code;
    if (details) Object.assign(this, details);
  }
}

/**
 * Splits one server text frame into its JSON objects. The server may batch
 * several objects into a frame, separated by "\n"; blank lines are skipped.
 * A line that is not valid JSON is returned as an Error in its place so that
 * one bad line does not hide the others.
 *
 * @param {string} text the frame's payload
 * @returns {Array<object|Error>}
 */
export function splitFrame(text) {
  const out = [];
  for (const line of String(text).split("\n")) {
    const s = line.trim();
    if (s === "") continue;
    try {
      out.push(keepText(JSON.parse(s), s));
    } catch (err) {
      out.push(new SwitchyardError("bad_frame", "server sent invalid JSON: " + err.message, { line: s }));
    }
  }
  return out;
}

/**
 * The delay before reconnect attempt number `attempt` (0-based): exponential
 * backoff from `minMs` doubling up to `maxMs`, with "equal jitter": the result
 * lies uniformly in [d/2, d] where d is the capped exponential delay, so
 * clients that lost the same server spread out without ever retrying at once.
 *
 * @param {number} attempt 0 for the first retry
 * @param {number} minMs delay of the first retry before jitter
 * @param {number} maxMs cap before jitter
 * @param {() => number} [random] source of [0,1) numbers, for tests
 * @returns {number} milliseconds
 */
export function backoffDelay(attempt, minMs, maxMs, random = Math.random) {
  const exp = Math.min(maxMs, minMs * Math.pow(2, Math.min(attempt, 30)));
  return Math.round(exp / 2 + (exp / 2) * random());
}

/**
 * A bounded map that forgets its oldest entries first. The client uses it to
 * remember recently handled group records.
 */
export class RecentSet {
  /** @param {number} limit how many entries to keep (at least 1) */
  constructor(limit) {
    this.limit = Math.max(1, limit | 0);
    /** @type {Map<string, any>} */
    this.map = new Map();
  }
  /** @param {string} k @returns {boolean} */
  has(k) {
    return this.map.has(k);
  }
  /** @param {string} k @returns {any} the stored value, or undefined */
  get(k) {
    return this.map.get(k);
  }
  /** Stores k (moving it to the newest position) and evicts the oldest entries over the limit. */
  set(k, v = true) {
    this.map.delete(k);
    this.map.set(k, v);
    while (this.map.size > this.limit) this.map.delete(this.map.keys().next().value);
  }
  /** @param {string} k */
  delete(k) {
    this.map.delete(k);
  }
  /** @returns {number} */
  get size() {
    return this.map.size;
  }
}

/**
 * The error a request rejects with when its AbortSignal fires: code
 * `aborted`, with the signal's reason as `cause`.
 *
 * @param {AbortSignal} signal
 * @returns {SwitchyardError}
 */
function abortError(signal) {
  const reason = signal && signal.reason;
  const why = reason && reason.message ? ": " + reason.message : "";
  return new SwitchyardError("aborted", "aborted" + why, { cause: reason });
}

/**
 * Calls onAbort once when signal fires; returns a function that removes the
 * listener. Without a signal it does nothing.
 *
 * @param {AbortSignal|undefined} signal
 * @param {() => void} onAbort
 * @returns {() => void}
 */
function onAbort(signal, onAbort) {
  if (!signal) return () => {};
  signal.addEventListener("abort", onAbort, { once: true });
  return () => signal.removeEventListener("abort", onAbort);
}

/**
 * A bounded queue read by async iteration: values pushed while nobody waits
 * are buffered up to `limit`; `end(err)` finishes the iteration after the
 * buffered values, with err thrown to the reader when given.
 */
export class AsyncQueue {
  /**
   * @param {number} limit how many values may wait (at least 1)
   * @param {{dropOldest?: boolean, onReturn?: () => void}} [opts]
   *   dropOldest: a push into a full queue evicts the oldest value instead
   *   of failing; onReturn: called once when the reader stops early
   */
  constructor(limit, opts = {}) {
    this.limit = Math.max(1, limit | 0);
    /** @private */ this._items = [];
    /** @private */ this._waiters = [];
    /** @private */ this._done = false;
    /** @private */ this._error = null;
    /** @private */ this._dropOldest = !!opts.dropOldest;
    /** @private */ this._onReturn = opts.onReturn;
  }
  /** Values waiting to be read. @returns {number} */
  get size() {
    return this._items.length;
  }
  /** Whether end() or return() was called. @returns {boolean} */
  get done() {
    return this._done;
  }
  /**
   * Adds a value. Returns false, without adding it, when the queue is full
   * (unless dropOldest) or has ended.
   * @returns {boolean}
   */
  push(v) {
    if (this._done) return false;
    const w = this._waiters.shift();
    if (w) {
      w.resolve({ value: v, done: false });
      return true;
    }
    if (this._items.length >= this.limit) {
      if (!this._dropOldest) return false;
      this._items.shift();
    }
    this._items.push(v);
    return true;
  }
  /** Ends the iteration once the buffered values are read. @param {Error} [err] */
  end(err) {
    if (this._done) return;
    this._done = true;
    this._error = err || null;
    for (const w of this._waiters.splice(0)) {
      if (this._error) {
        w.reject(this._error);
        this._error = null;
      } else w.resolve({ value: undefined, done: true });
    }
  }
  /** @returns {Promise<IteratorResult<any>>} */
  next() {
    if (this._items.length > 0) return Promise.resolve({ value: this._items.shift(), done: false });
    if (this._done) {
      const err = this._error;
      this._error = null;
      return err ? Promise.reject(err) : Promise.resolve({ value: undefined, done: true });
    }
    return new Promise((resolve, reject) => this._waiters.push({ resolve, reject }));
  }
  /** The reader stops (break, return or throw in for await). @returns {Promise<IteratorResult<any>>} */
  return() {
    const wasDone = this._done;
    this._items.length = 0;
    this.end();
    this._error = null;
    if (!wasDone && this._onReturn) this._onReturn();
    return Promise.resolve({ value: undefined, done: true });
  }
  [Symbol.asyncIterator]() {
    return this;
  }
}

/**
 * The messages of one subscription as an async iterable, returned by
 * {@link Client#subscribe} when it is called without a handler:
 *
 *     for await (const msg of client.subscribe("orders.#")) { ... }
 *
 * Leaving the loop (break, return, throw) unsubscribes. The loop ends when
 * the subscription ends (unsubscribe, client closed) and throws the error
 * when the server refused the subscription or its AbortSignal fired.
 * Messages wait in a bounded buffer (`buffer`, default 1024): beyond it a
 * plain message is dropped and reported as a `gap` event with reason
 * `client_queue_full`, and a group message is nacked for redelivery.
 */
export class MessageStream {
  /** @package */
  constructor(client, sub, ready, queue, autoAck) {
    /** @private */ this._client = client;
    /**
     * The subscription being iterated; null when it was refused at once
     * (closed client, duplicate, aborted signal).
     * @type {Subscription|null}
     */
    this.subscription = sub;
    /** @private */ this._queue = queue;
    /** @private */ this._autoAck = autoAck;
    /** @private */ this._prev = null;
    /**
     * Resolves with the Subscription once the server confirmed it; rejects
     * when it refused.
     * @type {Promise<Subscription>}
     */
    this.ready = ready;
  }
  /** @returns {Promise<IteratorResult<object>>} */
  next() {
    // autoAck: the loop asking for the next message has handled the last.
    if (this._prev) {
      const m = this._prev;
      this._prev = null;
      this._client.ack(m).catch((err) => this._client._emit("error", err));
    }
    return this._queue.next().then((r) => {
      if (!r.done && this._autoAck && r.value.group) this._prev = r.value;
      return r;
    });
  }
  /** Stops the iteration and unsubscribes. @returns {Promise<IteratorResult<object>>} */
  return() {
    this._prev = null;
    return this._queue.return();
  }
  /** Ends the subscription; the loop ends after the buffered messages. @returns {Promise<void>} */
  unsubscribe() {
    return this.subscription ? this.subscription.unsubscribe() : Promise.resolve();
  }
  [Symbol.asyncIterator]() {
    return this;
  }
}

/**
 * The gateway's WebSocket endpoint for url, by the Go client's rule:
 * a relative URL is resolved against the page (when there is one); the
 * scheme must be ws, wss, http or https, and http(s) maps to ws(s); an
 * empty path or "/" means `/v1/ws`, so `http://host:8080/` and
 * `ws://host:8080` reach the gateway as `ws://host:8080/v1/ws` does.
 * Throws a SwitchyardError (`bad_request`) for anything else.
 *
 * @param {string} url
 * @returns {string}
 */
function gatewayURL(url) {
  const base = typeof globalThis.location !== "undefined" ? globalThis.location.href : undefined;
  let u;
  try {
    u = base ? new URL(url, base) : new URL(url);
  } catch {
    throw new SwitchyardError("bad_request", `bad url ${JSON.stringify(String(url))}: want ws://, wss://, http:// or https:// and a host, e.g. http://localhost:8080`);
  }
  if (u.protocol === "http:") u.protocol = "ws:";
  if (u.protocol === "https:") u.protocol = "wss:";
  if (u.protocol !== "ws:" && u.protocol !== "wss:") {
    throw new SwitchyardError("bad_request", `bad url ${JSON.stringify(String(url))}: the scheme must be ws, wss, http or https`);
  }
  if (u.pathname === "" || u.pathname === "/") u.pathname = "/v1/ws";
  return u.toString();
}

/**
 * Builds the WebSocket URL: the gateway's endpoint (see gatewayURL) with
 * `token` as a query parameter. For the client and its tests; not part of
 * the package's API.
 *
 * @param {string} url absolute ws://, wss://, http:// or https:// URL, or a path
 * @param {string} [token] auth token (JWT), omitted when empty
 * @returns {string}
 */
export function buildURL(url, token) {
  const u = new URL(gatewayURL(url));
  if (token) u.searchParams.set("token", token);
  return u.toString();
}

/** @param {string} topic @param {number} partition */
function tpKey(topic, partition) {
  return topic + "\u0000" + partition;
}

/** @param {string} pattern @param {string} [group] */
function subKey(pattern, group) {
  return group ? pattern + "\u0000" + group : pattern;
}

/**
 * Connects to a Switchyard gateway. The returned promise resolves once the
 * server's `welcome` arrives, and rejects (code `connect_failed` or
 * `timeout`) if the first attempt fails; later drops are handled by automatic
 * reconnects.
 *
 * @param {string} url the gateway's WebSocket endpoint, e.g. `wss://host/v1/ws`
 * @param {object} [options]
 * @param {string | (() => string | Promise<string>)} [options.token]
 *   auth token sent as `?token=`; a function is called before every attempt,
 *   so it can hand out a fresh JWT
 * @param {() => Promise<string>} [options.getToken] async token source, used
 *   instead of `token`: called before every connection attempt and when the
 *   server sends `refresh_required`, whose answer refreshes the open session
 *   without reconnecting
 * @param {false | {minDelayMs?: number, maxDelayMs?: number}} [options.reconnect]
 *   backoff settings (defaults 250 ms and 10 s); `false` disables reconnecting
 * @param {number} [options.requestTimeoutMs=10000] timeout for every request
 *   and for the `welcome` frame
 * @param {number} [options.recentGroupRecords=4096] size of the duplicate
 *   filter for group deliveries
 * @param {number} [options.pingIntervalMs=15000] after this long without a
 *   frame the client sends a `ping` op; 0 turns the liveness check off
 * @param {number} [options.pongTimeoutMs=10000] a ping without any frame
 *   arriving within this long closes the connection as dead (close code
 *   4000), and the client reconnects
 * @param {typeof WebSocket} [options.WebSocket] WebSocket constructor to use
 *   instead of `globalThis.WebSocket` (for Node, tests or proxies)
 * @param {Array<"websocket"|"sse">} [options.transports] the transports to
 *   try, in order, for the first connection: when a WebSocket cannot be
 *   opened (a proxy refuses the upgrade), the client falls back to
 *   Server-Sent Events (`/v1/sse`) for receiving and `POST /v1/publish` for
 *   publishing, with the same API; it then stays on the transport that
 *   worked. Default `["websocket", "sse"]` where `EventSource` exists,
 *   else `["websocket"]`. Over SSE, consumer groups, `refresh` and presence
 *   are refused (`unsupported`), and adding or removing a subscription
 *   reopens the stream (resuming the others from their positions).
 * @param {typeof EventSource} [options.EventSource] EventSource constructor
 *   for the SSE transport (default `globalThis.EventSource`)
 * @param {typeof fetch} [options.fetch] fetch for publishing over SSE
 *   (default `globalThis.fetch`)
 * @param {AbortSignal} [options.signal] the client's lifetime: when it
 *   fires, a pending connect rejects with code `aborted` and the client
 *   closes, as {@link Client#close} does
 * @returns {Promise<Client>}
 */
export function connect(url, options = {}) {
  let client;
  try {
    client = new Client(url, options);
  } catch (err) {
    return Promise.reject(err); // a bad url or no WebSocket implementation
  }
  const signal = options.signal;
  if (signal && signal.aborted) {
    const err = abortError(signal);
    client._shutdown(err, { code: 1000, reason: "aborted", willReconnect: false });
    return Promise.reject(err);
  }
  const off = onAbort(signal, () => client._shutdown(abortError(signal), { code: 1000, reason: "aborted", willReconnect: false }));
  client.closed().then(off);
  return client._start().then(() => client);
}

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

  /** The `subscribe` frame for the current connection. @private */
  _frame() {
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

/**
 * A connection to a Switchyard gateway that reconnects by itself. Create it
 * with {@link connect}.
 *
 * Events (see {@link Client#on}):
 *  - `open` (welcome): every time a connection is established, including
 *    after a reconnect; the argument is the `welcome` frame.
 *  - `close` ({code, reason, willReconnect}): the socket closed.
 *  - `reconnect` ({attempt, delayMs}): a reconnect attempt is scheduled.
 *  - `gap` (gapFrame, subscription): the server reports offsets
 *    `[from, to)` of a partition that this subscription did not receive.
 *  - `topic_deleted` ({op, pattern, topic}, subscription): a topic this
 *    subscription matched was deleted; nothing more of it arrives unless it
 *    is created again (from offset 0). The subscription stays open.
 *  - `reset` ({subscription, pattern, group, epoch}): a resubscribe could not
 *    resume from the saved positions (`recovered: false`); delivery restarts
 *    at the earliest retained record and records in between may be missing.
 *  - `error` (SwitchyardError): a server error not tied to a request, a
 *    failed resubscribe (the error has `.subscription`), a handler that
 *    threw, or an unreadable frame.
 *  - `state` (state): the connection state changed.
 *  - `refresh_required` (frame): the server asks for a new token before
 *    `frame.expires`; with a token function (`getToken`) the client answers
 *    by itself. A subscription the new token no longer allows ends and is
 *    reported as an `error` with code `forbidden`.
 *  - `join` / `leave` (frame): presence changes on a topic this client
 *    subscribed to with `presence: true`.
 *  - `presence` ({op: "presence", resync: true, topic, count, members}):
 *    the server dropped `join`/`leave` frames to this client (it read them
 *    too slowly), so the client listed the topic again: replace what the
 *    earlier events built with `members`; later events apply to it.
 */
export class Client {
  /** @package Use {@link connect}. */
  constructor(url, options = {}) {
    const rc = options.reconnect;
    /** The gateway's WebSocket endpoint (see gatewayURL). @private */
    this._url = gatewayURL(url);
    /** @private */
    this._opts = {
      token: options.getToken || options.token,
      reconnect: rc !== false,
      minDelayMs: (rc && rc.minDelayMs) || DEFAULTS.minDelayMs,
      maxDelayMs: (rc && rc.maxDelayMs) || DEFAULTS.maxDelayMs,
      requestTimeoutMs: options.requestTimeoutMs || DEFAULTS.requestTimeoutMs,
      recentGroupRecords: options.recentGroupRecords || DEFAULTS.recentGroupRecords,
      pingIntervalMs: options.pingIntervalMs === undefined ? DEFAULTS.pingIntervalMs : options.pingIntervalMs,
      pongTimeoutMs: options.pongTimeoutMs || DEFAULTS.pongTimeoutMs,
      WebSocket: options.WebSocket || globalThis.WebSocket,
      EventSource: options.EventSource || globalThis.EventSource,
      fetch: options.fetch || (typeof globalThis.fetch === "function" ? globalThis.fetch.bind(globalThis) : undefined),
    };
    /** @private */
    this._transports = options.transports || (typeof this._opts.EventSource === "function" ? ["websocket", "sse"] : ["websocket"]);
    /** @private */
    this._transport = 0;
    /**
     * The transport in use or being tried: `"websocket"` or `"sse"`.
     * @type {"websocket"|"sse"}
     */
    this.transport = this._transports[0];
    if (this.transport === "websocket" && typeof this._opts.WebSocket !== "function") {
      throw new SwitchyardError("bad_request", "no WebSocket implementation: pass options.WebSocket");
    }
    /**
     * `connecting` (first attempt), `open`, `reconnecting` or `closed`.
     * @type {"connecting"|"open"|"reconnecting"|"closed"}
     */
    this.state = "connecting";
    /** Session id from the last `welcome`. @type {string|undefined} */
    this.session = undefined;
    /** Log epoch from the last `welcome`. @type {string|undefined} */
    this.epoch = undefined;
    /** Limits from the last `welcome`. @type {object|undefined} */
    this.limits = undefined;
    /** Counters, for display and tests. */
    this.stats = { reconnects: 0, duplicates: 0, gaps: 0 };

    /** @private */ this._ws = null;
    /** @private */ this._nextId = 1;
    /** @private @type {Map<number, object>} */ this._pending = new Map();
    /** @private @type {Map<string, Subscription>} */ this._subs = new Map();
    /** @private @type {Map<string, Set<Function>>} */ this._listeners = new Map();
    /** @private */ this._attempt = 0;
    /** @private */ this._retryTimer = null;
    /** @private */ this._welcomeTimer = null;
    /** Liveness: frames received on the current socket, and when the last came. @private */
    this._received = 0;
    /** @private */ this._receivedAt = 0;
    /** Liveness: the ping waiting for a frame, {id, received, sentAt}. @private */
    this._probe = null;
    /** Liveness: the id of the last ping sent, whose reply is not reported. @private */
    this._pingId = undefined;
    /** @private */ this._liveTimer = null;
    /** @private */ this._first = null;
    /** @private */ this._resolveClosed = null;
    /** @private */ this._closed = new Promise((resolve) => {
      this._resolveClosed = resolve;
    });
  }

  /**
   * Resolves once the client has closed for good: with undefined after
   * {@link Client#close}, or with the SwitchyardError that ended it (first
   * connection failed, policy close, reconnect disabled, aborted).
   * @returns {Promise<SwitchyardError|undefined>}
   */
  closed() {
    return this._closed;
  }

  /**
   * The connection's states as an async iterable: `{state: "open",
   * session, epoch}` on every welcome, `{state: "reconnecting", attempt,
   * delayMs, code, reason}` when the socket dropped and a reconnect is
   * scheduled, and finally `{state: "closed", code, reason, error?}`, after
   * which the iteration ends. Events wait in a bounded buffer (64; the
   * oldest go first) for a slow reader.
   * @param {{signal?: AbortSignal}} [opts] ends the iteration when it fires
   * @returns {AsyncIterableIterator<object>}
   */
  status(opts = {}) {
    const offs = [];
    const stop = () => offs.splice(0).forEach((off) => off());
    const q = new AsyncQueue(64, { dropOldest: true, onReturn: stop });
    if (this.state === "closed") {
      q.end();
      return q;
    }
    let lastClose = null;
    offs.push(
      this.on("open", (w) => q.push({ state: "open", session: w.session, epoch: w.epoch })),
      this.on("close", (ev) => {
        lastClose = ev;
        if (ev.willReconnect) return;
        stop();
        q.push({ state: "closed", code: ev.code, reason: ev.reason, ...(this._closeError ? { error: this._closeError } : {}) });
        q.end();
      }),
      this.on("reconnect", (ev) => q.push({ state: "reconnecting", attempt: ev.attempt, delayMs: ev.delayMs, code: lastClose && lastClose.code, reason: lastClose && lastClose.reason })),
      onAbort(opts.signal, () => {
        stop();
        q.end();
      }),
    );
    return q;
  }

  /**
   * Registers a listener for an event (see the class description).
   * @param {"open"|"close"|"reconnect"|"gap"|"topic_deleted"|"reset"|"error"|"state"|"refresh_required"|"join"|"leave"|"presence"|"transport"} event
   * @param {Function} fn
   * @returns {() => void} a function that removes the listener
   */
  on(event, fn) {
    let set = this._listeners.get(event);
    if (!set) this._listeners.set(event, (set = new Set()));
    set.add(fn);
    return () => this.off(event, fn);
  }

  /**
   * Removes a listener added with {@link Client#on}.
   * @param {string} event
   * @param {Function} fn
   */
  off(event, fn) {
    const set = this._listeners.get(event);
    if (set) set.delete(fn);
  }

  /**
   * Subscribes to a pattern. Called without a handler
   * (`subscribe(pattern, opts?)`), returns a {@link MessageStream}: an async
   * iterable of the messages. With a handler, resolves with the Subscription once the server
   * replies `subscribed`; rejects with a SwitchyardError (`.code` set, e.g.
   * `invalid_pattern`, `forbidden`, `group_conflict`) when it refuses.
   * While disconnected, the request waits for the next connection.
   *
   * The handler is called as `handler(message, subscription)` with the
   * `message` frame: `{topic, partition, offset, key?, headers?, data, time,
   * pattern, group?, attempt?}`. For a group subscription the handler must
   * eventually call {@link Client#ack} or {@link Client#nack} unless
   * `autoAck` is set.
   *
   * @param {string} pattern e.g. `orders.*.eu` or `orders.#`
   * @param {(msg: object, sub: Subscription) => any} handler
   * @param {object} [opts]
   * @param {string} [opts.group] join this consumer group
   * @param {"latest"|"earliest"|"last"|{last: number}|{time: string}|{epoch: string, positions: Array<{topic: string, partition: number, offset: number}>}} [opts.from]
   *   where delivery starts (server default: `latest` for plain, `earliest` for a new group);
   *   `"last"` starts with the newest record of every matched topic and
   *   partition (the latest value), `{last: N}` with the newest N of each
   * @param {"drop_old"|"drop_new"|"disconnect"} [opts.on_full] plain only: what a full outbound queue does
   * @param {{headers: Object<string, string>}} [opts.filter] deliver only records with these headers
   * @param {boolean} [opts.presence] plain subscription to a topic only: be
   *   present on it and receive `join` / `leave` events for other sessions
   * @param {boolean} [opts.autoAck=false] group only: ack when the handler
   *   returns (or its promise resolves), nack with the error when it throws
   *   (or its promise rejects); without a handler: ack each message when
   *   the loop asks for the next one
   * @param {AbortSignal} [opts.signal] unsubscribes when it fires; a
   *   subscribe not yet confirmed rejects with code `aborted`
   * @param {number} [opts.buffer=1024] without a handler: how many
   *   messages wait for the loop
   * @returns {Promise<Subscription>} with a handler; without one, a
   *   {@link MessageStream} to iterate with `for await`
   */
  subscribe(pattern, handler, opts = {}) {
    if (handler === undefined || handler === null || (typeof handler === "object" && typeof handler !== "function")) {
      return this._stream(pattern, handler || {});
    }
    return this._subscribe(pattern, handler, opts, null).ready;
  }

  /**
   * The handler form of subscribe, feeding queue when given. Returns the
   * Subscription (null when refused at once) and its ready promise. @private
   */
  _subscribe(pattern, handler, opts, queue) {
    const refuse = (err) => ({ sub: null, ready: Promise.reject(err) });
    if (this.state === "closed") return refuse(this._closedError());
    if (typeof handler !== "function") {
      return refuse(new SwitchyardError("bad_request", "subscribe needs a handler function"));
    }
    const signal = opts.signal;
    if (signal && signal.aborted) return refuse(abortError(signal));
    const key = subKey(pattern, opts.group);
    if (this._subs.has(key)) {
      return refuse(new SwitchyardError("already_subscribed", `already subscribed to ${pattern}` + (opts.group ? ` in group ${opts.group}` : "")));
    }
    const sub = new Subscription(this, pattern, handler, opts);
    sub._queue = queue;
    sub._offAbort = onAbort(signal, () => {
      const err = abortError(signal);
      this._unsubscribe(sub, err).catch(() => {});
    });
    this._subs.set(key, sub);
    if (this.state === "open") this._sendSubscribe(sub);
    else this._armPendingSubscribe(sub);
    return { sub, ready: sub._readyPromise };
  }

  /** The async-iterable form of subscribe. @private */
  _stream(pattern, opts) {
    const autoAck = !!opts.autoAck;
    const buffer = opts.buffer > 0 ? opts.buffer : DEFAULTS.streamBuffer;
    let sub = null;
    const queue = new AsyncQueue(buffer, { onReturn: () => sub && sub.unsubscribe().catch(() => {}) });
    const handler = (m, sub) => {
      if (queue.push(m)) return;
      if (queue.done) return;
      if (sub.group) {
        this.nack(m, "client queue full").catch((err) => this._emit("error", err));
        return;
      }
      this.stats.gaps++;
      this._emit("gap", { op: "gap", pattern: m.pattern, topic: m.topic, partition: m.partition, from: m.offset, to: m.offset + 1, reason: "client_queue_full" }, sub);
    };
    const r = this._subscribe(pattern, handler, { ...opts, autoAck: false }, queue);
    sub = r.sub;
    r.ready.then(
      () => {},
      (err) => queue.end(err),
    );
    return new MessageStream(this, r.sub, r.ready, queue, autoAck);
  }

  /**
   * Publishes one record. Resolves with the `published` reply
   * `{topic, partition, offset, duplicate?}`; rejects with a SwitchyardError
   * (`forbidden`, `backpressure`, `rate_limited`, `message_too_large`, ...).
   * While disconnected, the request waits for the next connection (up to the
   * request timeout). If the connection drops after it was sent the promise
   * rejects with `disconnected`: retrying with the same `msg_id` is safe.
   *
   * @param {string} topic
   * @param {any} data any JSON value
   * @param {object} [opts]
   * @param {string} [opts.key] partitioning key
   * @param {Object<string, string>} [opts.headers]
   * @param {string} [opts.msg_id] idempotency key: a repeat within the dedupe window is stored once
   * @param {0|1|2|3} [opts.priority] default 1
   * @param {AbortSignal} [opts.signal] rejects with code `aborted` when it
   *   fires before the reply; a publish still waiting for a connection is
   *   then never sent, one already sent may have been stored
   * @returns {Promise<{topic: string, partition: number, offset: number, duplicate?: boolean}>}
   */
  publish(topic, data, opts = {}) {
    const f = { op: "publish", topic, data: data === undefined ? null : data };
    for (const k of ["key", "headers", "msg_id", "priority"]) {
      if (opts[k] !== undefined) f[k] = opts[k];
    }
    return this._request(f, { signal: opts.signal });
  }

  /**
   * Acknowledges a consumer-group delivery: the group's committed offset may
   * move past it. Resolves on `acked`.
   * @param {{group: string, topic: string, partition: number, offset: number}} msg the delivered message
   * @returns {Promise<object>}
   */
  ack(msg) {
    if (!msg || !msg.group) return Promise.reject(new SwitchyardError("not_a_group_message", "ack needs a message with group"));
    const sub = this._subs.get(subKey(msg.pattern, msg.group));
    if (sub && sub._recent) sub._recent.set(tpKey(msg.topic, msg.partition) + "\u0000" + msg.offset, "acked");
    return this._request({ op: "ack", group: msg.group, topic: msg.topic, partition: msg.partition, offset: msg.offset });
  }

  /**
   * Rejects a consumer-group delivery: the server redelivers it after a
   * backoff, or dead-letters it after the maximum attempts. Resolves on
   * `nacked`.
   * @param {{group: string, topic: string, partition: number, offset: number}} msg the delivered message
   * @param {string|Error} [error] why, stored with the dead letter
   * @returns {Promise<object>}
   */
  nack(msg, error) {
    if (!msg || !msg.group) return Promise.reject(new SwitchyardError("not_a_group_message", "nack needs a message with group"));
    const sub = this._subs.get(subKey(msg.pattern, msg.group));
    // A nacked record comes back and must then reach the handler again.
    if (sub && sub._recent) sub._recent.delete(tpKey(msg.topic, msg.partition) + "\u0000" + msg.offset);
    const f = { op: "nack", group: msg.group, topic: msg.topic, partition: msg.partition, offset: msg.offset };
    if (error !== undefined && error !== null) f.error = error instanceof Error ? error.message : String(error);
    return this._request(f);
  }

  /** All current subscriptions. @returns {Subscription[]} */
  subscriptions() {
    return Array.from(this._subs.values());
  }

  /**
   * Closes the connection for good: no reconnect, every pending request
   * rejects with code `closed`.
   */
  close() {
    this._shutdown(this._closedError(), { code: 1000, reason: "client closed", willReconnect: false }, true);
  }

  // ---- internals ----------------------------------------------------------

  /**
   * Ends everything: rejects what waits with err, emits close with ev and
   * resolves closed() with err, or with undefined when byUser. @private
   */
  _shutdown(err, ev, byUser = false) {
    if (this.state === "closed") return;
    const result = byUser ? undefined : err;
    this._closeError = result;
    this._setState("closed");
    clearTimeout(this._retryTimer);
    clearTimeout(this._welcomeTimer);
    clearTimeout(this._liveTimer);
    for (const [id, p] of this._pending) {
      clearTimeout(p.timer);
      this._pending.delete(id);
      p.reject(err);
    }
    for (const sub of this._subs.values()) {
      if (sub.state === "pending") sub._ready.reject(err);
      sub.state = "closed";
      sub._ended(result);
    }
    this._subs.clear();
    if (this._first) {
      this._first.reject(err);
      this._first = null;
    }
    const ws = this._ws;
    this._ws = null;
    if (ws) {
      try {
        ws.close(1000, "client closed");
      } catch {
        /* already closing */
      }
    }
    this._emit("close", ev);
    this._resolveClosed(result);
  }

  /** @private */
  _closedError() {
    return new SwitchyardError("closed", "client closed");
  }

  /** @private */
  _emit(event, ...args) {
    const set = this._listeners.get(event);
    if (!set) return;
    for (const fn of Array.from(set)) {
      try {
        fn(...args);
      } catch (err) {
        if (event !== "error") this._emit("error", new SwitchyardError("handler_failed", `${event} listener threw: ${err && err.message}`, { cause: err }));
      }
    }
  }

  /** @private */
  _setState(s) {
    if (this.state === s) return;
    this.state = s;
    this._emit("state", s);
  }

  /** First connection; resolves on welcome. @private */
  _start() {
    return new Promise((resolve, reject) => {
      this._first = { resolve, reject };
      this._dial();
    });
  }

  /** Opens a socket. @private */
  async _dial() {
    let token = this._opts.token;
    if (typeof token === "function") {
      try {
        token = await token();
      } catch (err) {
        this._onSocketGone(null, { code: 4000, reason: "token: " + (err && err.message) });
        return;
      }
    }
    if (this.state === "closed") return;
    let ws;
    try {
      ws = this.transport === "sse" ? new SSESocket(this._url, token, this._opts) : new this._opts.WebSocket(buildURL(this._url, token));
    } catch (err) {
      this._onSocketGone(null, { code: 1006, reason: String((err && err.message) || err) });
      return;
    }
    this._ws = ws;
    this._welcomeTimer = setTimeout(() => {
      if (this._ws !== ws) return;
      try {
        ws.close(4000, "no welcome");
      } catch {
        /* ignore */
      }
      this._onSocketGone(ws, { code: 4000, reason: "timed out waiting for welcome" });
    }, this._opts.requestTimeoutMs);
    ws.onmessage = (ev) => {
      if (this._ws !== ws) return;
      this._received++;
      this._receivedAt = Date.now();
      if (typeof ev.data !== "string") return; // the protocol uses text frames only
      for (const frame of splitFrame(ev.data)) {
        if (frame instanceof Error) this._emit("error", frame);
        else this._onFrame(frame);
      }
    };
    ws.onclose = (ev) => this._onSocketGone(ws, ev || {});
    ws.onerror = () => {
      /* a close event follows; nothing to do here */
    };
  }

  /** @private */
  _onFrame(f) {
    // The reply to a liveness ping: a pong, or an older gateway's error.
    if (f.id !== undefined && f.id === this._pingId && (f.op === "pong" || f.op === "error")) return undefined;
    switch (f.op) {
      case "welcome":
        return this._onWelcome(f);
      case "message":
        return this._onMessage(f);
      case "gap":
        return this._onGap(f);
      case "topic_deleted":
        return this._emit("topic_deleted", f, this._subs.get(subKey(f.pattern, f.group)));
      case "refresh_required":
        return this._onRefreshRequired(f);
      case "join":
      case "leave":
        return this._onPresence(f);
      case "presence":
        if (f.id === undefined) return this._onPresenceResync(f);
        if (this._pending.has(f.id)) return this._settle(f.id, null, f);
        return undefined;
      case "unsubscribed":
        if (f.id === undefined && f.reason) return this._onRevoked(f);
        if (f.id !== undefined && this._pending.has(f.id)) return this._settle(f.id, null, f);
        return undefined;
      case "error":
        if (f.id !== undefined && this._pending.has(f.id)) {
          return this._settle(f.id, new SwitchyardError(f.code, f.message, { frame: f }), null);
        }
        return this._emit("error", new SwitchyardError(f.code, f.message, { frame: f }));
      default:
        if (f.id !== undefined && this._pending.has(f.id)) return this._settle(f.id, null, f);
      // Anything else is a frame from a newer server; ignore it.
    }
  }

  /** @private */
  _onWelcome(w) {
    clearTimeout(this._welcomeTimer);
    const reconnected = this.state === "reconnecting";
    this.session = w.session;
    this.epoch = w.epoch;
    this.limits = w.limits;
    this._attempt = 0;
    this._setState("open");
    if (reconnected) this.stats.reconnects++;
    this._watchLiveness(this._ws);

    // Resubscribe every subscription first, then send what waited.
    for (const sub of this._subs.values()) this._sendSubscribe(sub);
    for (const [id, p] of this._pending) {
      if (!p.sent && p.frame) {
        p.sent = true;
        this._send({ ...p.frame, id });
      }
    }
    this._emit("open", w);
    if (this._first) {
      this._first.resolve();
      this._first = null;
    }
  }

  /** @private */
  _onMessage(m) {
    const sub = this._subs.get(subKey(m.pattern, m.group));
    if (!sub || sub.state === "closed") return; // unsubscribed meanwhile
    if (sub._fossil) {
      try {
        m = takeMessage(sub._fossil, m);
      } catch (err) {
        return this._deltaFailed(sub, m, err);
      }
    }
    if (sub.group) {
      const k = tpKey(m.topic, m.partition) + "\u0000" + m.offset;
      const seen = sub._recent.get(k);
      if (seen !== undefined) {
        sub.duplicates++;
        this.stats.duplicates++;
        // Already acked: the ack was lost or late; ack again. Still being
        // handled: the handler's own ack will settle it.
        if (seen === "acked") this._send({ op: "ack", group: m.group, topic: m.topic, partition: m.partition, offset: m.offset });
        return;
      }
      sub._recent.set(k, "handling");
    } else if (typeof m.offset === "number") {
      const k = tpKey(m.topic, m.partition);
      const last = sub._last.get(k);
      if (last && m.offset <= last.offset) {
        sub.duplicates++;
        this.stats.duplicates++;
        return;
      }
      if (sub._epoch === undefined) sub._epoch = this.epoch;
      sub._last.set(k, { topic: m.topic, partition: m.partition, offset: m.offset });
    }
    sub.delivered++;
    let result;
    try {
      result = sub._handler(m, sub);
    } catch (err) {
      this._handlerFailed(sub, m, err);
      return;
    }
    if (sub.group && sub._opts.autoAck) {
      Promise.resolve(result).then(
        () => this.ack(m).catch((err) => this._emit("error", err)),
        (err) => this._handlerFailed(sub, m, err),
      );
    }
  }

  /** @private */
  _handlerFailed(sub, m, err) {
    this._emit(
      "error",
      new SwitchyardError("handler_failed", `handler for ${sub.pattern} threw: ${err && err.message}`, {
        cause: err,
        subscription: sub,
        frame: m,
      }),
    );
    if (sub.group && sub._opts.autoAck) this.nack(m, err).catch((e) => this._emit("error", e));
  }

  /** A delta that does not apply: reported, then a reconnect resumes with full messages. @private */
  _deltaFailed(sub, m, err) {
    this._emit("error", new SwitchyardError("bad_delta", err.message, { subscription: sub, frame: m }));
    const ws = this._ws;
    if (!ws) return;
    try {
      ws.close(4000, "bad delta");
    } catch {
      /* already closing */
    }
    this._onSocketGone(ws, { code: 4000, reason: "bad delta" });
  }

  /** @private */
  _onGap(g) {
    const sub = this._subs.get(subKey(g.pattern, g.group));
    if (sub && sub._fossil) forgetPart(sub._fossil, g);
    this.stats.gaps++;
    this._emit("gap", g, sub);
  }

  /** Sends (or re-sends) a subscribe and tracks its reply. @private */
  _sendSubscribe(sub) {
    const id = this._nextId++;
    const frame = sub._frame();
    const sentPositions = !!(frame.from && frame.from.positions);
    if (!sub.group && sub._epoch !== undefined && this.epoch !== undefined && sub._epoch !== this.epoch) {
      // A new log epoch restarts offsets: what the old one delivered no
      // longer dedupes. The frame carries the old positions, so the server
      // answers recovered:false and starts at the earliest retained record;
      // until a reply says so they are kept and sent again (_stale).
      if (sub._last.size > 0) sub._stale = { epoch: sub._epoch, last: sub._last };
      sub._last = new Map();
      sub._epoch = this.epoch;
    }
    const timer = setTimeout(() => {
      if (!this._pending.has(id)) return;
      this._pending.delete(id);
      if (sub.state === "pending") {
        const err = new SwitchyardError("timeout", `no reply to subscribe ${sub.pattern} within ${this._opts.requestTimeoutMs} ms`);
        this._dropSub(sub, err);
        sub._ready.reject(err);
        // The server may still have taken it; tell it we no longer want it.
        const f = { op: "unsubscribe", pattern: sub.pattern };
        if (sub.group) f.group = sub.group;
        this._send(f);
      } else {
        this._emit("error", new SwitchyardError("timeout", `no reply to resubscribe ${sub.pattern}`, { subscription: sub }));
      }
    }, this._opts.requestTimeoutMs);
    this._pending.set(id, {
      kind: "subscribe",
      sent: true,
      timer,
      resolve: (reply) => {
        if (sub.state === "closed") return;
        const wasPending = sub.state === "pending";
        sub.state = "active";
        if (reply.recovered !== undefined) sub.recovered = reply.recovered;
        if (sentPositions && reply.recovered !== undefined && sub._stale) {
          // The positions of the other epoch are settled: they apply again
          // (the gateway is back on their epoch), or this is the reset.
          if (reply.recovered && sub._last.size === 0) {
            sub._last = sub._stale.last;
            sub._epoch = sub._stale.epoch;
          }
          sub._stale = null;
        }
        if (sentPositions && reply.recovered === false) {
          this._emit("reset", { subscription: sub, pattern: sub.pattern, group: sub.group, epoch: this.epoch });
        }
        if (wasPending) sub._ready.resolve(sub);
      },
      reject: (err) => {
        if (sub.state === "closed") return;
        const wasPending = sub.state === "pending";
        this._dropSub(sub, err);
        err.subscription = sub;
        // A refused first subscribe rejects its promise; a refused
        // resubscribe after a reconnect can only be reported as an event.
        if (wasPending) sub._ready.reject(err);
        else this._emit("error", err);
      },
    });
    this._send({ ...frame, id });
  }

  /**
   * A subscribe made while disconnected: it is sent on the next welcome, but
   * its caller still gets a timeout. @private
   */
  _armPendingSubscribe(sub) {
    const t = setTimeout(() => {
      if (sub.state !== "pending" || this.state === "open") return;
      const err = new SwitchyardError("timeout", `not connected within ${this._opts.requestTimeoutMs} ms to subscribe ${sub.pattern}`);
      this._dropSub(sub, err);
      sub._ready.reject(err);
    }, this._opts.requestTimeoutMs);
    sub._readyPromise.then(
      () => clearTimeout(t),
      () => clearTimeout(t),
    );
  }

  /** @private */
  _dropSub(sub, err) {
    sub.state = "closed";
    sub._ended(err);
    const key = subKey(sub.pattern, sub.group);
    if (this._subs.get(key) === sub) this._subs.delete(key);
  }

  /** Ends sub; err (an abort) is what a pending subscribe rejects with. @private */
  _unsubscribe(sub, err) {
    if (sub.state === "closed") return Promise.resolve();
    const wasPending = sub.state === "pending";
    this._dropSub(sub, err);
    if (wasPending) sub._ready.reject(err || new SwitchyardError("closed", "unsubscribed before the server confirmed"));
    if (this.state !== "open") return Promise.resolve();
    const f = { op: "unsubscribe", pattern: sub.pattern };
    if (sub.group) f.group = sub.group;
    return this._request(f, { queue: false }).then(
      () => undefined,
      (err) => {
        // The session forgot it already (e.g. a reconnect raced the request).
        if (err.code === "not_subscribed" || err.code === "disconnected") return undefined;
        throw err;
      },
    );
  }

  /**
   * Sends a request with an id and resolves with the reply frame. When not
   * connected, the request waits for the next connection unless
   * opts.queue is false. @private
   */
  _request(frame, { queue = true, signal, onReply } = {}) {
    if (this.state === "closed") return Promise.reject(this._closedError());
    if (signal && signal.aborted) return Promise.reject(abortError(signal));
    const id = this._nextId++;
    return new Promise((resolve, reject) => {
      const open = this.state === "open";
      if (!open && !queue) {
        resolve(undefined);
        return;
      }
      const off = onAbort(signal, () => {
        const p = this._pending.get(id);
        if (!p) return;
        this._pending.delete(id);
        clearTimeout(p.timer);
        reject(abortError(signal));
      });
      const timer = setTimeout(() => {
        if (!this._pending.has(id)) return;
        this._pending.delete(id);
        off();
        reject(new SwitchyardError("timeout", `no reply to ${frame.op} within ${this._opts.requestTimeoutMs} ms`));
      }, this._opts.requestTimeoutMs);
      const done = (fn) => (v) => {
        off();
        fn(v);
      };
      this._pending.set(id, { kind: frame.op, frame, sent: open, timer, onReply, resolve: done(resolve), reject: done(reject) });
      if (open) this._send({ ...frame, id });
    });
  }

  /** @private */
  _settle(id, err, reply) {
    const p = this._pending.get(id);
    if (!p) return;
    this._pending.delete(id);
    clearTimeout(p.timer);
    if (err) p.reject(err);
    else {
      const { op: _op, id: _id, ...rest } = reply;
      if (p.onReply) p.onReply(rest); // at once, before the frames after the reply
      p.resolve(p.kind === "subscribe" ? reply : rest);
    }
  }

  /** @private */
  _send(obj) {
    const ws = this._ws;
    if (!ws || ws.readyState !== OPEN) return false;
    ws.send(JSON.stringify(obj));
    return true;
  }

  /**
   * Presents a new token on the open session. Resolves with
   * `{expires}` (RFC3339) once the server accepted it; the server then
   * judges every request, and every existing subscription, by the new
   * grants. Rejects with `unauthorized` or `forbidden` (the session keeps its
   * old token). A string token is also kept for later reconnects.
   * @param {string} token
   * @returns {Promise<{expires?: string}>}
   */
  refresh(token) {
    return this._request({ op: "refresh", token }, { queue: false }).then((r) => {
      if (typeof this._opts.token !== "function") this._opts.token = token;
      return r || {};
    });
  }

  /**
   * Who is present on a topic (sessions subscribed to it with
   * `presence: true`). Resolves with `{topic, count, members: [{session,
   * user, info?}]}`; rejects with `forbidden` without a subscribe grant.
   * @param {string} topic
   * @returns {Promise<{topic: string, count: number, members: Array<{session: string, user: string, info?: any}>}>}
   */
  presence(topic) {
    return this._request({ op: "presence", topic });
  }

  /** The server asks for a new token before the current one expires. @private */
  async _onRefreshRequired(f) {
    this._emit("refresh_required", f);
    const get = this._opts.token;
    if (typeof get !== "function" || this._refreshing) return;
    this._refreshing = true;
    try {
      const token = await get();
      if (this.state === "open") await this.refresh(token);
    } catch (err) {
      this._emit("error", err instanceof SwitchyardError ? err : new SwitchyardError("unauthorized", "token refresh failed: " + ((err && err.message) || err)));
    } finally {
      this._refreshing = false;
    }
  }

  /** The server ended a subscription (a refreshed token no longer allows it). @private */
  _onRevoked(f) {
    const sub = this._subs.get(subKey(f.pattern, f.group));
    if (!sub) return;
    this._dropSub(sub);
    this._emit("error", new SwitchyardError(f.reason, `subscription ${f.pattern} ended: the refreshed token does not allow it`, { frame: f }));
  }

  /**
   * The server dropped presence frames to this client: list the topic
   * again and emit `presence` with the list, at its reply, before any
   * later frame (the server sends the joins and leaves made meanwhile
   * after the reply). @private
   */
  _onPresenceResync(f) {
    const onReply = (list) => this._onPresence({ op: "presence", resync: true, ...list });
    this._request({ op: "presence", topic: f.topic }, { queue: false, onReply }).catch((err) => {
      if (this.state !== "closed") this._emit("error", err);
    });
  }

  /** A presence join, leave or resync. @private */
  _onPresence(f) {
    this._emit(f.op, f);
    for (const sub of this._subs.values()) {
      if (sub._onPresence) sub._onPresence(f);
    }
  }

  /**
   * Checks that ws is alive while it is the client's socket: after
   * pingIntervalMs without a frame it sends a ping op; when no frame at all
   * arrives within pongTimeoutMs after it, the socket is closed as dead.
   * Any frame proves the connection alive, so a busy one is never pinged.
   * Not for the SSE transport, whose EventSource watches its own stream.
   * @private
   */
  _watchLiveness(ws) {
    clearTimeout(this._liveTimer);
    this._probe = null;
    const every = this._opts.pingIntervalMs;
    if (!(every > 0) || this.transport !== "websocket" || !ws) return;
    const timeout = this._opts.pongTimeoutMs;
    this._receivedAt = Date.now();
    const check = () => {
      if (this._ws !== ws || this.state !== "open") return;
      const now = Date.now();
      const probe = this._probe;
      if (probe && this._received === probe.received) {
        const left = probe.sentAt + timeout - now;
        if (left > 0) {
          this._liveTimer = setTimeout(check, left);
          return;
        }
        const reason = `no reply to ping within ${timeout} ms`;
        try {
          ws.close(4000, reason);
        } catch {
          /* already closing */
        }
        this._onSocketGone(ws, { code: 4000, reason });
        return;
      }
      this._probe = null;
      const idle = now - this._receivedAt;
      if (idle < every) {
        this._liveTimer = setTimeout(check, every - idle);
        return;
      }
      const id = this._nextId++;
      this._pingId = id;
      this._probe = { id, received: this._received, sentAt: now };
      this._send({ op: "ping", id });
      this._liveTimer = setTimeout(check, timeout);
    };
    this._liveTimer = setTimeout(check, every);
  }

  /** The current socket closed (or never opened). @private */
  _onSocketGone(ws, ev) {
    if (ws !== null && this._ws !== ws) return; // an old socket
    clearTimeout(this._welcomeTimer);
    clearTimeout(this._liveTimer);
    this._probe = null;
    this._ws = null;
    if (ws) {
      ws.onmessage = ws.onclose = ws.onerror = null;
    }
    if (this.state === "closed") return;
    const code = ev.code === undefined ? 1006 : ev.code;
    const reason = ev.reason || "";

    // Requests already on the wire have an unknown outcome now.
    const lost = new SwitchyardError("disconnected", "connection lost before the reply" + (reason ? `: ${reason}` : ""), { closeCode: code });
    for (const [id, p] of this._pending) {
      if (!p.sent) continue;
      this._pending.delete(id);
      clearTimeout(p.timer);
      if (p.kind !== "subscribe") p.reject(lost); // subscriptions are resent on the next welcome
    }
    for (const sub of this._subs.values()) {
      if (sub.state === "pending") this._armPendingSubscribe(sub);
    }

    if (this._first && this._transport + 1 < this._transports.length) {
      // This transport cannot be opened here: try the next one at once.
      this._transport++;
      this.transport = this._transports[this._transport];
      this._emit("transport", { transport: this.transport, code, reason });
      this._dial();
      return;
    }
    if (this._first) {
      // The first attempt failed: report it instead of retrying in the dark.
      const err = new SwitchyardError("connect_failed", `could not connect to ${this._url} (close ${code}${reason ? ": " + reason : ""})`, { closeCode: code });
      this._shutdown(err, { code, reason, willReconnect: false });
      return;
    }
    // A policy close (1008) with a fixed token will fail the same way again.
    const hopeless = code === 1008 && typeof this._opts.token !== "function";
    const willReconnect = this._opts.reconnect && !hopeless;
    if (!willReconnect) {
      const err = new SwitchyardError(code === 1008 ? "unauthorized" : "closed", `connection closed (${code}${reason ? ": " + reason : ""})`, { closeCode: code });
      this._emit("error", err);
      this._shutdown(err, { code, reason, willReconnect: false });
      return;
    }
    this._emit("close", { code, reason, willReconnect });
    this._setState("reconnecting");
    const delayMs = backoffDelay(this._attempt, this._opts.minDelayMs, this._opts.maxDelayMs);
    this._attempt++;
    this._emit("reconnect", { attempt: this._attempt, delayMs });
    this._retryTimer = setTimeout(() => {
      if (this.state === "reconnecting") this._dial();
    }, delayMs);
  }
}

/**
 * The SSE transport: an object with the part of the WebSocket interface the
 * Client uses (readyState, send, close, onmessage, onclose), which receives
 * over an EventSource on `/v1/sse` and publishes with `POST /v1/publish`.
 * The client's ops are answered here: subscribe and unsubscribe change the
 * set of patterns and reopen the stream (resuming the patterns it had from
 * the last event id); publish is an HTTP request; what SSE cannot carry is
 * refused with code `unsupported`. @private
 */
class SSESocket {
  constructor(url, token, opts) {
    if (typeof opts.EventSource !== "function") throw new Error("no EventSource implementation: pass options.EventSource");
    const base = typeof globalThis.location !== "undefined" ? globalThis.location.href : undefined;
    const u = base ? new URL(url, base) : new URL(url);
    if (u.protocol === "ws:") u.protocol = "http:";
    if (u.protocol === "wss:") u.protocol = "https:";
    u.search = "";
    u.pathname = u.pathname.replace(/\/ws$/, "/sse");
    this._sseURL = u.toString();
    u.pathname = u.pathname.replace(/\/sse$/, "/publish");
    this._publishURL = u.toString();
    this._token = token;
    this._opts = opts;
    /** pattern -> {from, on_full, id?} in subscription order */
    this._patterns = new Map();
    this._es = null;
    this.readyState = OPEN;
    this.onmessage = null;
    this.onclose = null;
    this.onerror = null;
    // The Client waits for a welcome before it sends anything.
    setTimeout(() => this._deliver({ op: "welcome", session: "", transport: "sse" }), 0);
  }

  _deliver(frame) {
    if (this.readyState === OPEN && this.onmessage) this.onmessage({ data: JSON.stringify(frame) });
  }

  send(text) {
    const f = JSON.parse(text);
    const refuse = (code, message) => this._deliver({ op: "error", id: f.id, code, message });
    switch (f.op) {
      case "subscribe":
        if (f.group) return refuse("unsupported", "consumer groups need the WebSocket transport");
        if (f.filter || f.presence) return refuse("unsupported", "filters and presence need the WebSocket transport");
        this._patterns.set(f.pattern, { from: f.from, on_full: f.on_full, id: f.id });
        return this._reopen(f.from);
      case "unsubscribe":
        if (!this._patterns.delete(f.pattern)) return refuse("not_subscribed", `not subscribed to ${f.pattern}`);
        this._deliver({ op: "unsubscribed", id: f.id, pattern: f.pattern });
        return this._reopen(undefined);
      case "publish":
        return this._publish(f);
      case "ack":
      case "nack":
      case "refresh":
      case "presence":
        return refuse("unsupported", `${f.op} needs the WebSocket transport`);
      default:
        return refuse("bad_request", `unknown op ${f.op}`);
    }
  }

  async _publish(f) {
    const { op: _op, id, ...body } = f;
    const headers = { "Content-Type": "application/json" };
    if (this._token) headers.Authorization = "Bearer " + this._token;
    try {
      const resp = await this._opts.fetch(this._publishURL, { method: "POST", headers, body: JSON.stringify(body) });
      const reply = await resp.json().catch(() => ({}));
      if (resp.ok) this._deliver({ ...reply, op: "published", id });
      else this._deliver({ op: "error", id, code: reply.code || "unavailable", message: reply.message || `HTTP ${resp.status}` });
    } catch (err) {
      this._deliver({ op: "error", id, code: "disconnected", message: String((err && err.message) || err) });
    }
  }

  /** Opens the stream for the current patterns; from applies to those without positions. */
  _reopen(from) {
    if (this._es) this._es.close();
    this._es = null;
    if (this.readyState !== OPEN || this._patterns.size === 0) return;
    const q = new URLSearchParams();
    for (const [pattern, p] of this._patterns) {
      q.append("pattern", pattern);
      if (from === undefined && p.from !== undefined) from = p.from;
      if (p.on_full) q.set("on_full", p.on_full);
    }
    // Positions belong in the id; the stream resumes from it.
    if (from !== undefined && !(typeof from === "object" && from.positions)) q.set("from", typeof from === "string" ? from : JSON.stringify(from));
    if (this._opts.sseLastId) q.set("last_event_id", this._opts.sseLastId);
    if (this._token) q.set("token", this._token);
    const es = new this._opts.EventSource(this._sseURL + "?" + q.toString());
    this._es = es;
    const order = Array.from(this._patterns.keys());
    const own = (fn) => (ev) => {
      if (this._es === es) fn(ev);
    };
    es.onmessage = own((ev) => {
      // Kept on the client's options, so that the next SSESocket after a
      // reconnect resumes from it too.
      if (ev.lastEventId) this._opts.sseLastId = ev.lastEventId;
      if (this.onmessage) this.onmessage({ data: ev.data });
    });
    // The server numbers its subscribes 1..n in pattern order; answer the
    // client's pending subscribe ids.
    const reply = (ev) => {
      let f;
      try {
        f = JSON.parse(ev.data);
      } catch {
        return;
      }
      if (typeof f.id === "number") {
        const p = this._patterns.get(f.pattern || order[f.id - 1]);
        if (p && p.id !== undefined) {
          f.id = p.id;
          p.id = undefined;
        } else delete f.id;
      }
      this._deliver(f);
    };
    for (const name of ["subscribed", "gap", "topic_deleted", "refresh_required", "unsubscribed"]) es.addEventListener(name, own(reply));
    es.addEventListener("error", own((ev) => {
      if (ev.data !== undefined) return reply(ev); // the server's error event
      if (es.readyState === 2) {
        // EventSource gave up (an HTTP error): the session is gone.
        this._gone(1006, "event stream refused");
      }
      // Otherwise it reconnects by itself, resuming from the last id.
    }));
    es.addEventListener("close", own((ev) => {
      let f = {};
      try {
        f = JSON.parse(ev.data);
      } catch {
        /* ignore */
      }
      // A policy close (token expired) cannot be resumed with this token.
      if (f.code === 1008) this._gone(1008, f.reason || "");
    }));
  }

  _gone(code, reason) {
    if (this.readyState !== OPEN) return;
    this.readyState = 3;
    if (this._es) this._es.close();
    this._es = null;
    if (this.onclose) this.onclose({ code, reason });
  }

  close(code = 1000, reason = "") {
    this._gone(code, reason);
  }
}
