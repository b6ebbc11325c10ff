// Tests of fossil.js, the JS client's Fossil delta support:
//
//     node --test web/
//
// The vectors (web/testdata/fossil_vectors.json) are those the Go client
// is tested against (client/fossil_vectors_test.go makes them with the
// gateway's Fossil library); then the client applies deltas of a
// "delta": "fossil" subscription on a fake WebSocket.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { join, dirname } from "node:path";
import { applyDelta, checksum, dataText } from "./static/fossil.js";
import { open, subscribed, until, FakeWS } from "./fakews.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const vectors = JSON.parse(readFileSync(join(here, "testdata", "fossil_vectors.json"), "utf8"));
const bytes = (b64) => (b64 ? new Uint8Array(Buffer.from(b64, "base64")) : new Uint8Array(0));
const text = (b) => new TextDecoder().decode(b);

test("the Fossil vectors are found", () => {
  assert.ok(vectors.length >= 10);
});

for (const v of vectors) {
  test(`fossil vector: ${v.name}`, () => {
    const origin = bytes(v.origin);
    const delta = bytes(v.delta);
    if (v.bad) {
      assert.throws(() => applyDelta(origin, delta), /fossil:/);
      return;
    }
    assert.deepEqual(applyDelta(origin, delta), bytes(v.target));
  });
}

// A delta made by hand: copy the common prefix of origin and target,
// insert the rest.
const DIGITS = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~";
function int(n) {
  let s = "";
  do {
    s = DIGITS[n % 64] + s;
    n = Math.floor(n / 64);
  } while (n > 0);
  return s;
}
function prefixDelta(origin, target) {
  const o = new TextEncoder().encode(origin);
  const t = new TextEncoder().encode(target);
  let p = 0;
  while (p < o.length && p < t.length && o[p] === t[p]) p++;
  // Whole characters only, so that the delta stays text.
  while (p > 0 && (t[p] & 0xc0) === 0x80) p--;
  const rest = text(t.subarray(p));
  return `${int(t.length)}\n${int(p)}@0,${int(t.length - p)}:${rest}${int(checksum(t))};`;
}

test("dataText returns the data member as written", () => {
  assert.equal(dataText('{"op":"message","key":"data","data": {"a": [1, "}"],"b":2} ,"time":"t"}'), '{"a": [1, "}"],"b":2}');
  assert.equal(dataText('{"op":"message","data":"s\\"x","time":"t"}'), '"s\\"x"');
  assert.equal(dataText('{"op":"message","data":12.50}'), "12.50");
  assert.equal(dataText('{"op":"gap"}'), undefined);
});

test("a delta subscription applies deltas to the payload as the server wrote it", async () => {
  const { client, ws } = await open();
  const got = [];
  await subscribed(client, ws, "dash", (m) => got.push(m), { delta: "fossil" });
  assert.equal(ws.last("subscribe").delta, "fossil");
  // Written with spaces and a trailing zero that JSON.stringify would not
  // reproduce: the delta applies to these bytes.
  const v0 = '{"cpu": 1.50, "status": "ok",  "n": 0}';
  const v1 = '{"cpu": 1.50, "status": "ok",  "n": 1}';
  const v2 = '{"cpu": 1.50, "status": "ok",  "n": 2, "x": "é"}';
  ws.recv(`{"op":"message","pattern":"dash","topic":"dash","partition":0,"offset":0,"data":${v0},"time":"2026-11-29T08:00:00.000Z"}`);
  ws.recv({ op: "message", pattern: "dash", topic: "dash", partition: 0, offset: 1, data: prefixDelta(v0, v1), delta: true, time: "2026-11-29T08:00:00.001Z" });
  const d2 = Buffer.from(prefixDelta(v1, v2), "utf8").toString("base64");
  ws.recv({ op: "message", pattern: "dash", topic: "dash", partition: 0, offset: 2, data: d2, encoding: "base64", delta: true, time: "2026-11-29T08:00:00.002Z" });
  assert.deepEqual(
    got.map((m) => m.data),
    [JSON.parse(v0), JSON.parse(v1), JSON.parse(v2)],
  );
  for (const m of got) {
    assert.equal(m.delta, undefined);
    assert.equal(m.encoding, undefined);
  }
  // The vectors' dashboard state, as the gateway's library made its delta.
  const v = vectors[0];
  ws.recv(`{"op":"message","pattern":"dash","topic":"dash","partition":1,"offset":0,"data":${text(bytes(v.origin))}}`);
  ws.recv({ op: "message", pattern: "dash", topic: "dash", partition: 1, offset: 1, data: text(bytes(v.delta)), delta: true });
  assert.deepEqual(got[got.length - 1].data, JSON.parse(text(bytes(v.target))));
  client.close();
});

test("a delta without its base is reported and the client resumes", async () => {
  const { client, ws } = await open();
  const got = [];
  const errors = [];
  client.on("error", (e) => errors.push(e));
  client.on("gap", () => {});
  await subscribed(client, ws, "dash", (m) => got.push(m), { delta: "fossil" });
  ws.recv({ op: "message", pattern: "dash", topic: "dash", partition: 0, offset: 0, data: { n: 0 } });
  ws.recv({ op: "gap", pattern: "dash", topic: "dash", partition: 0, from: 1, to: 2, reason: "queue_full" });
  ws.recv({ op: "message", pattern: "dash", topic: "dash", partition: 0, offset: 2, data: prefixDelta('{"n":1}', '{"n":2}'), delta: true });
  assert.equal(got.length, 1);
  assert.equal(errors.length, 1);
  assert.equal(errors[0].code, "bad_delta");
  await until(() => FakeWS.sockets.length === 2);
  const next = FakeWS.sockets[1];
  next.welcome();
  await until(() => next.last("subscribe"));
  const f = next.last("subscribe");
  assert.equal(f.delta, "fossil");
  assert.deepEqual(f.from.positions, [{ topic: "dash", partition: 0, offset: 0 }]);
  client.close();
});

// A hostile or corrupt delta may claim any output size up to 4 GiB in its
// first line; the client allocates the output before it reads a command.
// The claim is refused past what the delta's commands could make from its
// origin, and past the client's limit (maxDeltaBytes, default
// MAX_DELTA_OUTPUT_BYTES), before anything is allocated.
test("a delta claiming a huge output is refused before it is allocated", () => {
  const origin = new TextEncoder().encode('{"n":1}');
  // 64^5 = 1 GiB claimed by a delta of a dozen bytes.
  const huge = new TextEncoder().encode(`${int(2 ** 30)}\n0@0,${int(0)};`);
  assert.throws(() => applyDelta(origin, huge), /fossil: the delta claims an output of 1073741824 bytes/);
  // The largest claim there is: 4 GiB - 1.
  const max = new TextEncoder().encode(`${int(0xffffffff)}\n0;`);
  assert.throws(() => applyDelta(origin, max), /fossil: the delta claims an output of 4294967295 bytes/);
});

test("a delta within what its commands can make but over the limit is refused", () => {
  // 1000 copies of a 1 KiB origin: 1 MiB of output, possible, but over a
  // limit of 64 KiB.
  const origin = new Uint8Array(1024).fill(0x61);
  const out = new Uint8Array(1024 * 1000).fill(0x61);
  const delta = `${int(out.length)}\n` + `${int(1024)}@0,`.repeat(1000) + `${int(checksum(out))};`;
  const d = new TextEncoder().encode(delta);
  assert.deepEqual(applyDelta(origin, d), out);
  assert.throws(() => applyDelta(origin, d, 64 * 1024), /fossil: the delta claims an output of 1024000 bytes, more than the limit of 65536/);
});

test("a message whose delta claims too much is a bad_delta, and the client resumes", async (t) => {
  const { client, ws } = await open({ maxDeltaBytes: 16 });
  t.after(() => client.close());
  const errors = [];
  client.on("error", (e) => errors.push(e));
  const got = [];
  await subscribed(client, ws, "dash", (m) => got.push(m), { delta: "fossil" });
  ws.recv({ op: "message", pattern: "dash", topic: "dash", partition: 0, offset: 0, data: { n: 0 } });
  ws.recv({ op: "message", pattern: "dash", topic: "dash", partition: 0, offset: 1, data: prefixDelta('{"n":0}', '{"n":1,"pad":"xxxxxxxx"}'), delta: true });
  assert.equal(got.length, 1);
  assert.equal(errors.length, 1);
  assert.equal(errors[0].code, "bad_delta");
  assert.match(errors[0].message, /more than the limit of 16/);
  await until(() => FakeWS.sockets.length === 2);
  client.close();
});
