// The client's SSE transport (static/sse_transport.js) with a token: the
// token goes in an Authorization header, never in a URL. Run with
// `node --test web/`; the gateway is a fetch that answers from the test.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "./static/switchyard.js";
import { until } from "./fakews.mjs";

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
 * in refuse; /v1/publish answers published.
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
