// A topic deleted under a subscription, with messages of the deleted
// incarnation written after the topic_deleted frame (stragglers), and the
// connection lost before the topic is made again: the stragglers'
// positions belong to a topic that no longer exists, yet they are sent on
// the resume, and the new incarnation's offsets up to them are then
// dropped as duplicates. Run with
//
//     node --test web/

import { test } from "node:test";
import assert from "node:assert/strict";
import { FakeWS, latest, until, open, subscribed, msg } from "./fakews.mjs";

test("stragglers of a deleted topic do not hold back its next incarnation after a reconnect", async () => {
  const { client, ws } = await open();
  const got = [];
  const sub = await subscribed(client, ws, "#", (m) => got.push(`${m.topic}/${m.offset}`));
  ws.recv(msg("#", "a", 0, 4), msg("#", "a", 0, 5));
  ws.recv({ op: "topic_deleted", pattern: "#", topic: "a" });
  // Queued before the delete, written after its frame.
  ws.recv(msg("#", "a", 0, 6), msg("#", "a", 0, 7));
  ws.drop();
  await until(() => FakeWS.sockets.length === 2);
  const ws2 = latest();
  ws2.welcome("e1");
  const f = ws2.last("subscribe");
  ws2.recv({ op: "subscribed", id: f.id, pattern: "#", recovered: true });
  // The topic made again after the reconnect: its first messages.
  ws2.recv(msg("#", "a", 0, 0), msg("#", "a", 0, 1));
  try {
    assert.deepEqual(got, ["a/4", "a/5", "a/6", "a/7", "a/0", "a/1"],
      `the new incarnation was dropped as duplicates (resume positions ${JSON.stringify(f.from && f.from.positions)}, duplicates ${client.stats.duplicates})`);
  } finally {
    client.close();
  }
  void sub;
});
