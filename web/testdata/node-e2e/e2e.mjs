// Drives the client against a real gateway from Node: connect, a stream
// subscription with for await, publish, a handler subscription in a group
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
