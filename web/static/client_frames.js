// client_frames.js: the Switchyard JavaScript client's handling of what
// the gateway sends (welcome, messages, gaps, replies, presence, refresh),
// its requests and subscribes on the wire, the liveness check and
// reconnects. Part of the @switchyard/client package: the methods of
// ClientFrames are installed on switchyard.js's Client, whose state they
// use; nothing here is public API.

import { SwitchyardError, abortError, onAbort, backoffDelay, subKey, tpKey, fromBase64 } from "./client_base.js";
import { takeMessage, forgetPart } from "./fossil.js";

/** WebSocket readyState values, spelled out so injected implementations need not define them. */
const OPEN = 1;

/** Methods of Client (switchyard.js), kept here to keep each file readable. */
export class ClientFrames {
  /** @private */
  _onFrame(f) {
    // The reply to a liveness ping: a pong, or an older gateway's error.
    if (f.id !== undefined && f.id === this._pingId && (f.op === "pong" || f.op === "error")) return undefined;
    switch (f.op) {
      case "welcome":
        return this._onWelcome(f);
      case "message":
        return this._onMessage(f);
      case "gap":
        return this._onGap(f);
      case "topic_deleted":
        return this._onTopicDeleted(f);
      case "refresh_required":
        return this._onRefreshRequired(f);
      case "join":
      case "leave":
        return this._onPresence(f);
      case "presence":
        if (f.id === undefined) return this._onPresenceResync(f);
        if (this._pending.has(f.id)) return this._settle(f.id, null, f);
        return undefined;
      case "unsubscribed":
        if (f.id === undefined && f.reason) return this._onRevoked(f);
        if (f.id !== undefined && this._pending.has(f.id)) return this._settle(f.id, null, f);
        return undefined;
      case "error":
        if (f.id !== undefined && this._pending.has(f.id)) {
          return this._settle(f.id, new SwitchyardError(f.code, f.message, { frame: f }), null);
        }
        return this._emit("error", new SwitchyardError(f.code, f.message, { frame: f }));
      default:
        if (f.id !== undefined && this._pending.has(f.id)) return this._settle(f.id, null, f);
      // Anything else is a frame from a newer server; ignore it.
    }
  }

  /** @private */
  _onWelcome(w) {
    clearTimeout(this._welcomeTimer);
    const reconnected = this.state === "reconnecting";
    this.session = w.session;
    this.epoch = w.epoch;
    this.limits = w.limits;
    this._attempt = 0;
    this._setState("open");
    if (reconnected) this.stats.reconnects++;
    this._watchLiveness(this._ws);

    // Resubscribe every subscription first, then send what waited.
    for (const sub of this._subs.values()) this._sendSubscribe(sub);
    for (const [id, p] of this._pending) {
      if (!p.sent && p.frame) {
        p.sent = true;
        this._send({ ...p.frame, id });
      }
    }
    this._emit("open", w);
    if (this._first) {
      this._first.resolve();
      this._first = null;
    }
  }

  /** @private */
  _onMessage(m) {
    const sub = this._subs.get(subKey(m.pattern, m.group));
    if (!sub || sub.state === "closed") return; // unsubscribed meanwhile
    if (sub._fossil) {
      try {
        m = takeMessage(sub._fossil, m, this._opts.maxDeltaBytes);
      } catch (err) {
        return this._deltaFailed(sub, m, err);
      }
    }
    if (m.encoding === "base64" && typeof m.data === "string") {
      // A record whose bytes are not JSON: the handler gets the bytes.
      try {
        m.data = fromBase64(m.data);
      } catch {
        this._emit("error", new SwitchyardError("bad_frame", `message at ${m.topic}/${m.partition}/${m.offset} has "encoding":"base64" but data that is not base64`, { frame: m }));
        return;
      }
    }
    if (sub.group) {
      const k = tpKey(m.topic, m.partition) + "\u0000" + m.offset;
      const seen = sub._recent.get(k);
      if (seen !== undefined) {
        sub.duplicates++;
        this.stats.duplicates++;
        // Already acked: the ack was lost or late; ack again. Still being
        // handled: the handler's own ack will settle it.
        if (seen === "acked") this._send({ op: "ack", group: m.group, topic: m.topic, partition: m.partition, offset: m.offset });
        return;
      }
      sub._recent.set(k, "handling");
    } else if (typeof m.offset === "number") {
      const k = tpKey(m.topic, m.partition);
      // A partition of a deleted topic not yet seen made again: an offset
      // above the deleted incarnation's last is a straggler of it and
      // moves no position (a resume must not name it); one at or below
      // is the next incarnation's first.
      const straggled = sub._stragglers ? sub._stragglers.get(k) : undefined;
      if (straggled !== undefined) {
        if (m.offset > straggled) {
          sub._stragglers.set(k, m.offset);
        } else {
          sub._stragglers.delete(k);
          sub._last.set(k, { topic: m.topic, partition: m.partition, offset: m.offset });
        }
      } else {
        const last = sub._last.get(k);
        // After a topic_deleted on this connection an offset at or below
        // the last is the topic made again (from 0), not a duplicate: the
        // gateway writes the frame ahead of the deleted topic's queued
        // messages, and sends each offset of one incarnation once, in order.
        if (last && m.offset <= last.offset && !(sub._deleted && sub._deleted.has(m.topic))) {
          sub.duplicates++;
          this.stats.duplicates++;
          return;
        }
        if (sub._epoch === undefined) sub._epoch = this.epoch;
        sub._last.set(k, { topic: m.topic, partition: m.partition, offset: m.offset });
      }
    }
    sub.delivered++;
    let result;
    try {
      result = sub._handler(m, sub);
    } catch (err) {
      this._handlerFailed(sub, m, err);
      return;
    }
    if (sub.group && sub._opts.autoAck) {
      Promise.resolve(result).then(
        () => this.ack(m).catch((err) => this._emit("error", err)),
        (err) => this._handlerFailed(sub, m, err),
      );
    }
  }

  /** @private */
  _handlerFailed(sub, m, err) {
    this._emit(
      "error",
      new SwitchyardError("handler_failed", `handler for ${sub.pattern} threw: ${err && err.message}`, {
        cause: err,
        subscription: sub,
        frame: m,
      }),
    );
    if (sub.group && sub._opts.autoAck) this.nack(m, err).catch((e) => this._emit("error", e));
  }

  /** A delta that does not apply: reported, then a reconnect resumes with full messages. @private */
  _deltaFailed(sub, m, err) {
    this._emit("error", new SwitchyardError("bad_delta", err.message, { subscription: sub, frame: m }));
    const ws = this._ws;
    if (!ws) return;
    try {
      ws.close(4000, "bad delta");
    } catch {
      /* already closing */
    }
    this._onSocketGone(ws, { code: 4000, reason: "bad delta" });
  }

  /** @private */
  _onTopicDeleted(f) {
    const sub = this._subs.get(subKey(f.pattern, f.group));
    if (sub && !sub.group) sub._forgetTopic(f.topic);
    this._emit("topic_deleted", f, sub);
  }

  /** @private */
  _onGap(g) {
    const sub = this._subs.get(subKey(g.pattern, g.group));
    if (sub && sub._fossil) forgetPart(sub._fossil, g);
    this.stats.gaps++;
    this._emit("gap", g, sub);
  }

  /** Sends (or re-sends) a subscribe and tracks its reply. @private */
  _sendSubscribe(sub) {
    const id = this._nextId++;
    const frame = sub._frame();
    const sentPositions = !!(frame.from && frame.from.positions);
    if (!sub.group && sub._epoch !== undefined && this.epoch !== undefined && sub._epoch !== this.epoch) {
      // A new log epoch restarts offsets: what the old one delivered no
      // longer dedupes. The frame carries the old positions, so the server
      // answers recovered:false and starts at the earliest retained record;
      // until a reply says so they are kept and sent again (_stale).
      if (sub._last.size > 0) sub._stale = { epoch: sub._epoch, last: sub._last };
      sub._last = new Map();
      sub._epoch = this.epoch;
    }
    const timer = setTimeout(() => {
      if (!this._pending.has(id)) return;
      this._pending.delete(id);
      if (sub.state === "pending") {
        const err = new SwitchyardError("timeout", `no reply to subscribe ${sub.pattern} within ${this._opts.requestTimeoutMs} ms`);
        this._dropSub(sub, err);
        sub._ready.reject(err);
        // The server may still have taken it; tell it we no longer want it.
        const f = { op: "unsubscribe", pattern: sub.pattern };
        if (sub.group) f.group = sub.group;
        this._send(f);
      } else {
        this._emit("error", new SwitchyardError("timeout", `no reply to resubscribe ${sub.pattern}`, { subscription: sub }));
      }
    }, this._opts.requestTimeoutMs);
    this._pending.set(id, {
      kind: "subscribe",
      sent: true,
      timer,
      resolve: (reply) => {
        if (sub.state === "closed") return;
        const wasPending = sub.state === "pending";
        sub.state = "active";
        if (reply.recovered !== undefined) sub.recovered = reply.recovered;
        if (sentPositions && reply.recovered !== undefined && sub._stale) {
          // The positions of the other epoch are settled: they apply again
          // (the gateway is back on their epoch), or this is the reset.
          if (reply.recovered && sub._last.size === 0) {
            sub._last = sub._stale.last;
            sub._epoch = sub._stale.epoch;
          }
          sub._stale = null;
        }
        if (sentPositions && reply.recovered === false) {
          this._emit("reset", { subscription: sub, pattern: sub.pattern, group: sub.group, epoch: this.epoch });
        }
        if (wasPending) sub._ready.resolve(sub);
      },
      reject: (err) => {
        if (sub.state === "closed") return;
        const wasPending = sub.state === "pending";
        this._dropSub(sub, err);
        err.subscription = sub;
        // A refused first subscribe rejects its promise; a refused
        // resubscribe after a reconnect can only be reported as an event.
        if (wasPending) sub._ready.reject(err);
        else this._emit("error", err);
      },
    });
    this._send({ ...frame, id });
  }

  /**
   * A subscribe made while disconnected: it is sent on the next welcome, but
   * its caller still gets a timeout. @private
   */
  _armPendingSubscribe(sub) {
    const t = setTimeout(() => {
      if (sub.state !== "pending" || this.state === "open") return;
      const err = new SwitchyardError("timeout", `not connected within ${this._opts.requestTimeoutMs} ms to subscribe ${sub.pattern}`);
      this._dropSub(sub, err);
      sub._ready.reject(err);
    }, this._opts.requestTimeoutMs);
    sub._readyPromise.then(
      () => clearTimeout(t),
      () => clearTimeout(t),
    );
  }

  /** @private */
  _dropSub(sub, err) {
    sub.state = "closed";
    sub._ended(err);
    const key = subKey(sub.pattern, sub.group);
    if (this._subs.get(key) === sub) this._subs.delete(key);
  }

  /** Ends sub; err (an abort) is what a pending subscribe rejects with. @private */
  _unsubscribe(sub, err) {
    if (sub.state === "closed") return Promise.resolve();
    const wasPending = sub.state === "pending";
    this._dropSub(sub, err);
    if (wasPending) sub._ready.reject(err || new SwitchyardError("closed", "unsubscribed before the server confirmed"));
    if (this.state !== "open") return Promise.resolve();
    const f = { op: "unsubscribe", pattern: sub.pattern };
    if (sub.group) f.group = sub.group;
    return this._request(f, { queue: false }).then(
      () => undefined,
      (err) => {
        // The session forgot it already (e.g. a reconnect raced the request).
        if (err.code === "not_subscribed" || err.code === "disconnected") return undefined;
        throw err;
      },
    );
  }

  /**
   * Sends a request with an id and resolves with the reply frame. When not
   * connected, the request waits for the next connection unless
   * opts.queue is false. @private
   */
  _request(frame, { queue = true, signal, onReply } = {}) {
    if (this.state === "closed") return Promise.reject(this._closedError());
    if (signal && signal.aborted) return Promise.reject(abortError(signal));
    const id = this._nextId++;
    return new Promise((resolve, reject) => {
      const open = this.state === "open";
      if (!open && !queue) {
        resolve(undefined);
        return;
      }
      const off = onAbort(signal, () => {
        const p = this._pending.get(id);
        if (!p) return;
        this._pending.delete(id);
        clearTimeout(p.timer);
        reject(abortError(signal));
      });
      const timer = setTimeout(() => {
        if (!this._pending.has(id)) return;
        this._pending.delete(id);
        off();
        reject(new SwitchyardError("timeout", `no reply to ${frame.op} within ${this._opts.requestTimeoutMs} ms`));
      }, this._opts.requestTimeoutMs);
      const done = (fn) => (v) => {
        off();
        fn(v);
      };
      this._pending.set(id, { kind: frame.op, frame, sent: open, timer, onReply, resolve: done(resolve), reject: done(reject) });
      if (open) this._send({ ...frame, id });
    });
  }

  /** @private */
  _settle(id, err, reply) {
    const p = this._pending.get(id);
    if (!p) return;
    this._pending.delete(id);
    clearTimeout(p.timer);
    if (err) p.reject(err);
    else {
      const { op: _op, id: _id, ...rest } = reply;
      if (p.onReply) p.onReply(rest); // at once, before the frames after the reply
      p.resolve(p.kind === "subscribe" ? reply : rest);
    }
  }

  /** @private */
  _send(obj) {
    const ws = this._ws;
    if (!ws || ws.readyState !== OPEN) return false;
    ws.send(JSON.stringify(obj));
    return true;
  }

  /** The server asks for a new token before the current one expires. @private */
  async _onRefreshRequired(f) {
    this._emit("refresh_required", f);
    const get = this._opts.token;
    if (typeof get !== "function" || this._refreshing) return;
    this._refreshing = true;
    try {
      const token = await get();
      if (this.state === "open") await this.refresh(token);
    } catch (err) {
      this._emit("error", err instanceof SwitchyardError ? err : new SwitchyardError("unauthorized", "token refresh failed: " + ((err && err.message) || err)));
    } finally {
      this._refreshing = false;
    }
  }

  /** The server ended a subscription (a refreshed token no longer allows it). @private */
  _onRevoked(f) {
    const sub = this._subs.get(subKey(f.pattern, f.group));
    if (!sub) return;
    this._dropSub(sub);
    this._emit("error", new SwitchyardError(f.reason, `subscription ${f.pattern} ended: the refreshed token does not allow it`, { frame: f }));
  }

  /**
   * The server dropped presence frames to this client: list the topic
   * again and emit `presence` with the list, at its reply, before any
   * later frame (the server sends the joins and leaves made meanwhile
   * after the reply). @private
   */
  _onPresenceResync(f) {
    const onReply = (list) => this._onPresence({ op: "presence", resync: true, ...list });
    this._request({ op: "presence", topic: f.topic }, { queue: false, onReply }).catch((err) => {
      if (this.state !== "closed") this._emit("error", err);
    });
  }

  /** A presence join, leave or resync. @private */
  _onPresence(f) {
    this._emit(f.op, f);
    for (const sub of this._subs.values()) {
      if (sub._onPresence) sub._onPresence(f);
    }
  }

  /**
   * Checks that ws is alive while it is the client's socket: after
   * pingIntervalMs without a frame it sends a ping op; when no frame at all
   * arrives within pongTimeoutMs after it, the socket is closed as dead.
   * Any frame proves the connection alive, so a busy one is never pinged.
   * Not for the SSE transport, whose EventSource watches its own stream.
   * @private
   */
  _watchLiveness(ws) {
    clearTimeout(this._liveTimer);
    this._probe = null;
    const every = this._opts.pingIntervalMs;
    if (!(every > 0) || this.transport !== "websocket" || !ws) return;
    const timeout = this._opts.pongTimeoutMs;
    this._receivedAt = Date.now();
    const check = () => {
      if (this._ws !== ws || this.state !== "open") return;
      const now = Date.now();
      const probe = this._probe;
      if (probe && this._received === probe.received) {
        const left = probe.sentAt + timeout - now;
        if (left > 0) {
          this._liveTimer = setTimeout(check, left);
          return;
        }
        const reason = `no reply to ping within ${timeout} ms`;
        try {
          ws.close(4000, reason);
        } catch {
          /* already closing */
        }
        this._onSocketGone(ws, { code: 4000, reason });
        return;
      }
      this._probe = null;
      const idle = now - this._receivedAt;
      if (idle < every) {
        this._liveTimer = setTimeout(check, every - idle);
        return;
      }
      const id = this._nextId++;
      this._pingId = id;
      this._probe = { id, received: this._received, sentAt: now };
      this._send({ op: "ping", id });
      this._liveTimer = setTimeout(check, timeout);
    };
    this._liveTimer = setTimeout(check, every);
  }

  /** The current socket closed (or never opened). @private */
  _onSocketGone(ws, ev) {
    if (ws !== null && this._ws !== ws) return; // an old socket
    clearTimeout(this._welcomeTimer);
    clearTimeout(this._liveTimer);
    this._probe = null;
    this._ws = null;
    if (ws) {
      ws.onmessage = ws.onclose = ws.onerror = null;
    }
    if (this.state === "closed") return;
    const code = ev.code === undefined ? 1006 : ev.code;
    const reason = ev.reason || "";

    // Requests already on the wire have an unknown outcome now.
    const lost = new SwitchyardError("disconnected", "connection lost before the reply" + (reason ? `: ${reason}` : ""), { closeCode: code });
    for (const [id, p] of this._pending) {
      if (!p.sent) continue;
      this._pending.delete(id);
      clearTimeout(p.timer);
      if (p.kind !== "subscribe") p.reject(lost); // subscriptions are resent on the next welcome
    }
    for (const sub of this._subs.values()) {
      if (sub.state === "pending") this._armPendingSubscribe(sub);
    }

    if (this._first && this._transport + 1 < this._transports.length) {
      // This transport cannot be opened here: try the next one at once.
      this._transport++;
      this.transport = this._transports[this._transport];
      this._emit("transport", { transport: this.transport, code, reason });
      this._dial();
      return;
    }
    if (this._first) {
      // The first attempt failed: report it instead of retrying in the dark.
      const err = new SwitchyardError("connect_failed", `could not connect to ${this._url} (close ${code}${reason ? ": " + reason : ""})`, { closeCode: code });
      this._shutdown(err, { code, reason, willReconnect: false });
      return;
    }
    // A policy close (1008) with a fixed token will fail the same way again.
    const hopeless = code === 1008 && typeof this._opts.token !== "function";
    const willReconnect = this._opts.reconnect && !hopeless;
    if (!willReconnect) {
      const err = new SwitchyardError(code === 1008 ? "unauthorized" : "closed", `connection closed (${code}${reason ? ": " + reason : ""})`, { closeCode: code });
      this._emit("error", err);
      this._shutdown(err, { code, reason, willReconnect: false });
      return;
    }
    this._emit("close", { code, reason, willReconnect });
    this._setState("reconnecting");
    const delayMs = backoffDelay(this._attempt, this._opts.minDelayMs, this._opts.maxDelayMs);
    this._attempt++;
    this._emit("reconnect", { attempt: this._attempt, delayMs });
    this._retryTimer = setTimeout(() => {
      if (this.state === "reconnecting") this._dial();
    }, delayMs);
  }
}
