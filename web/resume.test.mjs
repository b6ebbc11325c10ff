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
