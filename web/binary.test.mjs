// Binary payloads in the client (web/static/switchyard.js): bytes are
// published with "encoding":"base64" and a record that arrives with it is
// handed over as a Uint8Array. Run with `node --test web/`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { latest, until, open, subscribed, msg } from "./fakews.mjs";

test("bytes are published as base64 with encoding, whatever holds them", async (t) => {
  const { client, ws } = await open();
  t.after(() => client.close());
  const bytes = [0xff, 0x00, 0xd8, 0x7b, 0x22];
  const cases = [
    { name: "Uint8Array", data: new Uint8Array(bytes) },
    { name: "ArrayBuffer", data: new Uint8Array(bytes).buffer },
    { name: "Buffer", data: Buffer.from(bytes) },
    { name: "a view into a larger buffer", data: new Uint8Array([9, ...bytes, 9]).subarray(1, 1 + bytes.length) },
    { name: "DataView", data: new DataView(new Uint8Array(bytes).buffer) },
  ];
  for (const c of cases) {
    const p = client.publish("blobs.raw", c.data, { key: "k" });
    const f = ws.last("publish");
    assert.deepEqual(f, { op: "publish", id: f.id, topic: "blobs.raw", data: "/wDYeyI=", encoding: "base64", key: "k" }, c.name);
    ws.recv({ op: "published", id: f.id, topic: "blobs.raw", partition: 0, offset: 1 });
    await p;
  }
  // Anything else is JSON, as before; an array of numbers is not bytes.
  const p = client.publish("blobs.raw", [1, 2]);
  const f = ws.last("publish");
  assert.deepEqual(f, { op: "publish", id: f.id, topic: "blobs.raw", data: [1, 2] });
  ws.recv({ op: "published", id: f.id, topic: "blobs.raw", partition: 0, offset: 2 });
  await p;
});

test("a large payload round-trips through base64", async (t) => {
  const { client, ws } = await open();
  t.after(() => client.close());
  const big = new Uint8Array(300 * 1024);
  for (let i = 0; i < big.length; i++) big[i] = (i * 31) & 0xff;
  const p = client.publish("blobs.big", big);
  const f = ws.last("publish");
  assert.equal(f.encoding, "base64");
  assert.deepEqual(new Uint8Array(Buffer.from(f.data, "base64")), big);
  ws.recv({ op: "published", id: f.id, topic: "blobs.big", partition: 0, offset: 0 });
  await p;
});

test("a binary record reaches handlers and streams as a Uint8Array", async (t) => {
  const { client, ws } = await open();
  t.after(() => client.close());
  const got = [];
  await subscribed(client, ws, "blobs.#", (m) => got.push(m));
  ws.recv(
    msg("blobs.#", "blobs.raw", 0, 0, { data: "/wDYeyI=", encoding: "base64" }),
    msg("blobs.#", "blobs.raw", 0, 1, { data: { json: true } }),
    msg("blobs.#", "blobs.raw", 0, 2, { data: "", encoding: "base64" }),
  );
  assert.equal(got.length, 3);
  assert.ok(got[0].data instanceof Uint8Array);
  assert.deepEqual(Array.from(got[0].data), [0xff, 0x00, 0xd8, 0x7b, 0x22]);
  assert.equal(got[0].encoding, "base64");
  assert.deepEqual(got[1].data, { json: true });
  assert.equal(got[1].encoding, undefined);
  assert.deepEqual(got[2].data, new Uint8Array(0));

  const stream = client.subscribe("more.#");
  const f = ws.last("subscribe");
  ws.recv({ op: "subscribed", id: f.id, pattern: "more.#" });
  await stream.ready;
  ws.recv(msg("more.#", "more.x", 0, 0, { data: "AQID", encoding: "base64" }));
  for await (const m of stream) {
    assert.deepEqual(m.data, new Uint8Array([1, 2, 3]));
    break;
  }
});

test("a binary record whose data is not base64 is reported, not handed over", async (t) => {
  const { client, ws } = await open();
  t.after(() => client.close());
  const got = [];
  const errors = [];
  client.on("error", (e) => errors.push(e));
  await subscribed(client, ws, "blobs.#", (m) => got.push(m));
  ws.recv(msg("blobs.#", "blobs.raw", 0, 0, { data: "not base64!", encoding: "base64" }));
  await until(() => errors.length === 1);
  assert.equal(errors[0].code, "bad_frame");
  assert.match(errors[0].message, /blobs\.raw\/0\/0/);
  assert.equal(got.length, 0);
  assert.equal(latest(), ws);
});
