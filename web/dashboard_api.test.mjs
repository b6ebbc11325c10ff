// Tests of the dashboard's API calls (static/dashboard_api.js) under
// node, with the browser globals it reads stubbed.
import { test } from "node:test";
import assert from "node:assert/strict";

const store = new Map();
globalThis.sessionStorage = {
  getItem: (k) => (store.has(k) ? store.get(k) : null),
  setItem: (k, v) => store.set(k, String(v)),
  removeItem: (k) => store.delete(k),
};
globalThis.location = { search: "", pathname: "/", hash: "" };
globalThis.history = { replaceState() {} };

const { api, setCredential, apiError } = await import("./static/dashboard_api.js");

test("a call in flight at a sign-out rejects as stale instead of answering", async () => {
  setCredential("admin-key-1");
  let answer;
  const seen = [];
  globalThis.fetch = (path, init) => {
    seen.push(init.headers.Authorization);
    return new Promise((resolve) => {
      answer = () => resolve(new Response(JSON.stringify({ topics: [{ name: "secret.orders" }] }), { status: 200 }));
    });
  };
  const call = api("/v1/topics");
  await new Promise((r) => setImmediate(r));
  setCredential(""); // sign-out while the listing is in flight
  answer();
  await assert.rejects(call, (err) => err.code === "stale" && apiError(err) === "");
  assert.deepEqual(seen, ["Bearer admin-key-1"]);
});

test("a call that ends under the credential it began with answers", async () => {
  setCredential("admin-key-2");
  globalThis.fetch = async () => new Response(JSON.stringify({ topics: [] }), { status: 200 });
  assert.deepEqual(await api("/v1/topics"), { topics: [] });
  setCredential("");
});
