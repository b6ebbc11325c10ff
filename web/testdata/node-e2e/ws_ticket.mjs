// The client's WebSocket with a token against a real gateway: before
// every attempt it takes a one-use ticket (POST /v1/tickets, the token in
// an Authorization header) and opens /v1/ws?ticket=, so the token is never
// in a URL. Run by web/ticket_e2e_test.go as
//
//     node [--experimental-websocket] ws_ticket.mjs http://127.0.0.1:PORT/ TOKEN
//
// Prints "ok".
import assert from "node:assert/strict";
import { connect } from "../../static/switchyard.js";

const [url, token] = process.argv.slice(2);
let asked = 0;
const client = await connect(url, {
  token: () => (asked++, token),
  transports: ["websocket"],
  requestTimeoutMs: 5000,
  reconnect: { minDelayMs: 1, maxDelayMs: 50 },
});
assert.equal(client.transport, "websocket");
const got = [];
let arrived;
const wait = (n) => new Promise((resolve) => (arrived = () => got.length >= n && resolve()));
let two = wait(2);
await client.subscribe("e2e.ticket.#", (m) => {
  got.push(m.data);
  arrived();
}, { from: "earliest" });
await client.publish("e2e.ticket.a", { n: 1 });
// Outside the token's grants: the session is the token's.
await assert.rejects(client.publish("other.a", { n: 0 }), (err) => err.code === "forbidden");
await client.publish("e2e.ticket.a", { n: 2 });
await two;
assert.deepEqual(got, [{ n: 1 }, { n: 2 }]);

// A reconnect takes a new ticket: the first was used.
const reopened = new Promise((resolve) => client.on("open", resolve));
client._ws.close(4000, "test drop");
await reopened;
assert.equal(asked, 2);
two = wait(3);
await client.publish("e2e.ticket.a", { n: 3 });
await two;
client.close();

// A wrong token ends the connect as unauthorized, without a retry.
await assert.rejects(
  connect(url, { token: "wrong", transports: ["websocket"], requestTimeoutMs: 5000 }),
  (err) => err.code === "connect_failed" && err.closeCode === 1008,
);
console.log("ok");
