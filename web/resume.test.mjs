// Tests of the client's promise across connection losses: resets that are
// not lost, and dead connections that are noticed. Run with
//
//     node --test web/

import { test } from "node:test";
import assert from "node:assert/strict";
import { FakeWS, latest, until, open, subscribed, msg } from "./fakews.mjs";

/** Answers a subscribe as the gateway does: recovered only for positions, true when their epoch is the log's. */
function answer(ws, f, epoch) {
  const reply = { op: "subscribed", id: f.id, pattern: f.pattern };
  if (f.from && f.from.positions) reply.recovered = f.from.epoch === epoch;
  ws.recv(reply);
}

test("a reset survives a connection lost right after the first resubscribe on a new epoch", async () => {
  const { client, ws } = await open();
  const got = [];
  const resets = [];
  client.on("reset", (e) => resets.push(e.pattern));
  await subscribed(client, ws, "t", (m) => got.push(m.offset));
  ws.recv(msg("t", "t", 0, 10));
  ws.drop();
  await until(() => FakeWS.sockets.length === 2);
  const ws2 = latest();
  ws2.welcome("e2");
  assert.ok(ws2.last("subscribe"), "resubscribed");
  ws2.drop(); // before the reply
  await until(() => FakeWS.sockets.length === 3);
  const ws3 = latest();
  ws3.welcome("e2");
  const f = ws3.last("subscribe");
  answer(ws3, f, "e2");
  ws3.recv(msg("t", "t", 0, 0), msg("t", "t", 0, 1));
  assert.deepEqual(resets, ["t"], `resubscribed with from ${JSON.stringify(f.from)}`);
  assert.deepEqual(got, [10, 0, 1]);
  client.close();
});

test("a pending reset is dropped when the gateway is back on the positions' epoch", async () => {
  const { client, ws } = await open();
  const got = [];
  const resets = [];
  client.on("reset", (e) => resets.push(e.pattern));
  await subscribed(client, ws, "t", (m) => got.push(m.offset));
  ws.recv(msg("t", "t", 0, 10));
  ws.drop();
  await until(() => FakeWS.sockets.length === 2);
  latest().welcome("e2");
  latest().drop(); // before the reply
  await until(() => FakeWS.sockets.length === 3);
  const ws3 = latest();
  ws3.welcome("e1");
  const f = ws3.last("subscribe");
  assert.deepEqual(f.from, { epoch: "e1", positions: [{ topic: "t", partition: 0, offset: 10 }] });
  answer(ws3, f, "e1");
  ws3.recv(msg("t", "t", 0, 10), msg("t", "t", 0, 11));
  assert.deepEqual(resets, []);
  assert.deepEqual(got, [10, 11]);
  client.close();
});

test("a connection that goes silent is noticed: a ping without a reply closes it, and the client resumes", async () => {
  const { client, ws } = await open({ pingIntervalMs: 20, pongTimeoutMs: 40 });
  const got = [];
  const closes = [];
  client.on("close", (e) => closes.push(e));
  await subscribed(client, ws, "t", (m) => got.push(m.offset));
  ws.recv(msg("t", "t", 0, 3));
  // The cut: from now on nothing arrives and no close event comes.
  await until(() => ws.last("ping") !== undefined, 2000);
  await until(() => FakeWS.sockets.length === 2, 2000);
  assert.equal(ws.closedWith && ws.closedWith.code, 4000);
  assert.equal(closes.length, 1);
  assert.equal(closes[0].willReconnect, true);
  assert.match(closes[0].reason, /ping/);
  const ws2 = latest();
  ws2.welcome("e1");
  const f = ws2.last("subscribe");
  assert.deepEqual(f.from, { epoch: "e1", positions: [{ topic: "t", partition: 0, offset: 3 }] });
  answer(ws2, f, "e1");
  ws2.recv(msg("t", "t", 0, 4));
  assert.deepEqual(got, [3, 4]);
  client.close();
});

test("a reply to the ping, or an error for it from an older gateway, keeps the connection and is not reported", async () => {
  const { client, ws } = await open({ pingIntervalMs: 20, pongTimeoutMs: 200 });
  const errors = [];
  client.on("error", (e) => errors.push(e));
  const pings = () => ws.sent.filter((f) => f.op === "ping");
  await until(() => pings().length === 1, 2000);
  ws.recv({ op: "pong", id: pings()[0].id });
  await until(() => pings().length === 2, 2000);
  ws.recv({ op: "error", id: pings()[1].id, code: "bad_request", message: 'unknown op "ping"' });
  await until(() => pings().length === 3, 2000);
  assert.equal(FakeWS.sockets.length, 1);
  assert.equal(client.state, "open");
  assert.deepEqual(errors, []);
  client.close();
});

test("no ping while frames keep arriving; a ping once they stop; none when turned off", async (t) => {
  // Timers and the clock are the test's, so a slow machine cannot make a
  // busy connection look idle.
  t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
  const { client, ws } = await open({ pingIntervalMs: 60, pongTimeoutMs: 60 });
  for (let off = 0; off < 20; off++) {
    t.mock.timers.tick(20);
    ws.recv(msg("t", "t", 0, off));
  }
  assert.equal(ws.last("ping"), undefined, "a ping while frames arrive every 20 ms");
  t.mock.timers.tick(60);
  assert.notEqual(ws.last("ping"), undefined, "no ping after 60 ms without a frame");
  client.close();

  const off = await open({ pingIntervalMs: 0, pongTimeoutMs: 10 });
  t.mock.timers.tick(1000);
  assert.equal(off.ws.last("ping"), undefined);
  assert.equal(FakeWS.sockets.length, 1);
  off.client.close();
});
