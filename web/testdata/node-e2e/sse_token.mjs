// The client's SSE transport with a token against a real gateway: the
// WebSocket is refused (as a proxy would), so the client receives over
// /v1/sse and publishes with POST /v1/publish, the token in a header.
// Run by web/sse_token_e2e_test.go as
//
//     node sse_token.mjs http://127.0.0.1:PORT/ TOKEN
//
// Prints "ok".
import assert from "node:assert/strict";
import { connect } from "../../static/switchyard.js";

class Refused {
  constructor() {
    this.readyState = 0;
    setTimeout(() => this.onclose && this.onclose({ code: 1006, reason: "refused" }), 0);
  }
  send() {}
  close() {}
}

const [url, token] = process.argv.slice(2);
const client = await connect(url, { WebSocket: Refused, transports: ["websocket", "sse"], token, requestTimeoutMs: 5000 });
assert.equal(client.transport, "sse");
const got = [];
let arrived;
const two = new Promise((resolve) => (arrived = () => got.length === 2 && resolve()));
await client.subscribe("e2e.sse.#", (m) => {
  got.push(m.data);
  arrived();
}, { from: "earliest" });
await client.publish("e2e.sse.a", { n: 1 });
await client.publish("e2e.sse.a", new Uint8Array([0, 255]));
await two;
assert.deepEqual(got[0], { n: 1 });
assert.deepEqual(Array.from(got[1]), [0, 255]);
client.close();

// A delta subscription over SSE: the stream asks for deltas, and the
// client applies them (the Go test checks the gateway sent some).
const dc = await connect(url, { WebSocket: Refused, transports: ["websocket", "sse"], token, requestTimeoutMs: 5000 });
assert.equal(dc.transport, "sse");
const states = [];
let third;
const three = new Promise((resolve) => (third = () => states.length === 3 && resolve()));
await dc.subscribe("e2e.delta", (m) => {
  states.push(m.data);
  third();
}, { delta: "fossil" });
const base = { series: Array.from({ length: 50 }, (_, i) => ({ name: "cpu" + i, value: i })) };
for (let n = 0; n < 3; n++) {
  base.series[7].value = 1000 + n;
  await dc.publish("e2e.delta", base);
}
await three;
assert.deepEqual(states.map((s) => s.series[7].value), [1000, 1001, 1002]);
assert.deepEqual(states[2], base);
dc.close();

// A wrong token ends the client as unauthorized, without retrying.
const bad = await connect(url, { WebSocket: Refused, transports: ["websocket", "sse"], token: "wrong", requestTimeoutMs: 5000 });
bad.on("error", () => {});
await assert.rejects(bad.subscribe("e2e.sse.#", () => {}));
assert.equal((await bad.closed()).code, "unauthorized");
console.log("ok");
