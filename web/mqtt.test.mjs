// mqtt.js (the npm package `mqtt`, pinned in testdata/mqttjs) against a
// real gateway's GET /mqtt, from Node: MQTT 5 and 3.1.1 over WebSocket,
// wildcard filters, QoS 0, 1 and 2 both ways, a shared subscription, a
// retained message, a will, and the cross-protocol cases (a native HTTP or
// WebSocket publish reaches an mqtt.js subscriber as its JSON text; an
// mqtt.js publish reaches a native WebSocket subscriber; an MQTT shared
// subscription and a native group member share one group).
//
// web/mqttjs_test.go (TestMQTTJSNode) installs the fixture with npm ci,
// starts the gateway and runs this file with
//
//     SWITCHYARD_MQTT_URL=ws://127.0.0.1:PORT/mqtt
//     SWITCHYARD_HTTP_URL=http://127.0.0.1:PORT
//     SWITCHYARD_MQTTJS_DIR=<the installed fixture>
//     node --test mqtt.test.mjs
//
// Without those variables (as under a plain `node --test web/`) every test
// is skipped. Every wait is bounded (WAIT_MS) and says what it waited for.
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { join } from "node:path";
import { after, test } from "node:test";

const MQTT_URL = process.env.SWITCHYARD_MQTT_URL;
const HTTP_URL = process.env.SWITCHYARD_HTTP_URL;
const DIR = process.env.SWITCHYARD_MQTTJS_DIR;
const skip = !MQTT_URL || !HTTP_URL || !DIR ? "needs a gateway: run by web/mqttjs_test.go (go test -run TestMQTTJSNode ./web/)" : false;
const WAIT_MS = 10000;

const require = skip ? null : createRequire(join(DIR, "package.json"));
const mqtt = skip ? null : require("mqtt");
const WebSocket = skip ? null : require("ws");
// Topic names of this run: MQTT levels of name characters, so that
// `<prefix>/a/b` is the native topic `<prefix>.a.b`.
const prefix = "mqttjs" + process.pid + Date.now().toString(36);

const clients = [];
const sockets = []; // native WebSockets
after(async () => {
  for (const ws of sockets) ws.terminate();
  await Promise.all(clients.map((c) => c.endAsync(true).catch(() => {})));
});

// within rejects, naming what, unless p settles within WAIT_MS.
function within(p, what) {
  let timer;
  const t = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${WAIT_MS} ms waiting for ${what}`)), WAIT_MS);
  });
  return Promise.race([p, t]).finally(() => clearTimeout(timer));
}

// connect opens an mqtt.js client that does not reconnect; it is ended
// when the file's tests end.
async function connect(opts = {}) {
  const client = await within(
    mqtt.connectAsync(MQTT_URL, { protocolVersion: 5, reconnectPeriod: 0, connectTimeout: WAIT_MS, ...opts }),
    `CONNACK (${JSON.stringify(opts)})`,
  );
  clients.push(client);
  return client;
}

// inbox collects a client's messages; next(n) resolves with the first n.
function inbox(client) {
  const got = [];
  let wake = () => {};
  client.on("message", (topic, payload, packet) => {
    got.push({ topic, text: payload.toString("utf8"), bytes: payload, qos: packet.qos, retain: packet.retain, dup: packet.dup });
    wake();
  });
  return {
    got,
    next(n, what) {
      return within(
        new Promise((resolve) => {
          wake = () => {
            if (got.length >= n) resolve(got.slice(0, n));
          };
          wake();
        }),
        `${n} message(s): ${what} (have ${JSON.stringify(got.map((m) => [m.topic, m.text]))})`,
      );
    },
  };
}

// nativeSubscriber opens a native WebSocket, subscribes to pattern and
// collects its message frames.
async function nativeSubscriber(pattern, extra = {}) {
  const ws = new WebSocket(HTTP_URL.replace(/^http/, "ws") + "/v1/ws");
  sockets.push(ws);
  const frames = [];
  let wake = () => {};
  ws.on("message", (data) => {
    for (const line of data.toString("utf8").split("\n")) {
      if (!line) continue;
      const f = JSON.parse(line);
      frames.push(f);
      if (f.op === "message" && f.group) {
        ws.send(JSON.stringify({ op: "ack", group: f.group, topic: f.topic, partition: f.partition, offset: f.offset }));
      }
    }
    wake();
  });
  const until = (pred, what) =>
    within(
      new Promise((resolve) => {
        wake = () => {
          const f = frames.find(pred);
          if (f) resolve(f);
        };
        wake();
      }),
      `${what} (frames ${JSON.stringify(frames)})`,
    );
  await within(new Promise((resolve, reject) => { ws.once("open", resolve); ws.once("error", reject); }), "the native WebSocket");
  ws.send(JSON.stringify({ op: "subscribe", id: 1, pattern, ...extra }));
  await until((f) => f.op === "subscribed" && f.id === 1, `subscribed to ${pattern}`);
  const messages = () => frames.filter((f) => f.op === "message");
  return {
    ws,
    messages,
    async next(n, what) {
      await until(() => messages().length >= n, what);
      return messages().slice(0, n);
    },
    close: () => ws.close(),
  };
}

async function httpPublish(body) {
  const res = await within(fetch(HTTP_URL + "/v1/publish", {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  }), "POST /v1/publish");
  const text = await res.text();
  assert.equal(res.status, 200, `POST /v1/publish: ${res.status} ${text}`);
  return JSON.parse(text);
}

for (const version of [5, 4]) {
  test(`MQTT ${version === 5 ? "5" : "3.1.1"}: connect, wildcard filters, QoS 0/1/2 both ways`, { skip }, async () => {
    const t = `${prefix}/v${version}`;
    const sub = await connect({ protocolVersion: version, clientId: `${prefix}-sub-v${version}` });
    assert.equal(sub.connected, true);
    const box = inbox(sub);
    // One filter per QoS, plus `#` over a parent level (MQTT: `a/#`
    // matches `a`).
    const granted = await within(sub.subscribeAsync({
      [`${t}/q0/+/temp`]: { qos: 0 },
      [`${t}/q1/+/temp`]: { qos: 1 },
      [`${t}/q2/+/temp`]: { qos: 2 },
      [`${t}/tree/#`]: { qos: 1 },
    }), "SUBACK");
    assert.deepEqual(granted.map((g) => [g.topic, g.qos]), [
      [`${t}/q0/+/temp`, 0], [`${t}/q1/+/temp`, 1], [`${t}/q2/+/temp`, 2], [`${t}/tree/#`, 1],
    ]);
    const pub = await connect({ protocolVersion: version, clientId: `${prefix}-pub-v${version}` });
    // Each QoS published at that QoS (resolves on PUBACK / PUBCOMP for 1
    // and 2) to a subscription granted that QoS.
    for (const qos of [0, 1, 2]) {
      await within(pub.publishAsync(`${t}/q${qos}/room1/temp`, JSON.stringify({ qos }), { qos }), `the QoS ${qos} publish's flow`);
    }
    await pub.publishAsync(`${t}/tree`, "parent", { qos: 1 });
    await pub.publishAsync(`${t}/tree/a/b`, "child", { qos: 1 });
    await pub.publishAsync(`${t}/q1/room1/humidity`, "not matched", { qos: 1 });
    const got = await box.next(5, "every matched publish");
    const byTopic = Object.fromEntries(got.map((m) => [m.topic, m]));
    for (const qos of [0, 1, 2]) {
      const m = byTopic[`${t}/q${qos}/room1/temp`];
      assert.ok(m, `no delivery on ${t}/q${qos}/room1/temp: ${JSON.stringify(got)}`);
      assert.equal(m.text, JSON.stringify({ qos }));
      assert.equal(m.qos, qos, `delivery QoS on the QoS ${qos} subscription`);
    }
    assert.equal(byTopic[`${t}/tree`]?.text, "parent", "`tree/#` matches its parent level `tree`");
    assert.equal(byTopic[`${t}/tree/a/b`]?.text, "child");
    // The unmatched topic never arrives: a later publish arrives alone.
    await pub.publishAsync(`${t}/q0/room2/temp`, "last", { qos: 0 });
    const more = await box.next(6, "the last publish");
    assert.deepEqual([more[5].topic, more[5].text], [`${t}/q0/room2/temp`, "last"]);
    await Promise.all([sub.endAsync(), pub.endAsync()]);
  });
}

test("a shared subscription ($share) spreads records over its members, each once", { skip }, async () => {
  const t = `${prefix}/jobs`;
  const group = `${prefix}g`;
  const members = [];
  for (const i of [0, 1]) {
    const c = await connect({ clientId: `${prefix}-member${i}` });
    const box = inbox(c);
    const [g] = await within(c.subscribeAsync(`$share/${group}/${t}/+`, { qos: 1 }), "SUBACK of the shared subscription");
    assert.equal(g.qos, 1);
    members.push(box);
  }
  const pub = await connect({ clientId: `${prefix}-jobs-pub` });
  const n = 20;
  for (let i = 0; i < n; i++) {
    await pub.publishAsync(`${t}/k${i % 4}`, String(i), { qos: 1, properties: { userProperties: { key: `k${i % 4}` } } });
  }
  const all = () => members.flatMap((b) => b.got.map((m) => Number(m.text)));
  await within(new Promise((resolve) => {
    const tick = setInterval(() => { if (all().length >= n) { clearInterval(tick); resolve(); } }, 10);
  }), `${n} shared deliveries (have ${JSON.stringify(all())})`);
  assert.deepEqual([...all()].sort((a, b) => a - b), Array.from({ length: n }, (_, i) => i), "each record once over the group");
});

// Either may join first: the group is one, whoever made it.
for (const mqttFirst of [true, false]) {
  test(`an MQTT shared subscription and a native group member share one consumer group (${mqttFirst ? "MQTT" : "native"} joins first)`, { skip }, async () => {
    const group = `${prefix}mixed${mqttFirst ? "m" : "n"}`;
    const topic = `${prefix}.mixed${mqttFirst ? "m" : "n"}`;
    let native;
    if (!mqttFirst) native = await nativeSubscriber(`${topic}.*`, { group });
    const member = await connect({ clientId: `${group}-member` });
    const box = inbox(member);
    const [g] = await within(member.subscribeAsync(`$share/${group}/${topic.replaceAll(".", "/")}/+`, { qos: 1 }), "SUBACK of the shared subscription");
    assert.equal(g.qos, 1);
    if (mqttFirst) native = await nativeSubscriber(`${topic}.*`, { group });
    const n = 20;
    for (let i = 0; i < n; i++) {
      await httpPublish({ topic: `${topic}.k${i % 4}`, key: `k${i % 4}`, data: i });
    }
    const all = () => [...native.messages().map((m) => m.data), ...box.got.map((m) => JSON.parse(m.text))];
    await within(new Promise((resolve) => {
      const tick = setInterval(() => { if (all().length >= n) { clearInterval(tick); resolve(); } }, 10);
    }), `${n} deliveries over both members (have ${JSON.stringify(all())})`);
    assert.deepEqual([...all()].sort((a, b) => a - b), Array.from({ length: n }, (_, i) => i), "each record once over the group");
    native.close();
  });
}

test("a retained message reaches a later subscriber with the retain flag, and an empty one clears it", { skip }, async () => {
  const t = `${prefix}/status/door`;
  const pub = await connect({ clientId: `${prefix}-retain-pub` });
  await within(pub.publishAsync(t, "open", { qos: 1, retain: true }), "PUBACK of the retained publish");
  const late = await connect({ clientId: `${prefix}-retain-late` });
  const box = inbox(late);
  await within(late.subscribeAsync(`${prefix}/status/+`, { qos: 1 }), "SUBACK");
  const [m] = await box.next(1, "the retained message");
  assert.deepEqual([m.topic, m.text, m.retain], [t, "open", true]);
  // A live publish is not flagged retained for a subscription that exists.
  await pub.publishAsync(t, "closed", { qos: 1 });
  const [, live] = await box.next(2, "the live publish");
  assert.deepEqual([live.text, live.retain], ["closed", false]);
  await within(pub.publishAsync(t, "", { qos: 1, retain: true }), "PUBACK of the clearing publish");
  const later = await connect({ clientId: `${prefix}-retain-later` });
  const box2 = inbox(later);
  await later.subscribeAsync(`${prefix}/status/+`, { qos: 1 });
  await pub.publishAsync(`${prefix}/status/window`, "marker", { qos: 1 });
  const [first] = await box2.next(1, "the marker after the cleared retained message");
  assert.deepEqual([first.topic, first.text], [`${prefix}/status/window`, "marker"], "the cleared retained message was delivered");
});

for (const version of [5, 4]) {
  test(`MQTT ${version === 5 ? "5" : "3.1.1"}: a will is published when a client's connection ends without DISCONNECT`, { skip }, async () => {
    const t = `${prefix}/wills/v${version}`;
    const watcher = await connect({ protocolVersion: version, clientId: `${prefix}-will-watch-v${version}` });
    const box = inbox(watcher);
    await watcher.subscribeAsync(t, { qos: 1 });
    const doomed = await connect({
      protocolVersion: version,
      clientId: `${prefix}-will-v${version}`,
      will: { topic: t, payload: Buffer.from("gone"), qos: 1, retain: false },
    });
    // A clean end publishes no will.
    const clean = await connect({
      protocolVersion: version,
      clientId: `${prefix}-will-clean-v${version}`,
      will: { topic: t, payload: Buffer.from("clean end: must not be published"), qos: 1, retain: false },
    });
    await clean.endAsync();
    doomed.stream.destroy(); // the socket closes, no DISCONNECT
    const [m] = await box.next(1, "the will");
    assert.deepEqual([m.topic, m.text], [t, "gone"]);
    // Nothing else: a marker published after arrives second.
    await watcher.publishAsync(t, "marker", { qos: 1 });
    const got = await box.next(2, "the marker");
    assert.equal(got[1].text, "marker", `the clean end's will was published: ${JSON.stringify(got)}`);
  });
}

test("cross-protocol: native HTTP and WebSocket publishes reach mqtt.js as their JSON text", { skip }, async () => {
  const sub = await connect({ clientId: `${prefix}-cross-in` });
  const box = inbox(sub);
  await sub.subscribeAsync(`${prefix}/cross/in/#`, { qos: 1 });
  await httpPublish({ topic: `${prefix}.cross.in.http`, data: { n: 1, s: "é" } });
  const ws = await nativeSubscriber(`${prefix}.cross.none`); // a native session to publish from
  ws.ws.send(JSON.stringify({ op: "publish", id: 2, topic: `${prefix}.cross.in.ws`, data: "hello" }));
  await httpPublish({ topic: `${prefix}.cross.in.bytes`, data: Buffer.from([0, 1, 255]).toString("base64"), encoding: "base64" });
  const got = await box.next(3, "the native publishes");
  const byTopic = Object.fromEntries(got.map((m) => [m.topic, m]));
  assert.deepEqual(JSON.parse(byTopic[`${prefix}/cross/in/http`].text), { n: 1, s: "é" });
  assert.equal(byTopic[`${prefix}/cross/in/ws`].text, '"hello"', "a native string is delivered as its JSON text");
  assert.deepEqual([...byTopic[`${prefix}/cross/in/bytes`].bytes], [0, 1, 255], "a binary publish is delivered as its bytes");
  ws.close();
});

test("cross-protocol: an mqtt.js publish reaches a native WebSocket subscriber", { skip }, async () => {
  const native = await nativeSubscriber(`${prefix}.cross.out.*`);
  const pub = await connect({ clientId: `${prefix}-cross-out` });
  await pub.publishAsync(`${prefix}/cross/out/json`, JSON.stringify({ temp: 21.5 }), { qos: 1 });
  await pub.publishAsync(`${prefix}/cross/out/text`, "plain text", { qos: 1 });
  const [a, b] = await native.next(2, "the mqtt.js publishes");
  assert.equal(a.topic, `${prefix}.cross.out.json`);
  assert.deepEqual(a.data, { temp: 21.5 }, "a JSON payload is data unchanged");
  assert.equal(b.topic, `${prefix}.cross.out.text`);
  assert.equal(b.encoding, "base64", "a payload that is not JSON is in the binary encoding");
  assert.equal(Buffer.from(b.data, "base64").toString("utf8"), "plain text");
  native.close();
});
