// The Switchyard dashboard: sign-in when the gateway needs a credential,
// live gateway statistics from the $sys topics (the last three minutes
// replayed on load), topics, consumer groups and the node's sessions paged
// from the HTTP API (refreshed when the $sys summaries arrive), dead
// letters, a topic browser and a try-it panel. Helpers and the rate chart
// are in dashboard_ui.js, the credential and HTTP calls in
// dashboard_api.js, the dead letters and topic browser in
// dashboard_panels.js, the credential-carrying event stream in
// eventstream.js.
//
// Everything inserted into the page goes through textContent or DOM
// properties, never parsed as HTML, because topic names, keys, headers and
// payloads are user data.

import { connect } from "./switchyard.js";
import { headerEventSource } from "./eventstream.js";
import { api, apiError, authHeaders, currentCredential, onUnauthorized, setCredential, topics } from "./dashboard_api.js";
import { browse, loadDeadLetters, syncDeadLetterGroups, syncPartitionPicker, syncTopicPicker } from "./dashboard_panels.js";
import {
  $,
  CHART_WINDOW_MS,
  RateChart,
  bar,
  dataCell,
  fillBody,
  fmtBytes,
  fmtDateTime,
  fmtDuration,
  fmtInt,
  fmtRate,
  fmtShort,
  fmtTime,
  h,
  json,
  setStatus,
  setText,
} from "./dashboard_ui.js";

const WS_URL = (location.protocol === "https:" ? "wss://" : "ws://") + location.host + "/v1/ws";
const TRY_LOG_MAX = 200;
const SESSIONS_PAGE = 25;

/** @type {import("./switchyard.js").Client | null} */
let client = null;

const charts = {};
for (const s of ["publishes", "deliveries", "drops"]) charts[s] = new RateChart($("chart-" + s), s);
const redrawAll = () => Object.values(charts).forEach((c) => c.draw());
setInterval(redrawAll, 1000);
window.addEventListener("resize", redrawAll);
matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => {
  Object.values(charts).forEach((c) => (c.colors = null));
  redrawAll();
});

// ---- $sys.stats --------------------------------------------------------------

let lastDeadLetters = null;

function onStats(d) {
  if (!d || typeof d !== "object") return;
  setText("stat-uptime", fmtDuration(d.uptime_s));
  setText("stat-connections", fmtInt(d.connections));
  setText("stat-subs-plain", fmtInt(d.subscriptions?.plain));
  setText("stat-subs-group", fmtInt(d.subscriptions?.group));
  const r = d.rates || {};
  setText("stat-bytes-in", "in " + fmtBytes(r.bytes_in));
  setText("stat-bytes-out", "out " + fmtBytes(r.bytes_out));
  const t = Date.parse(d.time);
  for (const s of ["publishes", "deliveries", "drops"]) {
    const v = Number(r[s]) || 0;
    const el = $("rate-" + s);
    el.textContent = fmtRate(v);
    el.dataset.value = String(v);
    charts[s].push(t, v);
  }
  $("rate-drops").classList.toggle("nonzero", (Number(r.drops) || 0) > 0);
  const tot = d.totals || {};
  setText("total-publishes", fmtInt(tot.publishes));
  setText("total-deliveries", fmtInt(tot.deliveries));
  setText("total-drops", fmtInt(tot.drops));
  setText("total-gaps", fmtInt(tot.gaps));
  setText("total-dead-letters", fmtInt(tot.dead_letters));
  if (typeof tot.dead_letters === "number") {
    if (lastDeadLetters !== null && tot.dead_letters !== lastDeadLetters) loadDeadLetters();
    lastDeadLetters = tot.dead_letters;
  }

  if (Date.now() - sessionsLoadedAt > 2000 && Date.now() - t < 5000) {
    sessionsLoadedAt = Date.now();
    sessionsPager.load();
  }

  const top = Array.isArray(d.top_topics) ? d.top_topics : [];
  const topMax = Math.max(1e-9, ...top.map((x) => Number(x.publishes_per_s) || 0));
  fillBody(
    "top-topics",
    top.map((x) =>
      h(
        "tr",
        null,
        h("td", { className: "mono" }, x.topic),
        h("td", { className: "num" }, fmtRate(Number(x.publishes_per_s) || 0)),
        h("td", null, bar((Number(x.publishes_per_s) || 0) / topMax)),
      ),
    ),
    "top-topics-empty",
  );

  const slow = Array.isArray(d.slow_consumers) ? d.slow_consumers : [];
  fillBody(
    "slow-consumers",
    slow.map((x) =>
      h("tr", null, h("td", { className: "mono" }, x.session), h("td", { className: "num" }, fmtInt(x.queued)), h("td", { className: "num" }, fmtInt(x.dropped))),
    ),
    "slow-consumers-empty",
  );
}

// ---- paged listings ----------------------------------------------------------

const TOPICS_PAGE = 50;
const GROUPS_PAGE = 20;

/**
 * A pager walks one of the gateway's paged listings (GET /v1/topics,
 * /v1/groups): cursors[i] is the cursor of page i ("" for the first), next
 * the cursor of the page after the shown one, if any. The dashboard holds
 * one page at a time, however many topics or groups exist.
 */
function pager(path, key, limit, render, ids) {
  const p = { cursors: [""], i: 0, next: "", loading: false, again: false, forbidden: false };
  async function load() {
    // A listing the credential may not read (403) is not asked again until
    // the credential changes (reset).
    if (p.forbidden) return;
    if (p.loading) {
      p.again = true;
      return;
    }
    p.loading = true;
    try {
      const q = new URLSearchParams({ limit: String(limit) });
      if (p.cursors[p.i]) q.set("cursor", p.cursors[p.i]);
      const d = await api(`${path}?${q}`);
      const list = Array.isArray(d?.[key]) ? d[key] : [];
      if (!list.length && p.i > 0) {
        // The page emptied (items deleted): go back to the first.
        p.cursors = [""];
        p.i = 0;
        p.loading = false;
        return load();
      }
      p.next = typeof d?.next_cursor === "string" ? d.next_cursor : "";
      render(list, d);
      $(ids.prev).disabled = p.i === 0;
      $(ids.next).disabled = !p.next;
      setText(ids.page, p.i || p.next ? `page ${p.i + 1}` : "");
    } catch (err) {
      if (err.code === "stale") return; // signed out meanwhile: nothing to show
      if (err.status === 403) p.forbidden = true;
      setText(ids.page, "could not load: " + apiError(err));
    } finally {
      p.loading = false;
      if (p.again) {
        p.again = false;
        load();
      }
    }
  }
  $(ids.prev).addEventListener("click", () => {
    if (p.i > 0) {
      p.i--;
      load();
    }
  });
  $(ids.next).addEventListener("click", () => {
    if (p.next) {
      p.cursors[p.i + 1] = p.next;
      p.i++;
      load();
    }
  });
  /** Back to the first page, for a new credential. */
  function reset() {
    Object.assign(p, { cursors: [""], i: 0, next: "", forbidden: false });
  }
  return { load, reset };
}

const topicsPager = pager("/v1/topics", "topics", TOPICS_PAGE, renderTopics, {
  prev: "topics-prev",
  next: "topics-next",
  page: "topics-page",
});
const groupsPager = pager("/v1/groups", "groups", GROUPS_PAGE, renderGroups, {
  prev: "groups-prev",
  next: "groups-next",
  page: "groups-page",
});

const sessionsPager = pager("/v1/sessions", "sessions", SESSIONS_PAGE, renderSessions, {
  prev: "sessions-prev",
  next: "sessions-next",
  page: "sessions-page",
});

/**
 * The sessions of every gateway node sharing the engine (GET /v1/sessions,
 * admin), refreshed with $sys.stats; each row names its node and host and
 * has an End button (DELETE /v1/sessions/{id}: closed with 4001 on whichever
 * node holds it).
 */
function renderSessions(list, d) {
  const now = Date.now();
  fillBody(
    "sessions",
    list.map((x) =>
      h(
        "tr",
        { dataset: { id: String(x.id) } },
        h("td", { className: "mono" }, x.id ?? ""),
        h("td", null, x.transport ?? ""),
        h("td", { className: "mono" }, x.remote ?? ""),
        h("td", null, x.user ?? "–"),
        h("td", { className: "num" }, fmtInt(x.subscriptions)),
        h("td", { className: "num" }, fmtInt(x.queued)),
        h("td", { className: "num" + (Number(x.drops) > 0 ? " bad" : "") }, fmtInt(x.drops)),
        h("td", { className: "num", title: fmtDateTime(x.since) }, fmtDuration((now - Date.parse(x.since)) / 1000)),
        h("td", { className: "mono" }, x.node ?? ""),
        h("td", null, x.host ?? ""),
        h("td", null, h("button", { type: "button", className: "end-session", dataset: { id: String(x.id) } }, "End")),
      ),
    ),
    "sessions-empty",
  );
  const missing = Number(d?.unanswered) > 0 ? ` · ${d.unanswered} node(s) did not answer; their sessions are missing` : "";
  setText("sessions-status", "updated " + new Date().toLocaleTimeString(undefined, { hour12: false }) + missing);
}

/** Ends the session of an End button, on whichever node holds it. */
async function endSession(id) {
  if (!window.confirm(`End session ${id}? Its client is closed with 4001 "closed by an administrator".`)) return;
  try {
    await api("/v1/sessions/" + encodeURIComponent(id), { method: "DELETE" });
    setText("sessions-status", `session ${id} ended`);
  } catch (err) {
    setText("sessions-status", `could not end session ${id}: ` + apiError(err));
  }
  sessionsPager.load();
}

$("sessions").addEventListener("click", (ev) => {
  const b = ev.target instanceof Element ? ev.target.closest("button.end-session") : null;
  if (b) endSession(b.dataset.id);
});

let sessionsLoadedAt = 0;

/** $sys.topics is a summary (counts, busiest, what changed): show the totals and refresh the page shown. */
function onTopicsSummary(d) {
  if (!d || typeof d.count !== "number") return;
  setText("topics-status", `${fmtInt(d.count)} topics · ${fmtInt(d.partitions)} partitions · ${fmtInt(d.records)} retained · ${fmtBytes(d.bytes)}`);
  topicsPager.load();
}

/** $sys.groups is a summary likewise. */
function onGroupsSummary(d) {
  if (!d || typeof d.count !== "number") return;
  groupsPager.load();
}

function renderTopics(list) {
  topics.clear();
  for (const t of list) if (t && typeof t.name === "string") topics.set(t.name, t);
  // System topics ($sys.…) after the application's own.
  const names = Array.from(topics.keys()).sort((a, b) => Number(a.startsWith("$")) - Number(b.startsWith("$")) || (a < b ? -1 : a > b ? 1 : 0));
  fillBody(
    "topics",
    names.map((n) => {
      const t = topics.get(n);
      const retained = (t.offsets || []).reduce((a, o) => a + Math.max(0, (o.next || 0) - (o.earliest || 0)), 0);
      const ret = t.retention || {};
      // Segments never break inside; the line may wrap between them.
      const policy = [
        t.policy ? "policy " + t.policy : "",
        ret.max_messages ? fmtShort(ret.max_messages) + " msgs" : "",
        ret.max_age || "",
        t.on_full || "",
      ]
        .filter(Boolean)
        .flatMap((x, i) => [i ? " · " : "", h("span", { className: "nowrap" }, x)]);
      const tr = h(
        "tr",
        { className: "link", title: "browse this topic's log" },
        h("td", { className: "mono" }, n),
        h("td", { className: "num" }, fmtInt(t.partitions)),
        h("td", { className: "num" }, fmtInt(retained)),
        h("td", null, policy.length ? policy : "default"),
      );
      tr.addEventListener("click", () => {
        $("tb-topic").value = n;
        syncPartitionPicker();
        browse("newest");
        $("h-browser").closest("section").scrollIntoView({ behavior: "smooth", block: "start" });
      });
      return tr;
    }),
    "topics-empty",
  );
  syncTopicPicker(names);
}

// ---- groups ------------------------------------------------------------------

/** Groups the user collapsed, kept across refreshes. */
const collapsedGroups = new Set();

function renderGroups(list) {
  const box = $("groups");
  const els = list
    .slice()
    .sort((a, b) => String(a.name).localeCompare(String(b.name)))
    .map((g) => {
      const parts = Array.isArray(g.partitions) ? g.partitions : [];
      const members = Array.isArray(g.members) ? g.members : [];
      const totalLag = parts.reduce((a, p) => a + (Number(p.lag) || 0), 0);
      const inFlight = parts.reduce((a, p) => a + (Number(p.in_flight) || 0), 0);
      const maxLag = Math.max(1, ...parts.map((p) => Number(p.lag) || 0));
      const det = h(
        "details",
        { className: "group", open: !collapsedGroups.has(g.name) },
        h(
          "summary",
          null,
          h("span", { className: "name mono" }, g.name),
          h("span", { className: "meta" }, "pattern ", h("span", { className: "mono" }, g.pattern ?? "")),
          h("span", { className: "meta" }, `${members.length} member${members.length === 1 ? "" : "s"} · ${parts.length} partition${parts.length === 1 ? "" : "s"} · ${fmtInt(inFlight)} in flight`),
          h("span", { className: "lag-total" }, "lag ", h("strong", null, fmtInt(totalLag))),
        ),
        members.length
          ? h(
              "div",
              { className: "members" },
              members.map((m, i) => [
                i ? " · " : "",
                h("span", { className: "mono" }, m.id),
                ` (${(m.partitions || []).length})`,
              ]),
            )
          : null,
        parts.length
          ? h(
              "table",
              { className: "data" },
              h(
                "thead",
                null,
                h(
                  "tr",
                  null,
                  h("th", null, "Topic"),
                  h("th", { className: "num" }, "Part"),
                  h("th", null, "Member"),
                  h("th", { className: "num" }, "Committed"),
                  h("th", { className: "num" }, "Next"),
                  h("th", { className: "num" }, "In flight"),
                  h("th", { className: "num" }, "Lag"),
                  h("th", { className: "bar-col" }),
                ),
              ),
              h(
                "tbody",
                null,
                parts
                  .slice()
                  .sort((a, b) => String(a.topic).localeCompare(String(b.topic)) || a.partition - b.partition)
                  .map((p) =>
                    h(
                      "tr",
                      null,
                      h("td", { className: "mono" }, p.topic),
                      h("td", { className: "num" }, p.partition),
                      h("td", { className: "mono" }, p.member || "–"),
                      h("td", { className: "num" }, fmtInt(p.committed)),
                      h("td", { className: "num" }, fmtInt(p.next)),
                      h("td", { className: "num" }, fmtInt(p.in_flight)),
                      h("td", { className: "num" }, fmtInt(p.lag)),
                      h("td", null, bar((Number(p.lag) || 0) / maxLag, "lag" + ((Number(p.lag) || 0) === 0 ? " zero" : ""))),
                    ),
                  ),
              ),
            )
          : null,
      );
      det.addEventListener("toggle", () => {
        if (det.open) collapsedGroups.delete(g.name);
        else collapsedGroups.add(g.name);
      });
      return det;
    });
  box.replaceChildren(...els);
  $("groups-empty").hidden = els.length > 0;
  setText("groups-status", "updated " + new Date().toLocaleTimeString(undefined, { hour12: false }));
  syncDeadLetterGroups(list.map((g) => g.name));
}

// ---- try it ------------------------------------------------------------------

/** @type {import("./switchyard.js").Subscription | null} */
let trySub = null;

function tryLog(kind, where, text, time) {
  const log = $("try-log");
  const li = h(
    "li",
    { className: kind },
    h("span", { className: "t" }, fmtTime(time || Date.now())),
    where ? h("span", { className: "where" }, where) : null,
    h("span", { className: "d" }, text),
  );
  log.prepend(li);
  while (log.children.length > TRY_LOG_MAX) log.lastElementChild.remove();
}

$("try-sub-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const pattern = $("try-pattern").value.trim();
  if (!pattern) {
    setStatus("try-sub-status", "Enter a pattern.", "error");
    return;
  }
  if (!client) {
    setStatus("try-sub-status", "Not connected yet.", "error");
    return;
  }
  if (trySub) {
    const old = trySub;
    trySub = null;
    await old.unsubscribe().catch(() => {});
  }
  setStatus("try-sub-status", `Subscribing to ${pattern}…`);
  try {
    trySub = await client.subscribe(pattern, (m) => {
      const where = `${m.topic} ${m.partition}/${m.offset}` + (m.key !== undefined ? ` key=${m.key}` : "");
      tryLog("msg", where, json(m.data), m.time);
    });
    setStatus("try-sub-status", `Subscribed to ${pattern}.`, "ok");
    tryLog("note", "", `subscribed to ${pattern}`);
    $("try-unsubscribe").disabled = false;
  } catch (err) {
    setStatus("try-sub-status", `${err.message} (${err.code})`, "error");
  }
});

$("try-unsubscribe").addEventListener("click", async () => {
  if (!trySub) return;
  const old = trySub;
  trySub = null;
  $("try-unsubscribe").disabled = true;
  await old.unsubscribe().catch(() => {});
  setStatus("try-sub-status", `Stopped ${old.pattern}.`);
  tryLog("note", "", `unsubscribed from ${old.pattern}`);
});

$("try-clear").addEventListener("click", () => $("try-log").replaceChildren());

$("try-pub-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const topic = $("try-topic").value.trim();
  const key = $("try-key").value;
  let data;
  try {
    const raw = $("try-data").value.trim();
    data = raw === "" ? null : JSON.parse(raw);
  } catch (err) {
    setStatus("try-result", "Data is not valid JSON: " + err.message, "error");
    return;
  }
  if (!topic) {
    setStatus("try-result", "Enter a topic.", "error");
    return;
  }
  if (!client) {
    setStatus("try-result", "Not connected yet.", "error");
    return;
  }
  $("try-publish").disabled = true;
  try {
    const r = await client.publish(topic, data, key ? { key } : {});
    setStatus("try-result", `Published to ${r.topic} partition ${r.partition} offset ${r.offset}${r.duplicate ? " (duplicate)" : ""}.`, "ok");
  } catch (err) {
    setStatus("try-result", `${err.message} (${err.code})`, "error");
  } finally {
    $("try-publish").disabled = false;
  }
});

// ---- connection ----------------------------------------------------------------

function showState(state) {
  const el = $("conn-state");
  el.dataset.state = state;
  el.textContent = state;
}

async function subscribeSystem(c) {
  // $sys.stats keeps the last ten minutes: the charts start with the last
  // three at once, then go on live.
  const since = new Date(Date.now() - CHART_WINDOW_MS).toISOString();
  const subs = [
    ["$sys.stats", (m) => onStats(m.data), { from: { time: since } }],
    ["$sys.topics", (m) => onTopicsSummary(m.data), {}],
    ["$sys.groups", (m) => onGroupsSummary(m.data), {}],
  ];
  for (const [pattern, fn, opts] of subs) {
    try {
      await c.subscribe(pattern, fn, opts);
    } catch (err) {
      setText("groups-status", `cannot subscribe to ${pattern}: ${err.message}`);
    }
  }
}

async function loadSnapshots() {
  await topicsPager.load();
  await groupsPager.load();
  await sessionsPager.load();
  await loadDeadLetters();
  if ($("tb-topic").value) browse("newest");
}

/** Which gateway this is: GET /v1/info. */
function showInfo(d) {
  setText("info-version", d?.version || "–");
  setText("info-engine", d?.engine || "–");
  setText("info-epoch", d?.epoch || "–");
  setText("info-node", d?.node || "–");
  $("info-epoch").title = d?.epoch || "";
}

/**
 * Asks the gateway who we are with cred: "ok" (with the info shown),
 * "refused" (401, with the gateway's message) or "unreachable".
 */
async function probe(cred) {
  let res;
  try {
    res = await fetch("/v1/info", { headers: { Accept: "application/json", ...(cred ? { Authorization: "Bearer " + cred } : {}) }, cache: "no-store" });
  } catch {
    return { state: "unreachable" };
  }
  const data = await res.json().catch(() => null);
  if (res.status === 401) return { state: "refused", message: data?.message || "the gateway refused the credential" };
  if (!res.ok) return { state: "unreachable", message: data?.message || `HTTP ${res.status}` };
  return { state: "ok", info: data };
}

/** "open" (no sign-in needed), "required" (sign in) or "signed-in". */
function setAuth(state, message = "") {
  document.body.dataset.auth = state;
  $("signin").hidden = state !== "required";
  $("signout").hidden = state !== "signed-in";
  setStatus("signin-status", message, message ? "error" : "");
  if (state === "required") {
    showState("unauthorized");
    setTimeout(() => $("signin-key").focus(), 0);
  }
}

/** Drops the credential and the live connection: the gateway refused it. */
function signedOut(message) {
  if (document.body.dataset.auth === "required") return;
  const hadCred = !!currentCredential();
  setCredential("");
  stopLive();
  setAuth("required", hadCred ? `Signed out: ${message}.` : "");
}
onUnauthorized(signedOut);

let liveGen = 0;

function stopLive() {
  liveGen++;
  const c = client;
  client = null;
  trySub = null;
  if (c) c.close();
}

/**
 * Opens the live connection. Without a credential it is a WebSocket;
 * with one it is the SSE stream read through fetch, whose requests carry
 * the credential in a header (eventstream.js), and publishes go by HTTP.
 */
async function startLive() {
  const gen = ++liveGen;
  for (const pg of [topicsPager, groupsPager, sessionsPager]) pg.reset();
  const opts = {};
  if (currentCredential()) {
    opts.transports = ["sse"];
    opts.EventSource = headerEventSource(authHeaders, (status, body) => {
      if (status === 401) signedOut(body?.message || "the gateway refused the credential");
    });
    opts.fetch = (url, init = {}) => fetch(url, { ...init, headers: { ...(init.headers || {}), ...authHeaders() } });
  }
  let attempt = 0;
  let c;
  for (;;) {
    if (gen !== liveGen) return;
    showState(attempt ? "reconnecting" : "connecting");
    try {
      c = await connect(WS_URL, opts);
      break;
    } catch {
      // The gateway may not be up yet: keep trying, backing off to 10 s.
      const delay = Math.min(10000, 250 * 2 ** attempt) * (0.5 + Math.random() / 2);
      attempt++;
      showState("closed");
      await new Promise((r) => setTimeout(r, delay));
    }
  }
  if (gen !== liveGen) {
    c.close();
    return;
  }
  client = c;
  showState(c.state);
  c.on("state", (s) => gen === liveGen && showState(s));
  c.on("open", (w) => {
    setText("session-id", w.session ? "session " + w.session : "");
    probe(currentCredential()).then((r) => r.state === "ok" && showInfo(r.info));
  });
  setText("session-id", c.session ? "session " + c.session : "");
  c.on("gap", (g, sub) => {
    if (sub && sub === trySub) tryLog("gap", `${g.topic} ${g.partition}`, `gap: offsets ${g.from}–${g.to - 1} not delivered (${g.reason})`);
  });
  c.on("reset", (e) => {
    if (e.subscription === trySub) tryLog("gap", "", `could not resume ${e.pattern} after reconnecting; some records may be missing`);
  });
  c.on("error", (err) => {
    if (err.subscription && err.subscription === trySub) setStatus("try-sub-status", `${err.message} (${err.code})`, "error");
  });
  await subscribeSystem(c);
  await loadSnapshots();
}

async function start() {
  for (let attempt = 0; ; attempt++) {
    const r = await probe(currentCredential());
    if (r.state === "ok") {
      showInfo(r.info);
      setAuth(currentCredential() ? "signed-in" : "open");
      return startLive();
    }
    if (r.state === "refused") {
      const hadCred = !!currentCredential();
      setCredential("");
      setAuth("required", hadCred ? `The gateway refused the saved credential: ${r.message}.` : "");
      return;
    }
    showState(attempt ? "reconnecting" : "connecting");
    await new Promise((res) => setTimeout(res, Math.min(10000, 250 * 2 ** attempt)));
  }
}

$("signin-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const cred = $("signin-key").value.trim();
  if (!cred) {
    setStatus("signin-status", "Enter the admin key or a token.", "error");
    return;
  }
  $("signin-submit").disabled = true;
  setStatus("signin-status", "Checking…");
  try {
    const r = await probe(cred);
    if (r.state === "refused") {
      setStatus("signin-status", `Wrong key or token: ${r.message}.`, "error");
      $("signin-key").select();
      return;
    }
    if (r.state !== "ok") {
      setStatus("signin-status", "The gateway cannot be reached" + (r.message ? `: ${r.message}` : "") + ".", "error");
      return;
    }
    setCredential(cred);
    $("signin-key").value = "";
    showInfo(r.info);
    setAuth("signed-in");
    startLive();
  } finally {
    $("signin-submit").disabled = false;
  }
});

$("signout").addEventListener("click", () => {
  setCredential("");
  stopLive();
  clearData();
  setAuth("required");
  addLockedNotes();
start();
});

/** Forgets what the signed-in credential showed. */
function clearData() {
  for (const id of ["top-topics", "slow-consumers", "topics", "sessions", "deadletters", "tb-messages", "presence"]) fillBody(id, []);
  $("groups").replaceChildren();
  $("try-log").replaceChildren();
  for (const id of ["topics-status", "groups-status", "sessions-status", "session-id"]) setText(id, "");
  showInfo(null);
}

/**
 * Each card gets a note shown instead of its contents while the gateway
 * wants a sign-in, so that no list looks empty when it is only hidden.
 */
function addLockedNotes() {
  for (const card of document.querySelectorAll("main .card:not(#signin)")) {
    card.append(h("p", { className: "locked-note" }, "Unauthorized: sign in to see this."));
  }
}

// ---- presence -----------------------------------------------------------------

// Who is connected to a topic: GET /v1/presence/{topic}, polled while a topic
// is watched (the dashboard does not join the topic itself).
const PRESENCE_POLL_MS = 2000;
let presenceTopic = "";
let presenceTimer = null;

async function loadPresence() {
  const topic = presenceTopic;
  if (!topic) return;
  try {
    const d = await api("/v1/presence/" + encodeURIComponent(topic));
    if (topic !== presenceTopic) return;
    const rows = (d.members || []).map((m) => h("tr", {}, h("td", {}, m.user || "–"), h("td", { className: "mono" }, m.session), dataCell(m.info === undefined ? "" : m.info)));
    fillBody("presence", rows, "presence-empty");
    const listed = (d.members || []).length;
    setStatus("presence-status", `${fmtInt(d.count)} present` + (d.count > listed ? ` (${fmtInt(listed)} listed)` : ""));
  } catch (err) {
    fillBody("presence", [], "presence-empty");
    setStatus("presence-status", apiError(err), "error");
  }
}

$("presence-form").addEventListener("submit", (e) => {
  e.preventDefault();
  presenceTopic = $("presence-topic").value.trim();
  clearInterval(presenceTimer);
  presenceTimer = null;
  if (!presenceTopic) {
    fillBody("presence", [], "presence-empty");
    setStatus("presence-status", "");
    return;
  }
  loadPresence();
  presenceTimer = setInterval(loadPresence, PRESENCE_POLL_MS);
});

addLockedNotes();
start();
