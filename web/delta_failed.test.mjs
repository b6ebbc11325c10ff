// A delta that fails stops the handling of the rest of its WebSocket
// message: a later message there would move the subscription's position
// past the failed one, which the resume then never asks for (a loss
// without a gap).
//
//     node --test web/

import { test } from "node:test";
import assert from "node:assert/strict";
import { open, subscribed, until, FakeWS } from "./fakews.mjs";

test("a failed delta ends the handling of its socket's frames", async () => {
  const { client, ws } = await open();
  const got = [];
  client.on("error", () => {});
  await subscribed(client, ws, "dash", (m) => got.push(m), { delta: "fossil" });
  // A delta without a base, then the partition's next record, full, in one message.
  const bad = JSON.stringify({ op: "message", pattern: "dash", topic: "dash", partition: 0, offset: 0, data: "7\n0@0,7:{\"n\":0}2Lvuc1;", delta: true });
  const next = JSON.stringify({ op: "message", pattern: "dash", topic: "dash", partition: 0, offset: 1, data: { n: 1 } });
  ws.recv(bad + "\n" + next);
  await until(() => FakeWS.sockets.length === 2);
  const again = FakeWS.sockets[1];
  again.welcome();
  await until(() => again.last("subscribe"));
  const f = again.last("subscribe");
  assert.deepEqual(got.map((m) => m.offset), [], "a message after the failed delta was delivered");
  assert.ok(!f.from || !f.from.positions || f.from.positions.length === 0, `resubscribe from ${JSON.stringify(f.from)} skips offset 0`);
  client.close();
});
