// The dashboard's building blocks: DOM and formatting helpers, and the
// rolling rate chart. No state of the dashboard lives here.
//
// Everything inserted into the page goes through textContent or DOM
// properties, never parsed as HTML, because topic names, keys, headers and
// payloads are user data.

/** The span of the rate charts: the last three minutes. */
export const CHART_WINDOW_MS = 3 * 60 * 1000;

// ---- small DOM and formatting helpers --------------------------------------

export const $ = (id) => document.getElementById(id);

/**
 * Creates an element. props are assigned as properties (className, title,
 * type, checked, ...) except "dataset"; children are nodes or strings, and
 * strings become text nodes.
 */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  if (props) {
    for (const [k, v] of Object.entries(props)) {
      if (v === undefined || v === null) continue;
      if (k === "dataset") Object.assign(el.dataset, v);
      else if (k === "style") Object.assign(el.style, v);
      else el[k] = v;
    }
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

export function setText(id, text) {
  const el = $(id);
  if (el && el.textContent !== text) el.textContent = text;
}

export function setStatus(id, text, kind = "") {
  const el = $(id);
  el.textContent = text || "";
  el.className = "status" + (kind ? " " + kind : "");
}

const intFmt = new Intl.NumberFormat();
export function fmtInt(n) {
  return typeof n === "number" && isFinite(n) ? intFmt.format(Math.round(n)) : "–";
}

/** A rate as plain digits (no grouping) so that tests can parse it. */
export function fmtRate(v) {
  if (typeof v !== "number" || !isFinite(v)) return "0";
  if (Math.abs(v) >= 100) return String(Math.round(v));
  return String(Math.round(v * 10) / 10);
}

/** A rate for people: 1.2k, 3.4M. */
export function fmtShort(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(a >= 1e10 ? 0 : 1) + "G";
  if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
  if (a >= 1e3) return (v / 1e3).toFixed(a >= 1e4 ? 0 : 1) + "k";
  if (a >= 10 || v === 0) return String(Math.round(v));
  return v.toFixed(1);
}

export function fmtBytes(v) {
  if (typeof v !== "number" || !isFinite(v)) return "–";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000;
    i++;
  }
  return (i === 0 ? String(Math.round(v)) : v.toFixed(v >= 100 ? 0 : 1)) + " " + units[i] + "/s";
}

export function fmtDuration(s) {
  if (typeof s !== "number" || !isFinite(s)) return "–";
  s = Math.floor(s);
  const d = Math.floor(s / 86400);
  const hh = Math.floor((s % 86400) / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  if (d) return `${d}d ${hh}h`;
  if (hh) return `${hh}h ${m}m`;
  if (m) return `${m}m ${sec}s`;
  return `${sec}s`;
}

export function fmtTime(t) {
  const d = new Date(t);
  if (isNaN(d)) return String(t ?? "");
  return d.toLocaleTimeString(undefined, { hour12: false }) + "." + String(d.getMilliseconds()).padStart(3, "0");
}

export function fmtDateTime(t) {
  const d = new Date(t);
  if (isNaN(d)) return String(t ?? "");
  return d.toLocaleString(undefined, { hour12: false });
}

export function json(v) {
  if (v instanceof Uint8Array) {
    // A binary record's bytes (the client decodes "encoding":"base64").
    const hex = Array.from(v.subarray(0, 32), (b) => b.toString(16).padStart(2, "0")).join(" ");
    return `${v.length} bytes: ${hex}${v.length > 32 ? " …" : ""}`;
  }
  try {
    const s = JSON.stringify(v);
    return s === undefined ? String(v) : s;
  } catch {
    return String(v);
  }
}

/** A table cell whose long JSON content expands on click. */
export function dataCell(value) {
  const text = json(value);
  const td = h("td", { className: "mono clip", title: text.length > 80 ? "click to expand" : "" }, text);
  td.addEventListener("click", () => {
    const open = td.classList.toggle("wrap");
    td.classList.toggle("clip", !open);
    td.textContent = open && !(value instanceof Uint8Array) ? JSON.stringify(value, null, 2) : text;
  });
  return td;
}

export function fillBody(table, rows, emptyId) {
  const tbody = $(table).tBodies[0];
  tbody.replaceChildren(...rows);
  if (emptyId) $(emptyId).hidden = rows.length > 0;
}

/** A bar of fraction (0 to 1) of its width. */
export function bar(fraction, extra = "") {
  const f = Math.max(0, Math.min(1, fraction || 0));
  return h("div", { className: "bar " + extra }, h("span", { style: { width: (f * 100).toFixed(1) + "%" } }));
}

// ---- rate charts -------------------------------------------------------------

/**
 * A rolling line chart on a canvas: HiDPI-aware (draws at devicePixelRatio),
 * redrawn when its box is resized, when the color scheme changes and once a
 * second so that it scrolls even when no data arrives.
 */
export class RateChart {
  constructor(canvas, series) {
    this.canvas = canvas;
    this.series = series;
    /** @type {Array<{t: number, v: number}>} server time (ms) and value */
    this.points = [];
    this.skew = 0; // local clock minus server clock
    this.hoverX = null;
    this.colors = null;
    new ResizeObserver(() => this.draw()).observe(canvas);
    canvas.addEventListener("mousemove", (e) => {
      this.hoverX = e.offsetX;
      this.draw();
    });
    canvas.addEventListener("mouseleave", () => {
      this.hoverX = null;
      this.draw();
    });
  }

  push(t, v) {
    if (!isFinite(t)) t = Date.now();
    const last = this.points[this.points.length - 1];
    if (last && t <= last.t) {
      if (t === last.t) last.v = v;
      return; // a replayed or out-of-order sample
    }
    this.points.push({ t, v });
    this.skew = Date.now() - t;
    const cutoff = t - CHART_WINDOW_MS - 5000;
    while (this.points.length && this.points[0].t < cutoff) this.points.shift();
    // For tests and tools: how much the chart holds, from when.
    this.canvas.dataset.points = String(this.points.length);
    this.canvas.dataset.first = String(this.points[0].t);
    this.draw();
  }

  readColors() {
    const cs = getComputedStyle(document.documentElement);
    const get = (n) => cs.getPropertyValue(n).trim();
    this.colors = {
      line: get("--chart-" + this.series) || "#3b6fd8",
      grid: get("--chart-grid") || "#e9ecf0",
      text: get("--chart-text") || "#8a93a2",
      font: "11px " + getComputedStyle(document.body).fontFamily,
    };
  }

  draw() {
    const c = this.canvas;
    const w = c.clientWidth;
    const hgt = c.clientHeight;
    if (!w || !hgt) return;
    const dpr = window.devicePixelRatio || 1;
    const pw = Math.round(w * dpr);
    const ph = Math.round(hgt * dpr);
    if (c.width !== pw || c.height !== ph) {
      c.width = pw;
      c.height = ph;
    }
    if (!this.colors) this.readColors();
    const col = this.colors;
    const ctx = c.getContext("2d");
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, hgt);

    const left = 34;
    const right = 4;
    const top = 6;
    const bottom = 16;
    const cw = w - left - right;
    const ch = hgt - top - bottom;
    const now = Date.now() - this.skew;
    const t0 = now - CHART_WINDOW_MS;
    const visible = this.points.filter((p) => p.t >= t0 - 2000);
    const max = niceCeil(Math.max(1, ...visible.map((p) => p.v)) * 1.1);
    const x = (t) => left + ((t - t0) / CHART_WINDOW_MS) * cw;
    const y = (v) => top + ch - (v / max) * ch;

    // Grid and labels.
    ctx.font = col.font;
    ctx.lineWidth = 1;
    ctx.strokeStyle = col.grid;
    ctx.fillStyle = col.text;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const v of [0, max / 2, max]) {
      const yy = Math.round(y(v)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(left, yy);
      ctx.lineTo(w - right, yy);
      ctx.stroke();
      ctx.fillText(fmtShort(v), left - 6, yy);
    }
    ctx.textBaseline = "alphabetic";
    ctx.textAlign = "center";
    for (let m = 0; m <= CHART_WINDOW_MS / 60000; m++) {
      const xx = x(now - m * 60000);
      ctx.textAlign = m === 0 ? "right" : "center";
      ctx.fillText(m === 0 ? "now" : `-${m}m`, xx, hgt - 3);
    }

    if (visible.length === 0) return;

    // Clip to the plot area; split the line where samples are missing.
    ctx.save();
    ctx.beginPath();
    ctx.rect(left, 0, cw, hgt - bottom);
    ctx.clip();
    const runs = [];
    let run = [];
    for (const p of visible) {
      if (run.length && p.t - run[run.length - 1].t > 3500) {
        runs.push(run);
        run = [];
      }
      run.push(p);
    }
    runs.push(run);
    ctx.lineJoin = "round";
    for (const r of runs) {
      ctx.beginPath();
      r.forEach((p, i) => (i ? ctx.lineTo(x(p.t), y(p.v)) : ctx.moveTo(x(p.t), y(p.v))));
      ctx.strokeStyle = col.line;
      ctx.lineWidth = 1.6;
      ctx.stroke();
      ctx.lineTo(x(r[r.length - 1].t), y(0));
      ctx.lineTo(x(r[0].t), y(0));
      ctx.closePath();
      ctx.globalAlpha = 0.12;
      ctx.fillStyle = col.line;
      ctx.fill();
      ctx.globalAlpha = 1;
    }
    ctx.restore();

    // Hover readout: the sample nearest the pointer.
    if (this.hoverX !== null && this.hoverX >= left) {
      let best = null;
      for (const p of visible) {
        if (!best || Math.abs(x(p.t) - this.hoverX) < Math.abs(x(best.t) - this.hoverX)) best = p;
      }
      if (best) {
        const bx = x(best.t);
        const by = y(best.v);
        ctx.strokeStyle = col.text;
        ctx.lineWidth = 1;
        ctx.beginPath();
        ctx.moveTo(Math.round(bx) + 0.5, top);
        ctx.lineTo(Math.round(bx) + 0.5, top + ch);
        ctx.stroke();
        ctx.fillStyle = col.line;
        ctx.beginPath();
        ctx.arc(bx, by, 3, 0, Math.PI * 2);
        ctx.fill();
        const label = `${fmtRate(best.v)}/s · ${fmtTime(best.t)}`;
        ctx.font = col.font;
        const tw = ctx.measureText(label).width;
        const lx = Math.min(Math.max(bx + 8, left), w - right - tw);
        ctx.fillStyle = col.text;
        ctx.textAlign = "left";
        ctx.fillText(label, lx, top + 10);
      }
    }
  }
}

/** The smallest 1, 2 or 5 times a power of ten that is at least v. */
function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}
