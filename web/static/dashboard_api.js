// dashboard_api.js: the dashboard's credential and its calls to the
// gateway's HTTP API, and the topics it knows; shared by dashboard.js and
// dashboard_panels.js.
//
// Everything inserted into the page is inserted elsewhere; this module
// touches only sessionStorage, the address bar (a credential left in it by
// an old link is removed) and fetch.

// ---- credential --------------------------------------------------------------

// The admin key or token typed into the sign-in form lives in
// sessionStorage (this tab only, gone when it closes) and travels only in
// Authorization headers: never in a URL, where histories, proxies and access
// logs would keep it. A credential left in the URL by an old link is
// removed from the address bar unused.
const CRED_KEY = "switchyard.credential";

export function credential() {
  try {
    return sessionStorage.getItem(CRED_KEY) || "";
  } catch {
    return "";
  }
}

export function setCredential(v) {
  try {
    if (v) sessionStorage.setItem(CRED_KEY, v);
    else sessionStorage.removeItem(CRED_KEY);
  } catch {
    /* storage disabled: the credential lasts until the page is left */
  }
  memoryCred = v;
}
let memoryCred = credential();

/** The credential in use ("" for none). */
export function currentCredential() {
  return memoryCred;
}

/** Called when the gateway answers 401: set by dashboard.js (signedOut). */
let unauthorized = () => {};

/** @param {(message: string) => void} fn */
export function onUnauthorized(fn) {
  unauthorized = fn;
}

export function authHeaders() {
  return memoryCred ? { Authorization: "Bearer " + memoryCred } : {};
}

{
  const params = new URLSearchParams(location.search);
  if (params.has("token") || params.has("admin_key")) {
    params.delete("token");
    params.delete("admin_key");
    const q = params.toString();
    history.replaceState(null, "", location.pathname + (q ? "?" + q : "") + location.hash);
  }
}

// ---- HTTP API ----------------------------------------------------------------

/** Calls the gateway's HTTP API; rejects with an Error carrying .code and .status. */
export async function api(path, { method = "GET", body } = {}) {
  // A call made under one credential answers only that credential: one
  // still in flight at a sign-out (or a sign-in as someone else) rejects
  // with code "stale" instead of handing what the old credential could
  // read to a page that has forgotten it.
  const cred = memoryCred;
  const headers = { Accept: "application/json", ...authHeaders() };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  let data = null;
  const text = await res.text();
  if (memoryCred !== cred) {
    const err = new Error("the credential changed during the call");
    err.code = "stale";
    err.status = 0;
    throw err;
  }
  if (text) {
    try {
      data = JSON.parse(text);
    } catch {
      data = null;
    }
  }
  if (!res.ok) {
    const err = new Error((data && data.message) || `${res.status} ${res.statusText}`);
    err.code = (data && data.code) || "http_" + res.status;
    err.status = res.status;
    if (res.status === 401) unauthorized(err.message);
    throw err;
  }
  return data;
}

export function apiError(err) {
  if (err.code === "stale") return "";
  if (err.status === 401) return `${err.message} (${err.code}): sign in.`;
  if (err.status === 403) return `${err.message} (${err.code}): sign in with the admin key to see this.`;
  return `${err.message}${err.code ? ` (${err.code})` : ""}`;
}

// ---- topics ------------------------------------------------------------------

/** @type {Map<string, object>} */
export const topics = new Map();
