// Drives the client against a real gateway from Node: connect, a stream
// subscription with for await, publish, bytes, a handler subscription in a group
// with ack, status(), AbortSignal and closed(). Run by web/e2e_test.go as
//
//     node --experimental-websocket e2e.mjs ws://127.0.0.1:PORT/v1/ws
//
// (Node 22 and later have WebSocket without the flag.) Prints "ok".
import assert from "node:assert/strict";
import { connect } from "../../static/switchyard.js";

const url = process.argv[2];
const client = await connect(url, { requestTimeoutMs: 5000 });
const states = client.status();

// Stream form: records published before and after the subscription.
await client.publish("e2e.orders", { n: 0 }, { key: "k" });
const stream = client.subscribe("e2e.#", { from: "earliest" });
await stream.ready;
const res = await client.publish("e2e.orders", { n: 1 }, { headers: { region: "eu" } });
assert.equal(res.topic, "e2e.orders");
const got = [];
for await (const msg of stream) {
  got.push(msg.data.n);
  if (got.length === 2) break;
}
assert.deepEqual(got, [0, 1]);

// Bytes: published from a Uint8Array, delivered as one; bytes that are
// JSON are stored as that JSON.
const blobs = client.subscribe("e2e.blobs", { from: "earliest" });
await blobs.ready;
const raw = new Uint8Array([0x00, 0xff, 0xd8, 0x7b, 0x0a]);
await client.publish("e2e.blobs", raw);
await client.publish("e2e.blobs", new TextEncoder().encode('{"n":7}').buffer);
const blobGot = [];
for await (const msg of blobs) {
  blobGot.push(msg);
  if (blobGot.length === 2) break;
}
assert.ok(blobGot[0].data instanceof Uint8Array);
assert.deepEqual(Array.from(blobGot[0].data), Array.from(raw));
assert.equal(blobGot[0].encoding, "base64");
assert.deepEqual(blobGot[1].data, { n: 7 });
assert.equal(blobGot[1].encoding, undefined);

// Group with a handler and ack.
const acked = new Promise((resolve, reject) => {
  client
    .subscribe(
      "e2e.jobs",
      (msg) => {
        client.ack(msg).then(() => resolve(msg), reject);
      },
      { group: "e2e-workers", from: "earliest" },
    )
    .catch(reject);
});
await client.publish("e2e.jobs", { job: 1 });
const job = await acked;
assert.equal(job.group, "e2e-workers");
assert.equal(job.attempt, 1);

// A server refusal and an aborted publish.
await assert.rejects(client.publish("$sys.nope", 1), (err) => err.code === "forbidden");
await assert.rejects(client.publish("e2e.orders", 2, { signal: AbortSignal.abort() }), (err) => err.code === "aborted");

client.close();
assert.equal(await client.closed(), undefined);
const seen = [];
for await (const s of states) seen.push(s.state);
assert.deepEqual(seen, ["closed"]);
console.log("ok");
