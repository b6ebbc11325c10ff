// dashboard_panels.js: the dashboard's dead letters (listing, selection,
// redrive) and its topic browser (a partition's log, page by page). Their
// controls are wired when the module loads; dashboard.js calls the
// exported functions when groups, topics or dead-letter counts change.
//
// Everything inserted into the page goes through textContent or DOM
// properties (dashboard_ui.js), never parsed as HTML.

import { api, apiError, topics } from "./dashboard_api.js";
import { $, dataCell, fillBody, fmtDateTime, fmtInt, h, json, setStatus, setText } from "./dashboard_ui.js";

/** Records per page of the topic browser. */
const PAGE = 50;

// ---- dead letters ------------------------------------------------------------

/** Selected dead-letter ids (as strings) and each one's group. */
const selected = new Map();
/** @type {Map<string, object>} */
let deadLetters = new Map();
let dlLoading = false;

export function syncDeadLetterGroups(names) {
  const sel = $("dl-group");
  const have = new Set(Array.from(sel.options, (o) => o.value));
  for (const n of names.slice().sort()) {
    if (!have.has(n)) sel.append(h("option", { value: n }, n));
  }
}

export async function loadDeadLetters() {
  if (dlLoading) return;
  dlLoading = true;
  const group = $("dl-group").value;
  try {
    const d = await api("/v1/deadletters" + (group ? "?group=" + encodeURIComponent(group) : ""));
    renderDeadLetters(Array.isArray(d?.deadletters) ? d.deadletters : []);
    if ($("dl-status").classList.contains("error")) setStatus("dl-status", "");
  } catch (err) {
    setStatus("dl-status", "Could not load dead letters: " + apiError(err), "error");
  } finally {
    dlLoading = false;
  }
}

function renderDeadLetters(list) {
  deadLetters = new Map(list.map((x) => [String(x.id), x]));
  for (const id of Array.from(selected.keys())) if (!deadLetters.has(id)) selected.delete(id);
  syncDeadLetterGroups(list.map((x) => x.group).filter(Boolean));
  fillBody(
    "deadletters",
    list.map((x) => {
      const id = String(x.id);
      const cb = h("input", { type: "checkbox", checked: selected.has(id), ariaLabel: "select dead letter " + id });
      cb.addEventListener("change", () => {
        if (cb.checked) selected.set(id, x);
        else selected.delete(id);
        updateRedrive();
      });
      return h(
        "tr",
        { dataset: { id } },
        h("td", { className: "check" }, cb),
        h("td", null, x.reason ?? ""),
        h("td", { className: "mono" }, x.group ?? (x.subscriber ? "sub " + x.subscriber : "")),
        h("td", { className: "mono" }, x.topic ?? ""),
        h("td", { className: "num" }, x.partition ?? ""),
        h("td", { className: "num" }, x.offset ?? ""),
        h("td", { className: "num" }, x.attempts ?? ""),
        h("td", { className: "clip", title: x.error || "" }, x.error ?? ""),
        h("td", null, fmtDateTime(x.time)),
        dataCell(x.data),
      );
    }),
    "deadletters-empty",
  );
  updateRedrive();
}

function updateRedrive() {
  const n = selected.size;
  $("dl-redrive").disabled = n === 0;
  $("dl-redrive").textContent = n ? `Redrive ${n} to ${n === 1 ? "its group" : "their groups"}` : "Redrive selected";
  const all = $("dl-select-all");
  all.checked = n > 0 && n === deadLetters.size;
  all.indeterminate = n > 0 && n < deadLetters.size;
}

$("dl-select-all").addEventListener("change", (e) => {
  selected.clear();
  if (e.target.checked) for (const [id, x] of deadLetters) selected.set(id, x);
  for (const cb of $("deadletters").tBodies[0].querySelectorAll("input[type=checkbox]")) cb.checked = e.target.checked;
  updateRedrive();
});
$("dl-refresh").addEventListener("click", loadDeadLetters);
$("dl-group").addEventListener("change", () => {
  selected.clear();
  loadDeadLetters();
});
$("dl-redrive").addEventListener("click", async () => {
  // One request per group: each group's letters go back to that group only,
  // at their own offsets. Letters without a group can only be appended to
  // their topics again, and only when the box says so.
  const append = $("dl-append").checked;
  const byGroup = new Map();
  for (const x of selected.values()) {
    const g = x.group || "";
    if (!byGroup.has(g)) byGroup.set(g, []);
    byGroup.get(g).push(x.id);
  }
  const ungrouped = byGroup.get("")?.length ?? 0;
  if (ungrouped && !append) byGroup.delete("");
  if (
    ungrouped &&
    append &&
    !window.confirm(
      `Publish ${ungrouped} letter${ungrouped === 1 ? "" : "s"} without a group to ${ungrouped === 1 ? "its topic" : "their topics"} again? Every subscriber and group of those topics receives them again.`,
    )
  ) {
    return;
  }
  $("dl-redrive").disabled = true;
  let n = 0;
  let asked = 0;
  const failed = [];
  for (const [group, ids] of byGroup) {
    const body = group ? { group, ids } : { ids };
    if (append) body.append_to_topics = true;
    try {
      const r = await api("/v1/deadletters/redrive", { method: "POST", body });
      n += Number(r?.redriven) || 0;
      asked += ids.length;
    } catch (err) {
      failed.push(`${group || "(no group)"}: ${apiError(err)}`);
    }
  }
  const notes = [`Redrove ${n} dead letter${n === 1 ? "" : "s"}.`];
  if (ungrouped && !append) {
    notes.push(`Left ${ungrouped} without a group: tick “Append letters without a group to their topics” to publish them again.`);
  }
  if (asked > n) {
    notes.push(`Left ${asked - n} that could not go back to their group (the group is gone or retention trimmed the record).`);
  }
  if (failed.length) setStatus("dl-status", `${notes.join(" ")} Failed ${failed.join("; ")}`, "error");
  else setStatus("dl-status", notes.join(" "), "ok");
  selected.clear();
  await loadDeadLetters();
});

// ---- topic browser -----------------------------------------------------------

const browser = { topic: "", partition: 0, from: null, next: null };

export function syncTopicPicker(names) {
  const sel = $("tb-topic");
  const cur = sel.value;
  const visible = names.filter((n) => !n.startsWith("$"));
  const want = [...visible, ...names.filter((n) => n.startsWith("$"))];
  const have = Array.from(sel.options, (o) => o.value);
  if (have.join("\n") !== want.join("\n")) {
    sel.replaceChildren(...want.map((n) => h("option", { value: n }, n)));
    if (want.includes(cur)) sel.value = cur;
  }
  syncPartitionPicker();
}

export function syncPartitionPicker() {
  const t = topics.get($("tb-topic").value);
  const sel = $("tb-partition");
  const n = t ? Number(t.partitions) || 1 : 0;
  if (sel.options.length !== n) {
    const cur = sel.value;
    sel.replaceChildren(...Array.from({ length: n }, (_, i) => h("option", { value: String(i) }, String(i))));
    if (cur !== "" && Number(cur) < n) sel.value = cur;
  }
}

/** Offsets [earliest, next) of the selected partition, fetched fresh. */
async function partitionBounds(topic, partition) {
  let t = topics.get(topic);
  try {
    t = await api("/v1/topics/" + encodeURIComponent(topic));
    if (t && t.name) topics.set(t.name, t);
  } catch {
    /* fall back to the topic as last listed */
  }
  const o = (t?.offsets || []).find((x) => x.partition === partition) || { earliest: 0, next: 0 };
  return { earliest: Number(o.earliest) || 0, next: Number(o.next) || 0 };
}

/**
 * Loads one page of the log. where: a number (start offset), "oldest",
 * "newest", "older" or "newer".
 */
export async function browse(where) {
  const topic = $("tb-topic").value;
  const partition = Number($("tb-partition").value) || 0;
  if (!topic) {
    setStatus("tb-status", "Pick a topic.");
    return;
  }
  setStatus("tb-status", "Loading…");
  try {
    const b = await partitionBounds(topic, partition);
    let from;
    if (typeof where === "number") from = where;
    else if (where === "oldest") from = b.earliest;
    else if (where === "older") from = Math.max(b.earliest, (browser.from ?? b.next) - PAGE);
    else if (where === "newer") from = browser.next ?? b.earliest;
    else from = Math.max(b.earliest, b.next - PAGE);
    from = Math.max(0, from);
    const q = new URLSearchParams({ partition: String(partition), from: String(from), limit: String(PAGE) });
    const d = await api(`/v1/topics/${encodeURIComponent(topic)}/messages?${q}`);
    const msgs = Array.isArray(d?.messages) ? d.messages : [];
    Object.assign(browser, { topic, partition, from: msgs.length ? msgs[0].offset : from, next: typeof d?.next === "number" ? d.next : from + msgs.length });
    $("tb-from").value = String(browser.from);
    fillBody(
      "tb-messages",
      msgs.map((m) =>
        h(
          "tr",
          null,
          h("td", { className: "num" }, m.offset),
          h("td", null, fmtDateTime(m.time)),
          h("td", { className: "mono" }, m.key ?? ""),
          h("td", { className: "mono clip" }, m.headers ? json(m.headers) : ""),
          dataCell(m.data),
        ),
      ),
    );
    const last = msgs.length ? msgs[msgs.length - 1].offset : null;
    setText(
      "tb-range",
      (msgs.length ? `offsets ${fmtInt(msgs[0].offset)}–${fmtInt(last)}` : "no records here") + ` · retained ${fmtInt(b.earliest)}–${fmtInt(Math.max(b.earliest, b.next - 1))}`,
    );
    $("tb-prev").disabled = browser.from <= b.earliest;
    $("tb-first").disabled = browser.from <= b.earliest;
    $("tb-next").disabled = browser.next >= b.next;
    $("tb-last").disabled = browser.next >= b.next;
    setStatus("tb-status", "");
  } catch (err) {
    setStatus("tb-status", "Could not read the log: " + apiError(err), "error");
  }
}

$("tb-topic").addEventListener("change", () => {
  syncPartitionPicker();
  browse("newest");
});
$("tb-partition").addEventListener("change", () => browse("newest"));
$("tb-load").addEventListener("click", () => {
  const v = $("tb-from").value.trim();
  browse(v === "" ? "newest" : Math.max(0, Math.floor(Number(v)) || 0));
});
$("tb-first").addEventListener("click", () => browse("oldest"));
$("tb-prev").addEventListener("click", () => browse("older"));
$("tb-next").addEventListener("click", () => browse("newer"));
$("tb-last").addEventListener("click", () => browse("newest"));
