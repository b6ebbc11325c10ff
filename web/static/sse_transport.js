// sse_transport.js: the Switchyard JavaScript client's Server-Sent Events
// transport, used when a WebSocket cannot be opened (see the `transports`
// option of connect in switchyard.js). Part of the @switchyard/client
// package; not imported on its own.
//
// The credential never goes in a URL, where it would be kept in browser
// histories, proxy logs and the gateway's access log: with a token the
// stream is read with fetch and an `Authorization: Bearer` header
// (eventstream.js), as publishes already were. Without one a plain
// EventSource is used where there is one.

import { headerEventSource } from "./eventstream.js";

/** WebSocket readyState values the Client reads. */
const OPEN = 1;
const CLOSED = 3;

/**
 * The SSE transport: an object with the part of the WebSocket interface the
 * Client uses (readyState, send, close, onmessage, onclose), which receives
 * over an EventSource on `/v1/sse` and publishes with `POST /v1/publish`.
 * The client's ops are answered here: subscribe and unsubscribe change the
 * set of patterns and reopen the stream (resuming the patterns it had from
 * the last event id); publish is an HTTP request; what SSE cannot carry is
 * refused with code `unsupported`. When every subscription asked for
 * `delta: "fossil"` the stream asks for deltas (`delta=fossil`) and the
 * client applies them as on a WebSocket. @private
 */
export class SSESocket {
  constructor(url, token, opts) {
    if (token) {
      if (typeof opts.fetch !== "function") throw new Error("the SSE transport sends a token with fetch: pass options.fetch");
      // Read with fetch, the token in a header; a refusal of the stream is
      // the end of the session, as a WebSocket close would be: 401 and 403
      // as a policy close (the client stops: a token is wrong), others
      // as a drop (the client reconnects).
      const refused = (status, body) => {
        const why = (body && body.message) || `HTTP ${status}`;
        this._gone(status === 401 || status === 403 ? 1008 : 1006, why);
      };
      this._EventSource = headerEventSource(() => ({ Authorization: "Bearer " + this._token }), refused, opts.fetch);
    } else if (typeof opts.EventSource === "function") {
      this._EventSource = opts.EventSource;
    } else if (typeof opts.fetch === "function") {
      this._EventSource = headerEventSource(() => ({}), undefined, opts.fetch);
    } else {
      throw new Error("no EventSource implementation: pass options.EventSource or options.fetch");
    }
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
        this._patterns.set(f.pattern, { from: f.from, on_full: f.on_full, delta: f.delta, id: f.id });
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
    // delta=fossil applies to every pattern of a stream: asked for when
    // every subscription asked for deltas (the client applies them, as on
    // a WebSocket); otherwise every message comes full, which a delta
    // subscription takes as well.
    let delta = true;
    for (const p of this._patterns.values()) if (p.delta !== "fossil") delta = false;
    if (delta) q.set("delta", "fossil");
    // Positions belong in the id; the stream resumes from it.
    if (from !== undefined && !(typeof from === "object" && from.positions)) q.set("from", typeof from === "string" ? from : JSON.stringify(from));
    if (this._opts.sseLastId) q.set("last_event_id", this._opts.sseLastId);
    // The token is never put in the URL: with one, _EventSource sends it
    // in the Authorization header.
    const es = new this._EventSource(this._sseURL + "?" + q.toString());
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
    this.readyState = CLOSED;
    if (this._es) this._es.close();
    this._es = null;
    if (this.onclose) this.onclose({ code, reason });
  }

  close(code = 1000, reason = "") {
    this._gone(code, reason);
  }
}
