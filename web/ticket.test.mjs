// The JavaScript client's WebSocket credential: never in the URL. With a
// token the client takes a one-use ticket (POST /v1/tickets, the token in
// an Authorization header) before every attempt and opens ?ticket=; with
// auth: "header" the token goes in the WebSocket constructor's headers.
// Run with `node --test web/`.

import { test } from "node:test";
import assert from "node:assert/strict";
import { connect } from "./static/switchyard.js";
import { FakeWS, latest, until, open, tickets } from "./fakews.mjs";

test("a token is traded for a ticket before every WebSocket attempt, never put in the URL", async (t) => {
  let n = 0;
  const { client, ws } = await open({ token: () => "secret-" + ++n });
  t.after(() => client.close());
  ws.drop(1006);
  await until(() => FakeWS.sockets.length === 2);
  latest().welcome();
  await until(() => client.state === "open");
  for (const s of FakeWS.sockets) {
    assert.ok(!s.url.includes("secret"), `a token in the URL ${s.url}`);
    assert.ok(!s.url.includes("token="), s.url);
  }
  assert.deepEqual(FakeWS.sockets.map((s) => new URL(s.url).searchParams.get("ticket")), ["tk1", "tk2"]);
  assert.deepEqual([...tickets.issued.values()], ["secret-1", "secret-2"]);
  for (const r of tickets.requests) {
    assert.equal(r.url, "http://gw.test/v1/tickets");
    assert.equal(r.init.method, "POST");
    assert.match(r.init.headers.Authorization, /^Bearer secret-\d$/);
  }
});

test("the ticket URL follows the gateway URL's scheme and path", async (t) => {
  FakeWS.sockets = [];
  tickets.requests.length = 0;
  const p = connect("https://gw.test/base/v1/ws", { WebSocket: FakeWS, fetch: tickets.fetch, token: "jwt" });
  await until(() => FakeWS.sockets.length === 1);
  latest().welcome();
  const client = await p;
  t.after(() => client.close());
  assert.equal(tickets.requests[0].url, "https://gw.test/base/v1/tickets");
  assert.match(latest().url, /^wss:\/\/gw\.test\/base\/v1\/ws\?ticket=tk\d+$/);
});

test("without a token no ticket is asked for", async (t) => {
  const { client, ws } = await open();
  t.after(() => client.close());
  assert.equal(ws.url, "ws://gw.test/v1/ws");
  assert.equal(tickets.requests.length, 0);
});

test("auth: header sends the token in the constructor's headers and takes no ticket", async (t) => {
  const { client, ws } = await open({ token: "jwt", auth: "header" });
  t.after(() => client.close());
  assert.equal(ws.url, "ws://gw.test/v1/ws");
  assert.deepEqual(ws.options, { headers: { Authorization: "Bearer jwt" } });
  assert.equal(tickets.requests.length, 0);
});

// connectWith opens a client whose ticket requests are answered by answer.
function connectWith(answer, opts = {}) {
  FakeWS.sockets = [];
  const fetch = async (url, init) => answer(url, init);
  return connect("ws://gw.test/v1/ws", { WebSocket: FakeWS, fetch, token: "stale", transports: ["websocket"], ...opts });
}

test("a refused ticket request fails the connect as unauthorized, without retrying", async () => {
  let asked = 0;
  const p = connectWith(() => {
    asked++;
    return Response.json({ code: "unauthorized", message: "the token has expired" }, { status: 401 });
  });
  await assert.rejects(p, (err) => err.code === "connect_failed" && err.closeCode === 1008 && /the token has expired/.test(err.message));
  assert.equal(asked, 1);
  assert.equal(FakeWS.sockets.length, 0, "no WebSocket opened");
});

test("a gateway without tickets is named, and the token is not put in the URL instead", async () => {
  const p = connectWith(() => Response.json({ code: "not_found", message: "no endpoint POST /v1/tickets" }, { status: 404 }));
  await assert.rejects(p, (err) => /offers no tickets/.test(err.message) && /auth: "header"/.test(err.message));
  assert.equal(FakeWS.sockets.length, 0);
});

test("a ticket request that fails on the network is retried on the next attempt", async (t) => {
  let asked = 0;
  const answer = () => {
    if (++asked === 1) throw new TypeError("fetch failed");
    return Response.json({ ticket: "tk-ok", expires: "2026-12-01T08:00:10Z", ttl_ms: 10000 }, { status: 201 });
  };
  // The first attempt fails; once open, a later drop takes a new ticket.
  const p = connectWith(answer, { transports: ["websocket"] });
  await assert.rejects(p, (err) => err.code === "connect_failed" && /fetch failed/.test(err.message));
  const c = connectWith(answer);
  await until(() => FakeWS.sockets.length === 1);
  latest().welcome();
  const client = await c;
  t.after(() => client.close());
  assert.equal(new URL(latest().url).searchParams.get("ticket"), "tk-ok");
});
