// The golden transcripts of the wire protocol (internal/wire/testdata, the
// same files the gateway, the Go client, the command-line client and the
// load generator are tested against), replayed against the JS client:
//
//     node --test web/
//
// Each session of a transcript becomes one client on a fake WebSocket.
// Its client frames are made with the client's own calls (subscribe, or
// the generic request for other ops), the fake socket answers with the
// transcript's server frames (the reply's id replaced by the client's),
// and the test checks what the client makes of them: a reply resolves
// to the frame's fields (without op and id), an error reply rejects with its code and message, a
// message reaches the handler of its subscription as written (a binary
// one with its data decoded to a Uint8Array, a delta one with the payload
// published at its position), a gap and
// an error without a request are events. Sessions on the lean envelope
// are left out (the client does not ask for it).
//
// Transcript format: internal/wire/golden/golden.go.

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { join, dirname } from "node:path";
import { SwitchyardError } from "./static/switchyard.js";
import { open } from "./fakews.mjs";

const dir = join(dirname(fileURLToPath(import.meta.url)), "..", "internal", "wire", "testdata");

/** Parses a txtar archive: its comment and its files. */
export function parseTxtar(text) {
  const files = [];
  let comment = [];
  let cur = null;
  for (const line of text.split("\n")) {
    const m = /^-- (.+) --$/.exec(line);
    if (m) {
      cur = { name: m[1].trim(), lines: [] };
      files.push(cur);
    } else if (cur) cur.lines.push(line);
    else comment.push(line);
  }
  return { comment: comment.join("\n"), files };
}

/** Reads one transcript: the sessions' queries and the steps. */
function load(name) {
  const ar = parseTxtar(readFileSync(join(dir, name), "utf8"));
  const query = {};
  for (const line of ar.comment.split("\n")) {
    const m = /^session (\S+):\s*(.*)$/.exec(line);
    if (m) query[m[1]] = m[2];
  }
  const steps = [];
  const frames = [];
  for (const f of ar.files) {
    for (const l of f.lines) {
      if (l === "" || l.startsWith("#")) continue;
      if (f.name === "frames") {
        frames.push(l);
        continue;
      }
      const m = /^(\S+)([<>]) (.*)$/.exec(l);
      assert.ok(m, `${name}: bad step ${l}`);
      steps.push({ session: m[1], send: m[2] === ">", frame: m[3] });
    }
  }
  return { name, query, steps, frames };
}

/**
 * The JSON payload of every publish of a transcript that was answered
 * published, by "topic/partition/offset": what a delta message there
 * must turn into.
 */
function publishedData(steps) {
  const out = new Map();
  for (let i = 0; i + 1 < steps.length; i++) {
    const f = parse(steps[i].frame);
    if (!steps[i].send || !f || f.op !== "publish" || f.encoding !== undefined) continue;
    const r = steps.slice(i + 1).find((st) => st.session === steps[i].session && !st.send);
    const reply = r && parse(r.frame);
    if (reply && reply.op === "published" && reply.id === f.id) out.set(`${reply.topic}/${reply.partition}/${reply.offset}`, f.data);
  }
  return out;
}

function parse(s) {
  try {
    return JSON.parse(s);
  } catch {
    return undefined;
  }
}

/**
 * How long one transcript's test may take: far more than any needs (they
 * take milliseconds), so that a reply the client never resolves fails the
 * test instead of leaving it waiting.
 */
const testTimeout = { timeout: 5_000 };

/**
 * Opens a client for test t that is closed however the test ends: a
 * client left open by a failed assertion, or by a test stopped at its
 * timeout, keeps its timers, and node with them, running.
 */
async function openFor(t) {
  const { client, ws } = await open();
  t.signal.addEventListener("abort", () => client.close(), { once: true });
  return { client, ws };
}

/** Replays one session of a transcript against a client. */
async function replaySession(t, steps, published) {
  const { client, ws } = await openFor(t);
  try {
    return await replay(client, ws, steps, published);
  } finally {
    client.close();
  }
}

async function replay(client, ws, steps, published) {
  const messages = []; // what the handlers received
  const gaps = [];
  const errors = [];
  client.on("gap", (g) => gaps.push(g));
  client.on("error", (e) => errors.push(e));
  const want = { messages: [], gaps: [], errors: [] };
  const handler = (m) => messages.push(m);
  let checked = 0;
  for (let i = 0; i < steps.length; i++) {
    const st = steps[i];
    if (st.send) {
      const f = parse(st.frame);
      const next = steps[i + 1];
      const reply = next && !next.send ? parse(next.frame) : undefined;
      const isObject = f && typeof f === "object" && !Array.isArray(f);
      // A request the client can make: an object with an op and a number
      // or string id, whose reply carries that id back.
      // (The client never sends "delta" on a group subscription.)
      const makes = !(f && f.op === "subscribe" && f.group && f.delta !== undefined);
      if (makes && isObject && typeof f.op === "string" && f.op !== "" && (typeof f.id === "number" || typeof f.id === "string") && reply && reply.id === f.id) {
        i++; // the reply is consumed here
        const { id: _, ...req } = f;
        let p;
        if (f.op === "subscribe" && reply.op === "subscribed") {
          const opts = {};
          for (const k of ["group", "from", "presence", "on_full", "filter", "delta"]) if (f[k] !== undefined) opts[k] = f[k];
          p = client.subscribe(f.pattern, handler, opts);
        } else {
          p = client._request(req);
        }
        const sent = ws.sent[ws.sent.length - 1];
        // What the client sent is the transcript's frame, but for the id.
        const { id: _sid, ...sentFields } = sent;
        assert.deepEqual(sentFields, req, `the client sent ${JSON.stringify(sent)} for ${st.frame}`);
        const answer = { ...reply, id: sent.id };
        // Keep the golden frame's field order: op, id, then the rest.
        ws.recv({ op: answer.op, id: answer.id, ...answer });
        if (reply.op === "error") {
          await assert.rejects(p, (err) => {
            assert.ok(err instanceof SwitchyardError, String(err));
            assert.equal(err.code, reply.code);
            assert.equal(err.message, reply.message);
            return true;
          });
        } else if (reply.op === "subscribed") {
          const sub = await p;
          assert.equal(sub.pattern, reply.pattern);
          assert.equal(sub.group, reply.group);
        } else {
          // A request resolves to the reply without op and id.
          const { op: _op, id: _id, ...rest } = answer;
          assert.deepEqual(await p, rest);
        }
        checked++;
        continue;
      }
      // Anything else (not JSON, no id, an id the client never makes):
      // its replies are delivered as they come below.
      continue;
    }
    // A server frame not consumed as a reply: delivered as written.
    const f = parse(st.frame);
    assert.ok(f, `server frame is not JSON: ${st.frame}`);
    // A delta message reaches the handler with the whole payload: the
    // one published at its position. A binary record ("encoding":"base64")
    // reaches the handler as bytes.
    if (f.op === "message" && f.delta === true) {
      const { delta: _d, encoding: _e, ...rest } = f;
      const p = published.get(`${f.topic}/${f.partition}/${f.offset}`);
      assert.ok(p !== undefined, `no publish of the delta message ${st.frame}`);
      want.messages.push({ ...rest, data: p });
    } else if (f.op === "message" && f.encoding === "base64") want.messages.push({ ...f, data: new Uint8Array(Buffer.from(f.data, "base64")) });
    else if (f.op === "message") want.messages.push(f);
    else if (f.op === "gap") want.gaps.push(f);
    else if (f.op === "error") want.errors.push(f);
    ws.recv(st.frame);
    checked++;
  }
  await new Promise((r) => setTimeout(r, 0)); // events queued in microtasks
  assert.deepEqual(messages, want.messages);
  assert.deepEqual(gaps, want.gaps);
  assert.deepEqual(
    errors.map((e) => ({ code: e.code, message: e.message })),
    want.errors.map((e) => ({ code: e.code, message: e.message })),
  );
  return checked;
}

const names = readdirSync(dir).filter((n) => n.endsWith(".txtar")).sort();

test("the golden transcripts are found", testTimeout, () => {
  assert.ok(names.length >= 10, `transcripts in ${dir}: ${names}`);
});

for (const name of names) {
  const tr = load(name);
  const sessions = [...new Set(tr.steps.map((s) => s.session))].filter((s) => !tr.query[s]);
  for (const s of sessions) {
    test(`golden ${tr.name} session ${s}`, testTimeout, async (t) => {
      const checked = await replaySession(t, tr.steps.filter((st) => st.session === s), publishedData(tr.steps));
      assert.ok(checked > 0);
    });
  }
  if (tr.frames.length > 0) {
    test(`golden ${tr.name} frames`, testTimeout, async (t) => {
      // Error frames for every code: a request's error rejects with the
      // frame's code and message.
      const { client, ws } = await openFor(t);
      try {
        for (const line of tr.frames) {
          const f = JSON.parse(line);
          assert.equal(f.op, "error");
          const p = client._request({ op: "publish", topic: "t", data: 1 });
          const sent = ws.sent[ws.sent.length - 1];
          ws.recv({ op: "error", id: sent.id, code: f.code, message: f.message });
          await assert.rejects(p, (err) => err instanceof SwitchyardError && err.code === f.code && err.message === f.message);
        }
      } finally {
        client.close();
      }
    });
  }
}
