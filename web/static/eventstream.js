// An EventSource that sends request headers: the dashboard's live stream
// when a credential is set, and the JS client's SSE transport with a token
// (sse_transport.js).
//
// A browser's EventSource and WebSocket cannot send an Authorization
// header, and the gateway takes a credential only from that header or from
// the URL (?token=), where it would be kept in histories, proxy logs and
// the gateway's access log. /v1/sse takes the header, so the dashboard
// reads the event stream with fetch instead, through this class, which has
// the part of the EventSource interface the client's SSE transport uses:
// readyState, onmessage, addEventListener, close. It reconnects by itself
// after a dropped stream (sending Last-Event-ID, as EventSource does) and
// gives up, with readyState CLOSED and an "error" event, when the gateway
// answers with anything but a 200 event stream.

const CONNECTING = 0;
const OPEN = 1;
const CLOSED = 2;

/** Reconnects at most this often per stream, as EventSource's retry: field allows. */
const MIN_RETRY_MS = 250;

/**
 * Returns an EventSource constructor that sends headers() with every
 * request and calls onRefused(status, body) when the gateway refuses the
 * stream (401, 403, 429, 503, ...).
 *
 * @param {() => Record<string, string>} headers
 * @param {(status: number, body: any) => void} [onRefused]
 * @param {typeof fetch} [fetchImpl] default globalThis.fetch at each request
 */
export function headerEventSource(headers, onRefused, fetchImpl) {
  return class HeaderEventSource {
    constructor(url) {
      this.url = url;
      this.readyState = CONNECTING;
      this.onmessage = null;
      this.onerror = null;
      this._listeners = new Map();
      this._abort = new AbortController();
      this._lastId = "";
      this._retryMs = 1000;
      this._run();
    }

    addEventListener(type, fn) {
      if (!this._listeners.has(type)) this._listeners.set(type, new Set());
      this._listeners.get(type).add(fn);
    }

    removeEventListener(type, fn) {
      this._listeners.get(type)?.delete(fn);
    }

    close() {
      this.readyState = CLOSED;
      this._abort.abort();
    }

    _dispatch(type, ev) {
      if (this.readyState === CLOSED && type !== "error") return;
      if (type === "message" && this.onmessage) this.onmessage(ev);
      if (type === "error" && this.onerror) this.onerror(ev);
      for (const fn of this._listeners.get(type) || []) fn(ev);
    }

    async _run() {
      // One stream at a time; bounded by close() and by refusals.
      while (this.readyState !== CLOSED) {
        const h = { Accept: "text/event-stream", ...headers() };
        if (this._lastId) h["Last-Event-ID"] = this._lastId;
        let resp;
        try {
          resp = await (fetchImpl || fetch)(this.url, { headers: h, signal: this._abort.signal, cache: "no-store" });
        } catch {
          if (this.readyState === CLOSED) return;
          await this._pause();
          continue;
        }
        if (resp.status !== 200 || !(resp.headers.get("Content-Type") || "").startsWith("text/event-stream")) {
          let body = null;
          try {
            body = await resp.json();
          } catch {
            /* not JSON */
          }
          this.readyState = CLOSED;
          if (onRefused) onRefused(resp.status, body);
          this._dispatch("error", { type: "error" });
          return;
        }
        this.readyState = OPEN;
        this._dispatch("open", { type: "open" });
        try {
          await this._read(resp.body);
        } catch {
          /* the stream broke: reconnect */
        }
        if (this.readyState === CLOSED) return;
        this.readyState = CONNECTING;
        this._dispatch("error", { type: "error" });
        await this._pause();
      }
    }

    _pause() {
      return new Promise((resolve) => {
        const t = setTimeout(resolve, Math.max(MIN_RETRY_MS, this._retryMs));
        this._abort.signal.addEventListener("abort", () => {
          clearTimeout(t);
          resolve();
        });
      });
    }

    /** Parses text/event-stream as the HTML standard says, dispatching each event. */
    async _read(body) {
      const reader = body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      let type = "";
      let data = [];
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        buf += value;
        let nl;
        while ((nl = buf.search(/\r\n|\r|\n/)) >= 0) {
          if (nl === buf.length - 1 && buf[nl] === "\r") break; // a "\r\n" split across chunks
          const line = buf.slice(0, nl);
          buf = buf.slice(nl + (buf.startsWith("\r\n", nl) ? 2 : 1));
          if (line === "") {
            if (data.length) {
              const ev = { type: type || "message", data: data.join("\n"), lastEventId: this._lastId };
              this._dispatch(ev.type, ev);
            }
            type = "";
            data = [];
            continue;
          }
          if (line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          let val = colon < 0 ? "" : line.slice(colon + 1);
          if (val.startsWith(" ")) val = val.slice(1);
          if (field === "data") data.push(val);
          else if (field === "event") type = val;
          else if (field === "id" && !val.includes("\0")) this._lastId = val;
          else if (field === "retry" && /^\d+$/.test(val)) this._retryMs = Number(val);
        }
      }
    }
  };
}
