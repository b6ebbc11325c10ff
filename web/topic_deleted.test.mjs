// Tests of a topic deleted and created again under a subscription: the
// gateway writes topic_deleted ahead of the deleted topic's messages it had
// queued, so some may follow the frame, and then the new topic's from
// offset 0. Run with
//
//     node --test web/

import { test } from "node:test";
import assert from "node:assert/strict";
import { FakeWS, latest, until, open, subscribed, msg } from "./fakews.mjs";

test("a topic made again after stragglers of the deleted one is delivered from offset 0", async () => {
  const { client, ws } = await open();
  const got = [];
  const deleted = [];
  client.on("topic_deleted", (f) => deleted.push(f.topic));
  await subscribed(client, ws, "t", (m) => got.push(m.offset));
  ws.recv(msg("t", "t", 0, 4), msg("t", "t", 0, 5));
  ws.recv({ op: "topic_deleted", pattern: "t", topic: "t" });
  // Queued before the delete, written after its frame.
  ws.recv(msg("t", "t", 0, 6), msg("t", "t", 0, 7));
  // The topic made again.
  ws.recv(msg("t", "t", 0, 0), msg("t", "t", 0, 1), msg("t", "t", 0, 2));
  assert.deepEqual(deleted, ["t"]);
  assert.deepEqual(got, [4, 5, 6, 7, 0, 1, 2]);
  assert.deepEqual(client.stats.duplicates, 0);
  client.close();
});

test("a deleted topic's positions are not sent on a resubscribe, and duplicates count again on a new connection", async () => {
  const { client, ws } = await open();
  const got = [];
  const sub = await subscribed(client, ws, "#", (m) => got.push(`${m.topic}/${m.offset}`));
  ws.recv(msg("#", "a", 0, 9), msg("#", "b", 0, 3));
  ws.recv({ op: "topic_deleted", pattern: "#", topic: "a" });
  ws.recv(msg("#", "a", 0, 0));
  assert.deepEqual(sub.positions(), [{ topic: "b", partition: 0, offset: 3 }, { topic: "a", partition: 0, offset: 0 }]);
  ws.drop();
  await until(() => FakeWS.sockets.length === 2);
  const ws2 = latest();
  ws2.welcome("e1");
  const f = ws2.last("subscribe");
  assert.deepEqual(f.from.positions, [{ topic: "b", partition: 0, offset: 3 }, { topic: "a", partition: 0, offset: 0 }]);
  ws2.recv({ op: "subscribed", id: f.id, pattern: "#", recovered: true });
  // On the new connection an old offset of "a" is a duplicate again.
  ws2.recv(msg("#", "a", 0, 0), msg("#", "a", 0, 1));
  assert.deepEqual(got, ["a/9", "b/3", "a/0", "a/1"]);
  assert.equal(client.stats.duplicates, 1);
  client.close();
});
