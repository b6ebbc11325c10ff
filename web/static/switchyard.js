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
// This file is the module's entry and its public API; client_base.js,
// client_frames.js, subscription.js and sse_transport.js beside it hold the
// rest, and are served and packed with it.
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

import { MAX_DELTA_OUTPUT_BYTES } from "./fossil.js";
import { SSESocket } from "./sse_transport.js";
import { ClientFrames } from "./client_frames.js";
import { Subscription } from "./subscription.js";
import { SwitchyardError, AsyncQueue, MessageStream, RecentSet, splitFrame, abortError, onAbort, gatewayURL, buildURL, binaryBytes, toBase64, subKey, tpKey } from "./client_base.js";

export { SwitchyardError, MessageStream, splitFrame, backoffDelay, RecentSet, AsyncQueue, buildURL } from "./client_base.js";
export { Subscription } from "./subscription.js";

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
  /**
   * The largest payload a delta message may claim (see fossil.js):
   * 64 MiB, the largest record NATS can hold; a larger claim is a
   * `bad_delta`.
   */
  maxDeltaBytes: MAX_DELTA_OUTPUT_BYTES,
});


/**
 * Connects to a Switchyard gateway. The returned promise resolves once the
 * server's `welcome` arrives, and rejects (code `connect_failed` or
 * `timeout`) if the first attempt fails; later drops are handled by automatic
 * reconnects.
 *
 * @param {string} url the gateway's WebSocket endpoint, e.g. `wss://host/v1/ws`
 * @param {object} [options]
 * @param {string | (() => string | Promise<string>)} [options.token]
 *   auth token, never put in a URL: over a WebSocket it is traded for a
 *   one-use ticket before every attempt (see `auth`), over SSE it goes in an
 *   `Authorization: Bearer` header; a function is called before every attempt,
 *   so it can hand out a fresh JWT
 * @param {"ticket"|"header"} [options.auth="ticket"] how a WebSocket attempt
 *   carries the token: `"ticket"` asks `POST /v1/tickets` (with the token in
 *   an `Authorization` header, through `fetch`) for a one-use ticket and
 *   opens `?ticket=`; `"header"` passes `{headers: {Authorization}}` as the
 *   WebSocket constructor's third argument, for implementations that take
 *   headers (Node's `ws` package), and needs no ticket
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
 * @param {number} [options.maxDeltaBytes=67108864] the largest payload a
 *   delta message may claim before the client allocates it; past it the
 *   message is a `bad_delta` (reported, then the client reconnects)
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
 * @param {typeof fetch} [options.fetch] fetch for tickets, and for reading
 *   and publishing over SSE (default `globalThis.fetch`)
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
      maxDeltaBytes: options.maxDeltaBytes || DEFAULTS.maxDeltaBytes,
      WebSocket: options.WebSocket || globalThis.WebSocket,
      EventSource: options.EventSource || globalThis.EventSource,
      fetch: options.fetch || (typeof globalThis.fetch === "function" ? globalThis.fetch.bind(globalThis) : undefined),
      auth: options.auth || "ticket",
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
      throw new SwitchyardError("bad_request", "no WebSocket implementation: this runtime has no global WebSocket (Node before 22 has none); pass one, e.g. connect(url, { WebSocket }) with WebSocket from the ws package");
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
   * Bytes (a Uint8Array, a Node Buffer, another ArrayBuffer view or an
   * ArrayBuffer) are stored as they are: they go as base64 with
   * `"encoding":"base64"`, and subscribers get them back as a Uint8Array.
   * Any other value is stored as its JSON.
   *
   * @param {string} topic
   * @param {any} data any JSON value, or bytes
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
    const bytes = binaryBytes(data);
    const f = bytes ? { op: "publish", topic, data: toBase64(bytes), encoding: "base64" } : { op: "publish", topic, data: data === undefined ? null : data };
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
      ws = this.transport === "sse" ? new SSESocket(this._url, token, this._opts) : await this._openWebSocket(token);
    } catch (err) {
      this._onSocketGone(null, { code: (err && err.closeCode) || 1006, reason: String((err && err.message) || err) });
      return;
    }
    if (this.state === "closed") {
      // Closed while a ticket was on its way.
      try {
        ws.close(1000, "");
      } catch {
        /* ignore */
      }
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
        // A failed delta dropped the socket: later frames would move
        // positions past it, which the resume must ask for again.
        if (this._ws !== ws) return;
        if (frame instanceof Error) this._emit("error", frame);
        else this._onFrame(frame);
      }
    };
    ws.onclose = (ev) => this._onSocketGone(ws, ev || {});
    ws.onerror = () => {
      /* a close event follows; nothing to do here */
    };
  }

  /**
   * Opens the WebSocket. With a token the credential never goes in the
   * URL: by default (`auth: "ticket"`) the client trades it for a one-use
   * ticket (`POST /v1/tickets` with an `Authorization` header) and the
   * URL carries `?ticket=`; with `auth: "header"` the token goes in an
   * `Authorization` header, for WebSocket implementations that take
   * headers (the `ws` package's third argument). Throws an Error with a
   * `closeCode`: 1008 when the gateway refuses the token or offers no
   * tickets (retrying would not help), 1006 otherwise. @private
   */
  async _openWebSocket(token) {
    const WS = this._opts.WebSocket;
    if (!token) return new WS(buildURL(this._url));
    if (this._opts.auth === "header") return new WS(buildURL(this._url), [], { headers: { Authorization: "Bearer " + token } });
    const fail = (closeCode, message) => Object.assign(new Error(message), { closeCode });
    if (typeof this._opts.fetch !== "function") throw fail(1008, "a token needs fetch to take a ticket: pass options.fetch, or auth: \"header\"");
    const u = new URL(this._url);
    u.protocol = u.protocol === "wss:" ? "https:" : "http:";
    u.search = "";
    u.pathname = u.pathname.replace(/\/ws$/, "/tickets");
    let resp;
    try {
      resp = await this._opts.fetch(u.toString(), { method: "POST", headers: { Authorization: "Bearer " + token, "Content-Type": "application/json" }, body: "{}" });
    } catch (err) {
      throw fail(1006, "ticket: " + ((err && err.message) || err));
    }
    const body = await resp.json().catch(() => ({}));
    if (!resp.ok || typeof body.ticket !== "string") {
      const why = (body && body.message) || `HTTP ${resp.status}`;
      if (resp.status === 401 || resp.status === 403) throw fail(1008, why);
      if (resp.status === 404 || resp.status === 405) {
        throw fail(1008, `the gateway offers no tickets (POST ${u.pathname}: ${why}); upgrade it, or pass auth: "header" with a WebSocket that takes headers`);
      }
      throw fail(1006, "ticket: " + why);
    }
    const url = new URL(buildURL(this._url));
    url.searchParams.set("ticket", body.ticket);
    return new WS(url.toString());
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

}

// The Client's frame handling, requests, liveness and reconnects live in
// client_frames.js; they are methods of Client like the others.
for (const name of Object.getOwnPropertyNames(ClientFrames.prototype)) {
  if (name !== "constructor") Object.defineProperty(Client.prototype, name, Object.getOwnPropertyDescriptor(ClientFrames.prototype, name));
}
