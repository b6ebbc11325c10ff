// client_base.js: the parts of the Switchyard JavaScript client that stand
// alone: its error type, frame splitting, backoff, the bounded sets and
// queues behind streams and duplicate detection, URLs and base64. Part of
// the @switchyard/client package; switchyard.js re-exports what is public
// (SwitchyardError, MessageStream) and what its tests use.

import { keepText } from "./fossil.js";

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
export function abortError(signal) {
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
export function onAbort(signal, onAbort) {
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
export function gatewayURL(url) {
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

/**
 * The bytes of data when it is binary (a Uint8Array, a Node Buffer, any
 * other ArrayBuffer view, or an ArrayBuffer), else null.
 *
 * @param {any} data
 * @returns {Uint8Array|null}
 */
export function binaryBytes(data) {
  if (data instanceof Uint8Array) return data;
  if (ArrayBuffer.isView(data)) return new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  if (data instanceof ArrayBuffer) return new Uint8Array(data);
  if (typeof SharedArrayBuffer !== "undefined" && data instanceof SharedArrayBuffer) return new Uint8Array(data);
  return null;
}

/**
 * Standard base64 of bytes, as the protocol's `"encoding":"base64"` wants.
 *
 * @param {Uint8Array} bytes
 * @returns {string}
 */
export function toBase64(bytes) {
  // btoa takes a "binary string": one char per byte. Built in chunks so
  // that a large payload does not overflow the argument list.
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000) {
    s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
  }
  return btoa(s);
}

/**
 * The bytes of standard base64 text; throws on anything else.
 *
 * @param {string} text
 * @returns {Uint8Array}
 */
export function fromBase64(text) {
  const s = atob(text);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

/** @param {string} topic @param {number} partition */
export function tpKey(topic, partition) {
  return topic + "\u0000" + partition;
}

/** @param {string} pattern @param {string} [group] */
export function subKey(pattern, group) {
  return group ? pattern + "\u0000" + group : pattern;
}
