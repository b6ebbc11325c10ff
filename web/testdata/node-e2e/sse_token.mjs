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

// A wrong token ends the client as unauthorized, without retrying.
const bad = await connect(url, { WebSocket: Refused, transports: ["websocket", "sse"], token: "wrong", requestTimeoutMs: 5000 });
bad.on("error", () => {});
await assert.rejects(bad.subscribe("e2e.sse.#", () => {}));
assert.equal((await bad.closed()).code, "unauthorized");
console.log("ok");
