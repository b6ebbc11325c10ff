// Tests for the logic of web/static/switchyard.js, run with
//
//     node --test web/
//
// The client talks to an in-process fake WebSocket; no network is used.
// The file lives outside static/ so that it is not embedded and served;
// web/package.json makes Node load switchyard.js as an ES module.

import { test } from "node:test";
import assert from "node:assert/strict";
import { connect, splitFrame, backoffDelay, RecentSet, buildURL, SwitchyardError } from "./static/switchyard.js";
import { FakeWS, latest, until, open, subscribed, msg, tickets } from "./fakews.mjs";

test("splitFrame splits on newlines and reports bad lines", () => {
  const out = splitFrame('{"op":"a"}\n\n{"op":"b"}\nnot json\n');
  assert.equal(out.length, 3);
  assert.deepEqual(out[0], { op: "a" });
  assert.deepEqual(out[1], { op: "b" });
  assert.ok(out[2] instanceof SwitchyardError);
  assert.equal(out[2].code, "bad_frame");
});

test("backoffDelay grows, caps and jitters", () => {
  const cases = [
    { name: "first low", attempt: 0, r: 0, want: 125 },
    { name: "first high", attempt: 0, r: 0.999999, want: 250 },
    { name: "third", attempt: 2, r: 0.5, want: 750 },
    { name: "capped", attempt: 40, r: 1, want: 10000 },
    { name: "capped low", attempt: 40, r: 0, want: 5000 },
  ];
  for (const c of cases) assert.equal(backoffDelay(c.attempt, 250, 10000, () => c.r), c.want, c.name);
});

test("RecentSet forgets the oldest entries first", () => {
  const s = new RecentSet(2);
  s.set("a");
  s.set("b");
  s.set("a"); // refresh a
  s.set("c"); // evicts b
  assert.ok(s.has("a"));
  assert.ok(!s.has("b"));
  assert.ok(s.has("c"));
  assert.equal(s.size, 2);
});

test("buildURL adds the token and maps http to ws", () => {
  assert.equal(buildURL("http://h:1/v1/ws", "a b"), "ws://h:1/v1/ws?token=a+b");
  assert.equal(buildURL("https://h/v1/ws?x=1"), "wss://h/v1/ws?x=1");
  assert.equal(buildURL("ws://h/v1/ws", ""), "ws://h/v1/ws");
});

test("connect resolves on welcome and exposes it", async () => {
  const { client, ws } = await open({ token: "jwt" });
  assert.equal(ws.url, "ws://gw.test/v1/ws?ticket=tk1");
  assert.equal(tickets.issued.get("tk1"), "jwt");
  assert.equal(client.state, "open");
  assert.equal(client.epoch, "e1");
  assert.equal(client.limits.queue_messages, 1024);
  client.close();
});

test("connect rejects when the first attempt fails", async () => {
  FakeWS.sockets = [];
  const p = connect("ws://gw.test/v1/ws", { WebSocket: FakeWS });
  await until(() => FakeWS.sockets.length === 1);
  latest().drop(1006);
  await assert.rejects(p, (err) => err.code === "connect_failed");
});

test("subscribe sends options and resolves on subscribed", async () => {
  const { client, ws } = await open();
  const p = client.subscribe("orders.#", () => {}, { on_full: "drop_new", filter: { headers: { region: "eu" } }, from: "earliest" });
  const f = ws.last("subscribe");
  assert.deepEqual({ ...f, id: 0 }, { op: "subscribe", id: 0, pattern: "orders.#", on_full: "drop_new", filter: { headers: { region: "eu" } }, from: "earliest" });
  ws.recv({ op: "subscribed", id: f.id, pattern: "orders.#" });
  const sub = await p;
  assert.equal(sub.state, "active");
  assert.equal(sub.pattern, "orders.#");
  client.close();
});

test("subscribe rejects with the server's code", async () => {
  const { client, ws } = await open();
  const p = client.subscribe("a..b", () => {});
  ws.recv({ op: "error", id: ws.last("subscribe").id, code: "invalid_pattern", message: "empty segment" });
  await assert.rejects(p, (err) => err instanceof SwitchyardError && err.code === "invalid_pattern");
  assert.equal(client.subscriptions().length, 0);
  // The same pattern can be tried again.
  const again = client.subscribe("a..b", () => {});
  ws.recv({ op: "error", id: ws.last("subscribe").id, code: "invalid_pattern", message: "empty segment" });
  await assert.rejects(again);
  client.close();
});

test("a second subscription with the same pattern and group is refused locally", async () => {
  const { client, ws } = await open();
  await subscribed(client, ws, "a.*", () => {});
  await assert.rejects(client.subscribe("a.*", () => {}), (err) => err.code === "already_subscribed");
  client.close();
});

test("publish resolves with the published reply", async () => {
  const { client, ws } = await open();
  const p = client.publish("orders.created", { id: 1 }, { key: "k", headers: { a: "b" }, msg_id: "m1", priority: 3 });
  const f = ws.last("publish");
  assert.deepEqual(f, { op: "publish", id: f.id, topic: "orders.created", data: { id: 1 }, key: "k", headers: { a: "b" }, msg_id: "m1", priority: 3 });
  ws.recv({ op: "published", id: f.id, topic: "orders.created", partition: 2, offset: 9 });
  assert.deepEqual(await p, { topic: "orders.created", partition: 2, offset: 9 });
  client.close();
});

test("requests time out", async () => {
  const { client } = await open({ requestTimeoutMs: 20 });
  await assert.rejects(client.publish("a", 1), (err) => err.code === "timeout");
  client.close();
});

test("messages go to the subscription they name, batched frames included", async () => {
  const { client, ws } = await open();
  const got = { a: [], b: [], g: [] };
  await subscribed(client, ws, "a.#", (m) => got.a.push(m.offset));
  await subscribed(client, ws, "*.x", (m) => got.b.push(m.offset));
  await subscribed(client, ws, "*.x", (m) => got.g.push(m.offset), { group: "workers" });
  ws.recv(msg("a.#", "a.x", 0, 0), msg("*.x", "a.x", 0, 0), msg("*.x", "a.x", 0, 0, { group: "workers", attempt: 1 }), msg("nope", "a.x", 0, 1));
  assert.deepEqual(got, { a: [0], b: [0], g: [0] });
  client.close();
});

test("plain subscriptions drop duplicate and older offsets", async () => {
  const { client, ws } = await open();
  const got = [];
  const sub = await subscribed(client, ws, "t", (m) => got.push(`${m.partition}:${m.offset}`));
  ws.recv(msg("t", "t", 0, 5), msg("t", "t", 0, 5), msg("t", "t", 1, 5), msg("t", "t", 0, 4), msg("t", "t", 0, 6));
  assert.deepEqual(got, ["0:5", "1:5", "0:6"]);
  assert.equal(sub.duplicates, 2);
  assert.deepEqual(sub.positions(), [
    { topic: "t", partition: 0, offset: 6 },
    { topic: "t", partition: 1, offset: 5 },
  ]);
  client.close();
});

test("reconnect resubscribes with positions and reports a failed resume", async () => {
  const { client, ws } = await open();
  const got = [];
  const events = [];
  client.on("reconnect", (e) => events.push("reconnect:" + e.attempt));
  client.on("close", (e) => events.push("close:" + e.code + ":" + e.willReconnect));
  client.on("open", () => events.push("open"));
  const resets = [];
  client.on("reset", (e) => resets.push(e.pattern));
  await subscribed(client, ws, "t.#", (m) => got.push(m.offset));
  const groupSub = await subscribed(client, ws, "jobs", () => {}, { group: "g" });
  ws.recv(msg("t.#", "t.a", 0, 3), msg("t.#", "t.b", 1, 7));

  ws.drop(1013, "slow consumer");
  assert.equal(client.state, "reconnecting");
  await until(() => FakeWS.sockets.length === 2);
  const ws2 = latest();
  ws2.welcome("e1");
  const subs = ws2.sent.filter((f) => f.op === "subscribe");
  assert.equal(subs.length, 2);
  const plain = subs.find((f) => f.pattern === "t.#");
  assert.deepEqual(plain.from, {
    epoch: "e1",
    positions: [
      { topic: "t.a", partition: 0, offset: 3 },
      { topic: "t.b", partition: 1, offset: 7 },
    ],
  });
  const group = subs.find((f) => f.pattern === "jobs");
  assert.equal(group.group, "g");
  assert.equal(group.from, undefined);
  ws2.recv({ op: "subscribed", id: plain.id, pattern: "t.#", recovered: false });
  ws2.recv({ op: "subscribed", id: group.id, pattern: "jobs", group: "g" });
  assert.deepEqual(resets, ["t.#"]);
  assert.equal(groupSub.state, "active");
  // Same epoch: what was delivered before stays deduplicated.
  ws2.recv(msg("t.#", "t.a", 0, 3), msg("t.#", "t.a", 0, 4));
  assert.deepEqual(got, [3, 7, 4]);
  assert.deepEqual(events, ["close:1013:true", "reconnect:1", "open"]);
  assert.equal(client.stats.reconnects, 1);
  client.close();
});

test("a new epoch resets the duplicate filter", async () => {
  const { client, ws } = await open();
  const got = [];
  await subscribed(client, ws, "t", (m) => got.push(m.offset));
  ws.recv(msg("t", "t", 0, 10));
  ws.drop();
  await until(() => FakeWS.sockets.length === 2);
  const ws2 = latest();
  ws2.welcome("e2");
  const f = ws2.last("subscribe");
  assert.deepEqual(f.from, { epoch: "e1", positions: [{ topic: "t", partition: 0, offset: 10 }] });
  ws2.recv({ op: "subscribed", id: f.id, pattern: "t", recovered: false });
  ws2.recv(msg("t", "t", 0, 0));
  assert.deepEqual(got, [10, 0]);
  client.close();
});

test("group duplicates are acked again, not handled twice; nacked records come back", async () => {
  const { client, ws } = await open();
  const got = [];
  await subscribed(client, ws, "jobs", (m) => got.push(`${m.offset}/${m.attempt}`), { group: "g" });
  const m0 = msg("jobs", "jobs", 0, 0, { group: "g", attempt: 1 });
  ws.recv(m0);
  const ackP = client.ack(m0);
  const ack = ws.last("ack");
  assert.deepEqual(ack, { op: "ack", id: ack.id, group: "g", topic: "jobs", partition: 0, offset: 0 });
  ws.recv({ op: "acked", id: ack.id });
  await ackP;

  const before = ws.sent.length;
  ws.recv({ ...m0, attempt: 2 }); // a redelivery of an acked record
  assert.deepEqual(got, ["0/1"]);
  assert.deepEqual(ws.sent.slice(before), [{ op: "ack", group: "g", topic: "jobs", partition: 0, offset: 0 }]);

  const m1 = msg("jobs", "jobs", 0, 1, { group: "g", attempt: 1 });
  ws.recv(m1);
  ws.recv({ ...m1, attempt: 2 }); // still being handled: dropped silently
  const nackP = client.nack(m1, new Error("boom"));
  const nack = ws.last("nack");
  assert.equal(nack.error, "boom");
  ws.recv({ op: "nacked", id: nack.id });
  await nackP;
  ws.recv({ ...m1, attempt: 3 });
  assert.deepEqual(got, ["0/1", "1/1", "1/3"]);
  client.close();
});

test("autoAck acks on return and nacks on throw", async () => {
  const { client, ws } = await open();
  const errors = [];
  client.on("error", (e) => errors.push(e.code));
  await subscribed(
    client,
    ws,
    "jobs",
    (m) => {
      if (m.offset === 1) throw new Error("bad record");
    },
    { group: "g", autoAck: true },
  );
  ws.recv(msg("jobs", "jobs", 0, 0, { group: "g", attempt: 1 }));
  await until(() => ws.last("ack"));
  ws.recv(msg("jobs", "jobs", 0, 1, { group: "g", attempt: 1 }));
  await until(() => ws.last("nack"));
  assert.equal(ws.last("nack").error, "bad record");
  assert.deepEqual(errors, ["handler_failed"]);
  client.close();
});

test("gap frames reach on('gap') with their subscription", async () => {
  const { client, ws } = await open();
  const sub = await subscribed(client, ws, "t", () => {});
  const gaps = [];
  client.on("gap", (g, s) => gaps.push([g.from, g.to, g.reason, s === sub]));
  ws.recv({ op: "gap", pattern: "t", topic: "t", partition: 0, from: 3, to: 9, reason: "queue_full" });
  assert.deepEqual(gaps, [[3, 9, "queue_full", true]]);
  client.close();
});

test("requests made while reconnecting wait; requests in flight fail with disconnected", async () => {
  const { client, ws } = await open();
  const inflight = client.publish("a", 1);
  ws.drop();
  await assert.rejects(inflight, (err) => err.code === "disconnected");
  const queued = client.publish("a", 2);
  const sub = client.subscribe("b", () => {});
  await until(() => FakeWS.sockets.length === 2);
  const ws2 = latest();
  ws2.welcome();
  assert.deepEqual(
    ws2.sent.map((f) => f.op),
    ["subscribe", "publish"],
  );
  ws2.recv({ op: "subscribed", id: ws2.last("subscribe").id, pattern: "b" }, { op: "published", id: ws2.last("publish").id, topic: "a", partition: 0, offset: 1 });
  assert.equal((await queued).offset, 1);
  assert.equal((await sub).state, "active");
  client.close();
});

test("unsubscribe stops delivery; close rejects what waits and stops reconnecting", async () => {
  const { client, ws } = await open();
  const got = [];
  const sub = await subscribed(client, ws, "t", (m) => got.push(m.offset));
  const u = sub.unsubscribe();
  const f = ws.last("unsubscribe");
  assert.deepEqual(f, { op: "unsubscribe", id: f.id, pattern: "t" });
  ws.recv(msg("t", "t", 0, 1));
  ws.recv({ op: "unsubscribed", id: f.id });
  await u;
  assert.deepEqual(got, []);

  const p = client.publish("a", 1);
  client.close();
  await assert.rejects(p, (err) => err.code === "closed");
  assert.equal(client.state, "closed");
  assert.deepEqual(ws.closedWith, { code: 1000, reason: "client closed" });
  await assert.rejects(client.publish("a", 1), (err) => err.code === "closed");
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(FakeWS.sockets.length, 1);
});

test("a policy close with a fixed token does not reconnect", async () => {
  const { client, ws } = await open({ token: "expired" });
  const errors = [];
  client.on("error", (e) => errors.push(e.code));
  ws.drop(1008, "token expired");
  assert.equal(client.state, "closed");
  assert.deepEqual(errors, ["unauthorized"]);
});

test("a token function is asked again on every attempt", async () => {
  let n = 0;
  const { client, ws } = await open({ token: () => "t" + ++n });
  assert.equal(tickets.issued.get(new URL(ws.url).searchParams.get("ticket")), "t1");
  ws.drop(1008);
  await until(() => FakeWS.sockets.length === 2);
  assert.equal(tickets.issued.get(new URL(latest().url).searchParams.get("ticket")), "t2");
  client.close();
});

test("getToken answers refresh_required without reconnecting", async () => {
  let n = 0;
  const { client, ws } = await open({ getToken: async () => "t" + ++n });
  assert.equal(tickets.issued.get(new URL(ws.url).searchParams.get("ticket")), "t1");
  ws.recv({ op: "refresh_required", expires: "2026-12-01T10:00:00Z" });
  await new Promise((r) => setTimeout(r, 0));
  const req = ws.last("refresh");
  assert.equal(req.token, "t2");
  ws.recv({ op: "refreshed", id: req.id, expires: "2026-12-01T10:05:00Z" });
  assert.equal(FakeWS.sockets.at(-1), ws);
  assert.equal(client.state, "open");
  client.close();
});

test("a revoked subscription ends with a forbidden error", async () => {
  const { client, ws } = await open({ token: "jwt" });
  const p = client.subscribe("a.x", () => {});
  const sreq = ws.last("subscribe");
  ws.recv({ op: "subscribed", id: sreq.id, pattern: "a.x" });
  const sub = await p;
  const errors = [];
  client.on("error", (e) => errors.push(e));
  ws.recv({ op: "unsubscribed", pattern: "a.x", reason: "forbidden" });
  assert.equal(sub.state, "closed");
  assert.equal(errors.length, 1);
  assert.equal(errors[0].code, "forbidden");
  const r = client.refresh("jwt2");
  const req = ws.last("refresh");
  ws.recv({ op: "refreshed", id: req.id, expires: "2026-12-01T10:05:00Z" });
  assert.equal((await r).expires, "2026-12-01T10:05:00Z");
  client.close();
});

test("presence: subscribe flag, join/leave events and the presence op", async () => {
  const { client, ws } = await open({ token: "jwt" });
  const p = client.subscribe("rooms.1", () => {}, { presence: true });
  const sreq = ws.last("subscribe");
  assert.equal(sreq.presence, true);
  ws.recv({ op: "subscribed", id: sreq.id, pattern: "rooms.1" });
  await p;
  const seen = [];
  client.on("join", (f) => seen.push("join " + f.user));
  client.on("leave", (f) => seen.push("leave " + f.user));
  ws.recv({ op: "join", topic: "rooms.1", session: "s2", user: "bob" }, { op: "leave", topic: "rooms.1", session: "s2", user: "bob" });
  assert.deepEqual(seen, ["join bob", "leave bob"]);
  const q = client.presence("rooms.1");
  const preq = ws.last("presence");
  assert.equal(preq.topic, "rooms.1");
  ws.recv({ op: "presence", id: preq.id, topic: "rooms.1", count: 1, members: [{ session: "s1", user: "ann" }] });
  assert.equal((await q).count, 1);
  client.close();
});

test("presence: a resync frame lists the topic again, emitted in order with later events", async (t) => {
  const { client, ws } = await open({ token: "jwt" });
  t.after(() => client.close());
  const p = client.subscribe("rooms.1", () => {}, { presence: true });
  ws.recv({ op: "subscribed", id: ws.last("subscribe").id, pattern: "rooms.1" });
  await p;
  const seen = [];
  client.on("join", (f) => seen.push("join " + f.session));
  client.on("leave", (f) => seen.push("leave " + f.session));
  client.on("presence", (f) => seen.push(`resync ${f.topic} ${f.count} ${f.members.map((m) => m.session).join(",")}`));
  ws.recv({ op: "join", topic: "rooms.1", session: "s2", user: "bob" }, { op: "presence", topic: "rooms.1", resync: true });
  const preq = ws.last("presence");
  assert.equal(preq.topic, "rooms.1");
  assert.notEqual(preq.id, undefined);
  // The reply and a leave after it arrive in one message: the list comes first.
  ws.recv({ op: "presence", id: preq.id, topic: "rooms.1", count: 2, members: [{ session: "s1", user: "ann" }, { session: "s3", user: "cat" }] },
    { op: "leave", topic: "rooms.1", session: "s3", user: "cat" });
  assert.deepEqual(seen, ["join s2", "resync rooms.1 2 s1,s3", "leave s3"]);
});
