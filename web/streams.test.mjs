// Tests for the client's async-iterable, AbortSignal, closed() and status()
// surface, run with `node --test web/`. The client is imported by its
// package name, so these also check web/package.json's exports map.

import { test } from "node:test";
import assert from "node:assert/strict";
import { connect, AsyncQueue, MessageStream, DEFAULTS } from "@switchyard/client";
import { FakeWS, latest, until, open, subscribed, msg } from "./fakews.mjs";

/** Answers the last subscribe frame on ws. */
function confirm(ws, extra = {}) {
  const f = ws.last("subscribe");
  ws.recv({ op: "subscribed", id: f.id, pattern: f.pattern, ...(f.group ? { group: f.group } : {}), ...extra });
  return f;
}

test("AsyncQueue buffers, bounds, ends and rethrows", async () => {
  const q = new AsyncQueue(2);
  assert.equal(q.push(1), true);
  assert.equal(q.push(2), true);
  assert.equal(q.push(3), false, "a full queue refuses");
  assert.equal(q.size, 2);
  assert.deepEqual(await q.next(), { value: 1, done: false });
  const waiting = q.next(); // 2 is buffered
  const later = q.next(); // waits for a push
  q.push(4);
  assert.equal((await waiting).value, 2);
  assert.equal((await later).value, 4);
  q.push(5);
  q.end(new Error("boom"));
  assert.equal(q.push(6), false, "an ended queue refuses");
  assert.equal((await q.next()).value, 5, "buffered values come before the error");
  await assert.rejects(q.next(), /boom/);
  assert.equal((await q.next()).done, true, "the error is thrown once");

  const drop = new AsyncQueue(2, { dropOldest: true });
  drop.push("a");
  drop.push("b");
  assert.equal(drop.push("c"), true);
  assert.deepEqual([(await drop.next()).value, (await drop.next()).value], ["b", "c"]);

  let returned = 0;
  const r = new AsyncQueue(4, { onReturn: () => returned++ });
  r.push(1);
  for await (const v of r) {
    assert.equal(v, 1);
    break;
  }
  await r.return();
  assert.equal(returned, 1, "onReturn runs once");
  assert.equal(r.done, true);
});

test("subscribe without a handler iterates messages; break unsubscribes", async () => {
  const { client, ws } = await open();
  const stream = client.subscribe("orders.#", { from: "earliest" });
  assert.ok(stream instanceof MessageStream);
  const f = confirm(ws);
  assert.equal(f.from, "earliest");
  assert.equal(f.buffer, undefined, "client-side options stay local");
  const sub = await stream.ready;
  assert.equal(sub.state, "active");
  ws.recv(msg("orders.#", "orders.a", 0, 0), msg("orders.#", "orders.b", 0, 0), msg("orders.#", "orders.a", 0, 1));
  const got = [];
  for await (const m of stream) {
    got.push(`${m.topic}/${m.offset}`);
    if (got.length === 3) break;
  }
  assert.deepEqual(got, ["orders.a/0", "orders.b/0", "orders.a/1"]);
  await until(() => ws.last("unsubscribe"));
  assert.equal(ws.last("unsubscribe").pattern, "orders.#");
  assert.equal(sub.state, "closed");
  client.close();
});

test("a refused stream subscription throws from the loop", async () => {
  const { client, ws } = await open();
  const stream = client.subscribe("a..b");
  ws.recv({ op: "error", id: ws.last("subscribe").id, code: "invalid_pattern", message: "empty segment" });
  await assert.rejects(async () => {
    for await (const _ of stream) assert.fail("no message expected");
  }, (err) => err.code === "invalid_pattern");
  await assert.rejects(stream.ready, (err) => err.code === "invalid_pattern");
  client.close();
});

test("a stream ends on unsubscribe and on close", async () => {
  const { client, ws } = await open();
  const a = client.subscribe("a");
  confirm(ws);
  await a.ready;
  ws.recv(msg("a", "a", 0, 0));
  const u = a.unsubscribe();
  ws.recv({ op: "unsubscribed", id: ws.last("unsubscribe").id });
  await u;
  const got = [];
  for await (const m of a) got.push(m.offset);
  assert.deepEqual(got, [0], "buffered messages are still read");

  const b = client.subscribe("b");
  confirm(ws);
  await b.ready;
  const loop = (async () => {
    for await (const _ of b);
    return "ended";
  })();
  client.close();
  assert.equal(await loop, "ended");
});

test("a full stream buffer reports a gap for plain messages and nacks group ones", async () => {
  const { client, ws } = await open();
  const gaps = [];
  client.on("gap", (g) => gaps.push([g.topic, g.from, g.to, g.reason]));
  const plain = client.subscribe("p", { buffer: 1 });
  confirm(ws);
  await plain.ready;
  ws.recv(msg("p", "p", 0, 0), msg("p", "p", 0, 1));
  assert.deepEqual(gaps, [["p", 1, 2, "client_queue_full"]]);
  assert.equal(client.stats.gaps, 1);

  const group = client.subscribe("g", { group: "w", buffer: 1 });
  confirm(ws);
  await group.ready;
  ws.recv(msg("g", "g", 0, 0, { group: "w", attempt: 1 }), msg("g", "g", 0, 1, { group: "w", attempt: 1 }));
  const nack = ws.last("nack");
  assert.deepEqual({ ...nack, id: 0 }, { op: "nack", id: 0, group: "w", topic: "g", partition: 0, offset: 1, error: "client queue full" });
  assert.equal(DEFAULTS.streamBuffer, 1024);
  client.close();
});

test("autoAck on a stream acks a message when the loop asks for the next", async () => {
  const { client, ws } = await open();
  const stream = client.subscribe("jobs", { group: "g", autoAck: true });
  confirm(ws);
  await stream.ready;
  ws.recv(msg("jobs", "jobs", 0, 0, { group: "g", attempt: 1 }), msg("jobs", "jobs", 0, 1, { group: "g", attempt: 1 }));
  const it = stream[Symbol.asyncIterator]();
  assert.equal((await it.next()).value.offset, 0);
  assert.equal(ws.last("ack"), undefined, "not acked while being handled");
  assert.equal((await it.next()).value.offset, 1);
  assert.equal(ws.last("ack").offset, 0);
  await it.return();
  assert.equal(ws.last("ack").offset, 0, "a message the loop left is not acked");
  client.close();
});

test("an AbortSignal on connect rejects a pending connect and closes an open client", async () => {
  FakeWS.sockets = [];
  const ac = new AbortController();
  const p = connect("ws://gw.test/v1/ws", { WebSocket: FakeWS, signal: ac.signal });
  await until(() => FakeWS.sockets.length === 1);
  ac.abort(new Error("user left"));
  await assert.rejects(p, (err) => err.code === "aborted" && /user left/.test(err.message));
  assert.equal(latest().closedWith.code, 1000);

  await assert.rejects(connect("ws://gw.test/v1/ws", { WebSocket: FakeWS, signal: AbortSignal.abort() }), (err) => err.code === "aborted");

  const ac2 = new AbortController();
  const { client } = await open({ signal: ac2.signal });
  ac2.abort();
  assert.equal(client.state, "closed");
  assert.equal((await client.closed()).code, "aborted");
});

test("an AbortSignal on subscribe rejects a pending subscribe and ends an active one", async () => {
  const { client, ws } = await open();
  const ac = new AbortController();
  const p = client.subscribe("a", () => {}, { signal: ac.signal });
  ac.abort();
  await assert.rejects(p, (err) => err.code === "aborted");
  assert.equal(ws.last("unsubscribe").pattern, "a");
  assert.equal(client.subscriptions().length, 0);

  await assert.rejects(client.subscribe("a", () => {}, { signal: AbortSignal.abort() }), (err) => err.code === "aborted");

  const ac2 = new AbortController();
  const got = [];
  const sub = await subscribed(client, ws, "b", (m) => got.push(m.offset), { signal: ac2.signal });
  ws.recv(msg("b", "b", 0, 0));
  ac2.abort();
  assert.equal(sub.state, "closed");
  ws.recv(msg("b", "b", 0, 1));
  assert.deepEqual(got, [0]);

  const ac3 = new AbortController();
  const stream = client.subscribe("c", { signal: ac3.signal });
  confirm(ws);
  await stream.ready;
  ac3.abort();
  await assert.rejects(async () => {
    for await (const _ of stream);
  }, (err) => err.code === "aborted");
  client.close();
});

test("an AbortSignal on publish rejects it; a queued publish is never sent", async () => {
  const { client, ws } = await open();
  const ac = new AbortController();
  const p = client.publish("a", 1, { signal: ac.signal });
  assert.equal(ws.last("publish").signal, undefined, "the signal is not sent");
  ac.abort();
  await assert.rejects(p, (err) => err.code === "aborted");
  await assert.rejects(client.publish("a", 1, { signal: AbortSignal.abort() }), (err) => err.code === "aborted");

  ws.drop();
  const ac2 = new AbortController();
  const queued = client.publish("a", 2, { signal: ac2.signal });
  ac2.abort();
  await assert.rejects(queued, (err) => err.code === "aborted");
  await until(() => FakeWS.sockets.length === 2);
  latest().welcome();
  assert.equal(latest().last("publish"), undefined);
  client.close();
});

test("closed() resolves with undefined after close and with the cause otherwise", async () => {
  const { client } = await open();
  let settled = false;
  client.closed().then(() => (settled = true));
  await new Promise((r) => setTimeout(r, 5));
  assert.equal(settled, false);
  client.close();
  assert.equal(await client.closed(), undefined);

  const { client: c2, ws } = await open({ token: "expired" });
  c2.on("error", () => {});
  ws.drop(1008, "token expired");
  const err = await c2.closed();
  assert.equal(err.code, "unauthorized");

  FakeWS.sockets = [];
  const p = connect("ws://gw.test/v1/ws", { WebSocket: FakeWS });
  p.catch(() => {});
  await until(() => FakeWS.sockets.length === 1);
  latest().drop(1006);
  await assert.rejects(p);
});

test("status() yields open, reconnecting and closed, then ends", async () => {
  const { client, ws } = await open();
  const it = client.status();
  ws.drop(1006, "gone");
  await until(() => FakeWS.sockets.length === 2);
  latest().welcome("e1", "s9");
  client.close();
  const seen = [];
  for await (const s of it) seen.push(s);
  assert.deepEqual(
    seen.map((s) => s.state),
    ["reconnecting", "open", "closed"],
  );
  assert.equal(seen[0].attempt, 1);
  assert.equal(seen[0].code, 1006);
  assert.equal(seen[1].session, "s9");
  assert.equal(seen[2].code, 1000);

  const closedIt = client.status();
  assert.equal((await closedIt.next()).done, true, "a closed client's status ends at once");

  const { client: c2 } = await open();
  const ac = new AbortController();
  const it2 = c2.status({ signal: ac.signal });
  ac.abort();
  assert.equal((await it2.next()).done, true);
  c2.close();
});

test("on returns a remover; off removes; state events follow the connection", async () => {
  const { client, ws } = await open();
  const states = [];
  const onState = (s) => states.push(s);
  client.on("state", onState);
  const opens = [];
  const removeOpen = client.on("open", (w) => opens.push(w.session));
  ws.drop();
  await until(() => FakeWS.sockets.length === 2);
  latest().welcome("e1", "s2");
  removeOpen();
  client.off("state", onState);
  latest().drop();
  await until(() => FakeWS.sockets.length === 3);
  latest().welcome("e1", "s3");
  assert.deepEqual(states, ["reconnecting", "open"]);
  assert.deepEqual(opens, ["s2"]);
  client.close();
});
