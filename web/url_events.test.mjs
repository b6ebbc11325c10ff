// The client's URL rule (the Go client's) and its topic_deleted event, run
// with `node --test web/`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { connect, buildURL } from "./static/switchyard.js";
import { FakeWS, latest, until, open, subscribed, msg } from "./fakews.mjs";

test("the gateway URL follows the Go client's rule", async (t) => {
  const cases = [
    { name: "http with a slash", url: "http://host:8080/", want: "ws://host:8080/v1/ws" },
    { name: "http without a path", url: "http://host:8080", want: "ws://host:8080/v1/ws" },
    { name: "https", url: "https://gw.example", want: "wss://gw.example/v1/ws" },
    { name: "ws without a path", url: "ws://host:8080", want: "ws://host:8080/v1/ws" },
    { name: "an explicit path is kept", url: "wss://gw.example/switchyard/v1/ws", want: "wss://gw.example/switchyard/v1/ws" },
    { name: "a query is kept", url: "http://host/?envelope=lean", want: "ws://host/v1/ws?envelope=lean" },
  ];
  for (const c of cases) {
    await t.test(c.name, async () => {
      assert.equal(buildURL(c.url), c.want);
      FakeWS.sockets = [];
      const p = connect(c.url, { WebSocket: FakeWS, reconnect: false });
      await until(() => FakeWS.sockets.length === 1);
      assert.equal(latest().url, c.want);
      latest().welcome();
      (await p).close();
    });
  }
  for (const bad of ["ftp://host/", "host:8080", "not a url"]) {
    await t.test(`refused: ${bad}`, async () => {
      await assert.rejects(connect(bad, { WebSocket: FakeWS }), (err) => err.code === "bad_request" && err.message.includes(bad));
    });
  }
});

test("topic_deleted is an event with its subscription, which stays open", async () => {
  const { client, ws } = await open();
  const got = [];
  const sub = await subscribed(client, ws, "orders.#", (m) => got.push(m.offset));
  const events = [];
  client.on("topic_deleted", (ev, s) => events.push([ev, s]));
  ws.recv({ op: "topic_deleted", pattern: "orders.#", topic: "orders.eu" });
  await until(() => events.length === 1);
  assert.equal(events[0][0].topic, "orders.eu");
  assert.equal(events[0][0].pattern, "orders.#");
  assert.equal(events[0][1], sub);
  assert.equal(sub.state, "active");
  ws.recv(msg("orders.#", "orders.eu", 0, 0));
  await until(() => got.length === 1);
  client.close();
});

test("without a WebSocket the error says how to pass one", async () => {
  const saved = globalThis.WebSocket;
  globalThis.WebSocket = undefined;
  try {
    await assert.rejects(connect("ws://gw.test/v1/ws"), (err) => err.code === "bad_request" && /Node before 22/.test(err.message) && /connect\(url, \{ WebSocket \}\)/.test(err.message) && /ws package/.test(err.message));
  } finally {
    globalThis.WebSocket = saved;
  }
});
