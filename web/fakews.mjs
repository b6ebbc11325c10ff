// A WebSocket stand-in and helpers shared by the client's node tests. The
// client talks to FakeWS in process; no network is used.

import { connect } from "./static/switchyard.js";

/** A WebSocket stand-in driven by the test: it records what the client sends. */
export class FakeWS {
  static sockets = [];
  constructor(url, protocols, options) {
    this.url = url;
    this.options = options;
    this.readyState = 0;
    this.sent = [];
    this.closedWith = null;
    FakeWS.sockets.push(this);
  }
  send(text) {
    if (this.readyState !== 1) throw new Error("send on a socket that is not open");
    this.sent.push(JSON.parse(text));
  }
  close(code, reason) {
    if (this.readyState === 3) return;
    this.readyState = 3;
    this.closedWith = { code, reason };
    queueMicrotask(() => this.onclose && this.onclose({ code, reason }));
  }
  // ---- test side ----
  /** Opens the socket and sends welcome. */
  welcome(epoch = "e1", session = "s" + FakeWS.sockets.length) {
    this.readyState = 1;
    this.recv({ op: "welcome", session, epoch, limits: { max_frame_bytes: 1048576, max_subscriptions: 100, queue_messages: 1024 } });
  }
  /** Delivers one frame holding the given objects separated by newlines. */
  recv(...objs) {
    this.onmessage({ data: objs.map((o) => (typeof o === "string" ? o : JSON.stringify(o))).join("\n") });
  }
  /** The server side drops the connection. */
  drop(code = 1006, reason = "") {
    this.readyState = 3;
    this.onclose({ code, reason });
  }
  /** The last frame the client sent with this op. */
  last(op) {
    for (let i = this.sent.length - 1; i >= 0; i--) if (this.sent[i].op === op) return this.sent[i];
    return undefined;
  }
}

export function latest() {
  return FakeWS.sockets[FakeWS.sockets.length - 1];
}

/** Waits until cond() is truthy, polling with a deadline. */
export async function until(cond, ms = 2000) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 2));
  }
}

/**
 * A fetch that answers POST /v1/tickets as the gateway does: ticket "tkN"
 * for the request's Authorization header, kept in tickets.issued (ticket
 * -> credential) for the test to read.
 */
export const tickets = {
  issued: new Map(),
  requests: [],
  async fetch(url, init = {}) {
    tickets.requests.push({ url, init });
    const u = new URL(url);
    if (!u.pathname.endsWith("/v1/tickets") || init.method !== "POST") return Response.json({ code: "not_found", message: "no such path" }, { status: 404 });
    const auth = (init.headers && init.headers.Authorization) || "";
    const id = "tk" + (tickets.issued.size + 1);
    tickets.issued.set(id, auth.replace(/^Bearer /, ""));
    return Response.json({ ticket: id, expires: "2026-12-01T08:00:10Z", ttl_ms: 10000 }, { status: 201 });
  },
};

/** A connected client and its socket. */
export async function open(opts = {}) {
  FakeWS.sockets = [];
  tickets.issued.clear();
  tickets.requests.length = 0;
  const p = connect("ws://gw.test/v1/ws", { WebSocket: FakeWS, fetch: tickets.fetch, reconnect: { minDelayMs: 1, maxDelayMs: 4 }, ...opts });
  await until(() => FakeWS.sockets.length === 1);
  latest().welcome();
  const client = await p;
  return { client, ws: latest() };
}

/** Subscribes and answers the subscribe frame. */
export async function subscribed(client, ws, pattern, handler, opts = {}) {
  const p = client.subscribe(pattern, handler, opts);
  const f = ws.last("subscribe");
  ws.recv({ op: "subscribed", id: f.id, pattern, ...(opts.group ? { group: opts.group } : {}) });
  return p;
}

/** A message frame. */
export function msg(pattern, topic, partition, offset, extra = {}) {
  return { op: "message", pattern, topic, partition, offset, data: { n: offset }, time: "2026-11-29T08:00:00.000Z", ...extra };
}
