// The dashboard's header-sending EventSource (static/eventstream.js), run
// with `node --test web/` against a fetch that answers from a script.
import { test } from "node:test";
import assert from "node:assert/strict";
import { headerEventSource } from "./static/eventstream.js";

/** Waits until cond() is truthy, polling with a deadline. */
async function until(cond, ms = 2000) {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 2));
  }
}

/** A fetch whose n-th call answers with answers[n] ({status, chunks}) and records every request. */
function scriptedFetch(answers) {
  const calls = [];
  const fetch = async (url, init) => {
    calls.push({ url, headers: { ...init.headers } });
    const a = answers[Math.min(calls.length - 1, answers.length - 1)];
    if (a.status !== 200) {
      return new Response(JSON.stringify({ code: "unauthorized", message: "the token is invalid" }), {
        status: a.status,
        headers: { "Content-Type": "application/json" },
      });
    }
    const enc = new TextEncoder();
    const body = new ReadableStream({
      start(c) {
        for (const chunk of a.chunks) c.enqueue(enc.encode(chunk));
        if (!a.hold) c.close();
      },
    });
    return new Response(body, { status: 200, headers: { "Content-Type": "text/event-stream" } });
  };
  return { fetch, calls };
}

test("events are parsed, named, and the stream resumes with Last-Event-ID and the headers", async (t) => {
  const { fetch, calls } = scriptedFetch([
    { status: 200, chunks: ["retry: 1\n\nevent: welcome\ndata: {\"op\":\"wel", "come\"}\n\n", "id: s.1\ndata: {\"n\":1}\r", "\ndata: two\r\n\r\n: keepalive\n\n"] },
    { status: 200, chunks: ["id: s.2\ndata: {\"n\":2}\ndata: more\n\n"], hold: true },
  ]);
  const saved = globalThis.fetch;
  globalThis.fetch = fetch;
  t.after(() => (globalThis.fetch = saved));
  const ES = headerEventSource(() => ({ Authorization: "Bearer secret" }));
  const es = new ES("http://gw.test/v1/sse?pattern=a");
  const got = [];
  es.onmessage = (ev) => got.push(["message", ev.data, ev.lastEventId]);
  es.addEventListener("welcome", (ev) => got.push(["welcome", ev.data]));
  await until(() => got.length === 3);
  es.close();
  assert.deepEqual(got, [
    ["welcome", '{"op":"welcome"}'],
    ["message", '{"n":1}\ntwo', "s.1"], // a "\r\n" split across chunks ends one line
    ["message", '{"n":2}\nmore', "s.2"],
  ]);
  assert.equal(calls.length, 2);
  for (const c of calls) {
    assert.equal(c.url, "http://gw.test/v1/sse?pattern=a");
    assert.equal(c.headers.Authorization, "Bearer secret");
  }
  assert.equal(calls[0].headers["Last-Event-ID"], undefined);
  assert.equal(calls[1].headers["Last-Event-ID"], "s.1");
  assert.equal(es.readyState, 2);
});

test("a refused stream closes for good and reports the status", async (t) => {
  const { fetch, calls } = scriptedFetch([{ status: 401 }]);
  const saved = globalThis.fetch;
  globalThis.fetch = fetch;
  t.after(() => (globalThis.fetch = saved));
  const refused = [];
  const ES = headerEventSource(() => ({}), (status, body) => refused.push([status, body?.code]));
  const es = new ES("http://gw.test/v1/sse?pattern=a");
  const errors = [];
  es.addEventListener("error", (ev) => errors.push(ev.data));
  await until(() => errors.length === 1);
  assert.equal(es.readyState, 2);
  assert.deepEqual(refused, [[401, "unauthorized"]]);
  assert.deepEqual(errors, [undefined]); // no data: not a server error event
  await new Promise((r) => setTimeout(r, 20));
  assert.equal(calls.length, 1, "no retry after a refusal");
});
