// The client's SSE transport (static/sse_transport.js) with a token: the
// token goes in an Authorization header, never in a URL. Run with
// `node --test web/`; the gateway is a fetch that answers from the test.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "./static/switchyard.js";
import { until } from "./fakews.mjs";
import { checksum } from "./static/fossil.js";

/** A WebSocket that a proxy refuses: it closes before it opens. */
class Refused {
  constructor() {
    this.readyState = 0;
    setTimeout(() => this.onclose && this.onclose({ code: 1006, reason: "refused" }), 0);
  }
  send() {}
  close() {}
}

/** An EventSource that must not be used: it would need the token in its URL. */
class NoEventSource {
  constructor(url) {
    throw new Error("EventSource used for " + url);
  }
}

/**
 * A gateway behind fetch: every request is recorded; /v1/sse answers with
 * an event stream the test writes to (streams[i].send), or with the status
 * in refuse (as /v1/tickets does then); /v1/tickets answers a ticket;
 * /v1/publish answers published.
 */
function fakeGateway({ refuse } = {}) {
  const requests = [];
  const streams = [];
  const enc = new TextEncoder();
  const fetch = async (url, init = {}) => {
    const headers = { ...(init.headers || {}) };
    requests.push({ url: String(url), headers, body: init.body });
    const path = new URL(url).pathname;
    if (path === "/v1/publish") {
      return Response.json({ topic: JSON.parse(init.body).topic, partition: 0, offset: 7 });
    }
    if (refuse) return Response.json({ code: "unauthorized", message: "the token has expired" }, { status: refuse });
    if (path === "/v1/tickets") {
      // The WebSocket attempt's ticket (the proxy then refuses the upgrade).
      return Response.json({ ticket: "tk", expires: "2026-12-01T08:00:10Z", ttl_ms: 10000 }, { status: 201 });
    }
    let ctl;
    const body = new ReadableStream({ start: (c) => (ctl = c) });
    const s = {
      url: String(url),
      send: (text) => ctl.enqueue(enc.encode(text)),
      end: () => ctl.close(),
    };
    init.signal?.addEventListener("abort", () => {
      try {
        ctl.error(new Error("aborted"));
      } catch {
        /* closed */
      }
    });
    streams.push(s);
    return new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream" } });
  };
  return { fetch, requests, streams };
}

test("over SSE the token goes in the Authorization header, never in a URL", async (t) => {
  const gw = fakeGateway();
  let n = 0;
  const client = await connect("http://gw.test/v1/ws", {
    WebSocket: Refused,
    EventSource: NoEventSource,
    fetch: gw.fetch,
    token: () => "secret-" + ++n,
    reconnect: { minDelayMs: 1, maxDelayMs: 4 },
    requestTimeoutMs: 2000,
  });
  t.after(() => client.close());
  assert.equal(client.transport, "sse");
  const got = [];
  const sub = client.subscribe("orders.#", (m) => got.push(m.data), { from: "earliest" });
  await until(() => gw.streams.length === 1);
  gw.streams[0].send('event: subscribed\ndata: {"op":"subscribed","id":1,"pattern":"orders.#"}\n\n');
  await sub;
  gw.streams[0].send('id: k.1\ndata: {"op":"message","pattern":"orders.#","topic":"orders.eu","partition":0,"offset":0,"data":{"n":1},"time":"2026-11-29T08:00:00.000Z"}\n\n');
  await until(() => got.length === 1);
  assert.deepEqual(got, [{ n: 1 }]);
  const res = await client.publish("orders.eu", { n: 2 });
  assert.equal(res.offset, 7);

  // A dropped stream is read again with the header and the last id.
  gw.streams[0].end();
  await until(() => gw.streams.length === 2);
  for (const r of gw.requests) {
    assert.ok(!r.url.includes("secret"), `a token in the URL ${r.url}`);
    assert.match(r.headers.Authorization, /^Bearer secret-\d+$/, r.url);
  }
  assert.equal(gw.requests.find((r) => r.url.includes("/v1/sse")).headers.Accept, "text/event-stream");
  const resumed = gw.requests.filter((r) => r.url.includes("/v1/sse"))[1];
  assert.equal(resumed.headers["Last-Event-ID"], "k.1");
});

test("over SSE a refused token ends the client as unauthorized", async () => {
  const gw = fakeGateway({ refuse: 401 });
  const client = await connect("http://gw.test/v1/ws", {
    WebSocket: Refused,
    transports: ["websocket", "sse"],
    fetch: gw.fetch,
    token: "stale",
    reconnect: { minDelayMs: 1, maxDelayMs: 4 },
    requestTimeoutMs: 2000,
  });
  client.on("error", () => {});
  const sub = client.subscribe("orders.#", () => {});
  await assert.rejects(sub);
  const why = await client.closed();
  assert.equal(why.code, "unauthorized");
  assert.match(why.message, /the token has expired/);
  assert.equal(gw.requests.filter((r) => r.url.includes("/v1/sse")).length, 1, "no retry with a refused token");
  for (const r of gw.requests) assert.ok(!r.url.includes("stale"), r.url);
});

test("without a token SSE uses EventSource, and fetch where there is none", async (t) => {
  const urls = [];
  class RecordingES {
    constructor(url) {
      urls.push(url);
      this.readyState = 0;
    }
    addEventListener() {}
    close() {}
  }
  const gw = fakeGateway();
  const a = await connect("http://gw.test/", { WebSocket: Refused, EventSource: RecordingES, fetch: gw.fetch, reconnect: { minDelayMs: 1, maxDelayMs: 4 } });
  t.after(() => a.close());
  a.subscribe("a.b", () => {}).catch(() => {});
  await until(() => urls.length === 1);
  assert.equal(urls[0], "http://gw.test/v1/sse?pattern=a.b");
  assert.equal(gw.streams.length, 0);

  const b = await connect("http://gw.test/", { WebSocket: Refused, transports: ["websocket", "sse"], fetch: gw.fetch, reconnect: { minDelayMs: 1, maxDelayMs: 4 } });
  t.after(() => b.close());
  b.subscribe("a.c", () => {}).catch(() => {});
  await until(() => gw.streams.length === 1);
  assert.equal(gw.streams[0].url, "http://gw.test/v1/sse?pattern=a.c");
});

// A Fossil delta that turns origin into target: copy their common prefix,
// insert the rest (as fossil.test.mjs builds them).
const DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~";
function int(n) {
  let s = "";
  do {
    s = DIGITS[n % 64] + s;
    n = Math.floor(n / 64);
  } while (n > 0);
  return s;
}
function prefixDelta(origin, target) {
  let p = 0;
  while (p < origin.length && p < target.length && origin[p] === target[p]) p++;
  const t = new TextEncoder().encode(target);
  return `${int(t.length)}\n${int(p)}@0,${int(t.length - p)}:${target.slice(p)}${int(checksum(t))};`;
}

test("over SSE a delta subscription asks for deltas and applies them", async (t) => {
  const gw = fakeGateway();
  const client = await connect("http://gw.test/v1/ws", { WebSocket: Refused, EventSource: NoEventSource, fetch: gw.fetch, token: "jwt", reconnect: { minDelayMs: 1, maxDelayMs: 4 } });
  t.after(() => client.close());
  const got = [];
  const errors = [];
  client.on("error", (e) => errors.push(e));
  const sub = client.subscribe("dash", (m) => got.push(m), { delta: "fossil" });
  await until(() => gw.streams.length === 1);
  assert.equal(new URL(gw.streams[0].url).searchParams.get("delta"), "fossil");
  gw.streams[0].send('event: subscribed\ndata: {"op":"subscribed","id":1,"pattern":"dash"}\n\n');
  await sub;
  // Written with spaces JSON.stringify would drop: the delta applies to
  // the bytes as the gateway wrote them.
  const v0 = '{"cpu": 1.50, "n": 0}';
  const v1 = '{"cpu": 1.50, "n": 1}';
  const v2 = '{"cpu": 1.50, "n": 2, "x": "é"}';
  gw.streams[0].send(`id: k.1\ndata: {"op":"message","pattern":"dash","topic":"dash","partition":0,"offset":0,"data":${v0}}\n\n`);
  gw.streams[0].send(`id: k.2\ndata: ${JSON.stringify({ op: "message", pattern: "dash", topic: "dash", partition: 0, offset: 1, data: prefixDelta(v0, v1), delta: true })}\n\n`);
  gw.streams[0].send(`id: k.3\ndata: ${JSON.stringify({ op: "message", pattern: "dash", topic: "dash", partition: 0, offset: 2, data: prefixDelta(v1, v2), delta: true })}\n\n`);
  await until(() => got.length === 3);
  assert.deepEqual(got.map((m) => m.data), [JSON.parse(v0), JSON.parse(v1), JSON.parse(v2)]);
  for (const m of got) assert.equal(m.delta, undefined);
  assert.deepEqual(errors, []);

  // A gap forgets the base: a delta after it is a bad_delta, and the
  // client reconnects, its stream asking for deltas again.
  gw.streams[0].send('event: gap\ndata: {"op":"gap","pattern":"dash","topic":"dash","partition":0,"from":3,"to":4,"reason":"queue_full"}\n\n');
  gw.streams[0].send(`id: k.5\ndata: ${JSON.stringify({ op: "message", pattern: "dash", topic: "dash", partition: 0, offset: 4, data: prefixDelta(v2, v1), delta: true })}\n\n`);
  await until(() => errors.length === 1);
  assert.equal(errors[0].code, "bad_delta");
  assert.equal(got.length, 3);
  await until(() => gw.streams.length === 2);
  assert.equal(new URL(gw.streams[1].url).searchParams.get("delta"), "fossil");
});

test("over SSE a stream with a subscription without deltas asks for none", async (t) => {
  const gw = fakeGateway();
  const client = await connect("http://gw.test/v1/ws", { WebSocket: Refused, EventSource: NoEventSource, fetch: gw.fetch, token: "jwt", reconnect: { minDelayMs: 1, maxDelayMs: 4 } });
  t.after(() => client.close());
  client.subscribe("dash", () => {}, { delta: "fossil" }).catch(() => {});
  await until(() => gw.streams.length === 1);
  assert.equal(new URL(gw.streams[0].url).searchParams.get("delta"), "fossil");
  client.subscribe("plain", () => {}).catch(() => {});
  await until(() => gw.streams.length === 2);
  assert.equal(new URL(gw.streams[1].url).searchParams.get("delta"), null);
  assert.deepEqual(new URL(gw.streams[1].url).searchParams.getAll("pattern"), ["dash", "plain"]);
});
