package router

// Server-Sent Events: GET /v1/sse?pattern=P[&pattern=Q][&from=…][&on_full=…]
// streams what a WebSocket subscription would deliver, as text/event-stream,
// to clients that cannot open a WebSocket (proxies that block it) or only
// need to receive.
//
// An SSE stream is a session like a WebSocket one, on the same machinery:
// the same lifecycle (lifecycle.go), authentication (a token in the query
// or the Authorization header), connection limits, subscriptions (one per
// pattern, through conn.subscribeSpec with a spec parsed from the query,
// so replay, "last" and the switch-over are the WebSocket's), bounded
// outbound queue with its drop policies, metrics and shutdown. Only the
// transport differs: session.NewOneWay writes the queue's batches to the
// response, where sseTransport turns each frame into an event:
//
//   - a message frame is an event of the default type ("message") whose
//     data is the frame's JSON and whose id is "<stream>.<n>", the
//     stream's key and the event's number (sse_resume.go). It is opaque to
//     clients. The queue puts the item's position on a line before the
//     frame (session.Options.FramePrefix), so writing an event parses
//     nothing back and costs the same however many partitions the stream
//     has seen.
//   - every other frame is an event named after its op (welcome,
//     subscribed, gap, error, topic_deleted, refresh_required, …) with the
//     frame's JSON as data, and no id.
//   - when the session ends, an event "close" carries the WebSocket close
//     code and reason it would have had.
//   - a comment line (": keepalive") every Options.Session.PingInterval
//     keeps proxies from closing an idle stream.
//
// A browser's EventSource reconnects by itself and sends the last id it
// received as the Last-Event-ID header (or a client passes it as the
// last_event_id query parameter): every pattern then resumes after its
// positions as the gateway kept them for that id (sse_resume.go) exactly as
// a WebSocket subscribe with "from": {"epoch", "positions"} does, with the
// same "recovered" answer in its subscribed event. An id the gateway no
// longer knows, or a token from another epoch, resumes as such a subscribe
// would (from the earliest records, recovered false). A Last-Event-ID past
// the bounds (sse_token.go) is refused with 400 before the stream starts.
//
// Each write extends the response's write deadline by the session's write
// timeout (http.ResponseController), so a server-wide WriteTimeout does not
// cut a long-lived stream, while a client that stops reading is still
// dropped after that timeout; the read deadline is lifted once the stream
// starts.
//
// Concurrency: the session's writer goroutine calls Write and Close, its
// keepalive goroutine Keepalive; sseTransport.mu serializes them. The
// position state is the stream's sseState, under its own lock.

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/session"
)

// sseRetry is the reconnect delay the stream asks EventSource to use: a
// second is quick enough that a dropped dashboard hardly notices, slow
// enough that a gateway restart is not met by a storm of reconnects.
const sseRetry = time.Second

func (rt *Router) serveSSE(c echo.Context) error {
	if rt.closing.Load() {
		return perr(codeShuttingDown, "server is shutting down")
	}
	req, pe := rt.parseSSE(c)
	if pe != nil {
		return pe
	}
	who, release, err := rt.admitConn(c)
	if err != nil {
		return err
	}
	if release == nil {
		return nil // admitConn wrote the refusal
	}

	cn := rt.newConn(c, transportSSE, who, false)
	st := rt.sse.newState(cn.id, req.epoch, req.patterns)
	if resume := req.resume; resume != nil && resume.known && resume.epoch == req.epoch {
		rt.sse.resumes.WithLabelValues("exact").Inc()
		st.inherit(resume.positions, resume.n) // ids keep counting, and keep the partitions seen before the drop
	} else if resume != nil {
		rt.sse.resumes.WithLabelValues("unknown").Inc()
	}
	tr := newSSETransport(c.Response(), st, rt.sse.untracked, rt.opts.Session.WriteTimeout)
	sopts := cn.sessionOptions()
	sopts.FramePrefix = st.prefix(cn)
	cn.sess = session.NewOneWay(cn.id, sopts, session.Transport{
		Write:     tr.write,
		Keepalive: tr.keepalive,
		Close:     tr.close,
		CloseNow:  tr.closeNow,
	})
	if !rt.addConn(cn) {
		rt.sse.end(st, time.Now())
		release()
		return perr(codeShuttingDown, "server is shutting down")
	}
	if err := tr.start(); err != nil {
		rt.sse.end(st, time.Now())
		rt.removeConn(cn)
		release()
		return nil // the client is gone
	}
	// The session is counted, limited and torn down as a WebSocket
	// session is (runStart, runEnd).
	cn.runStart(cn.welcomeFrame(sopts))
	// The client going away ends the session as a WebSocket close would.
	stop := context.AfterFunc(c.Request().Context(), cn.cancel)
	for i, p := range req.patterns {
		id := json.RawMessage(strconv.Itoa(i + 1))
		from := req.from
		if f, ok := req.resume.from(p); ok {
			from = f
		}
		if pe := cn.sseSubscribe(id, p, from, req.onFull, req.delta); pe != nil {
			cn.replyError(id, pe)
		}
	}
	err = cn.sess.Run(cn.ctx, nil)
	stop()
	rt.sse.end(st, time.Now()) // before the session stops counting: resumable once it has
	cn.runEnd(err, release)
	return nil
}

// sseRequest is what a stream's request asks for.
type sseRequest struct {
	patterns []string
	from     fromSpec // the query's from, for every pattern not resumed
	onFull   *string  // the query's on_full, checked per subscription
	delta    bool     // the query's delta=fossil (delta.go)
	epoch    string   // the log's epoch when the stream was asked for
	resume   *sseResumeAt
}

// parseSSE checks a stream's query and Last-Event-ID; what it refuses is
// refused with an HTTP error before the stream starts.
func (rt *Router) parseSSE(c echo.Context) (sseRequest, *protoError) {
	q := c.QueryParams()
	req := sseRequest{patterns: q["pattern"]}
	switch {
	case len(req.patterns) == 0:
		return req, perr(codeBadRequest, `missing query parameter "pattern"`)
	case len(req.patterns) > rt.settings().maxSubscriptions:
		return req, perr(codeTooManySubs, "a session may hold at most %d subscriptions", rt.settings().maxSubscriptions)
	}
	for _, p := range req.patterns {
		if pe := validPattern(&rt.opts.Bounds, p); pe != nil {
			return req, pe
		}
	}
	if f := q.Get("from"); f != "" {
		var pe *protoError
		req.from, pe = parseFrom(sseFrom(f))
		if pe == nil {
			pe = rt.checkLast(req.from, "", req.patterns...)
		}
		if pe != nil {
			return req, pe
		}
	}
	tok := c.Request().Header.Get("Last-Event-ID")
	if tok == "" {
		tok = q.Get("last_event_id")
	}
	req.epoch = rt.eng.Epoch()
	if tok != "" {
		var pe *protoError
		if req.resume, pe = rt.sseResumePoint(tok, req.epoch, req.patterns); pe != nil {
			rt.sse.resumes.WithLabelValues("refused").Inc()
			return req, pe
		}
	}
	if v := q.Get("on_full"); v != "" {
		req.onFull = &v
	}
	if q.Has("delta") {
		v := q.Get("delta")
		var pe *protoError
		if req.delta, pe = parseDelta(&v, ""); pe != nil {
			return req, pe
		}
	}
	return req, nil
}

// sseSubscribe subscribes a stream to one of its patterns from from, as a
// subscribe op with the query's on_full would: the same checks after the
// pattern's (checked with the query), in the same order.
func (cn *conn) sseSubscribe(id json.RawMessage, pattern string, from fromSpec, onFull *string, delta bool) *protoError {
	sp := subscribeSpec{id: id, pattern: pattern, from: from, delta: delta}
	var pe *protoError
	if sp.hookAllowed, pe = cn.authorizeSubscribe(pattern, ""); pe != nil {
		return pe
	}
	if sp.policy, pe = parseOnFull(onFull, ""); pe != nil {
		return pe
	}
	return cn.subscribeSpec(&sp)
}

// sseFrom turns the from query parameter into the subscribe op's "from":
// a name (latest, earliest, last) or a JSON object such as {"last":10}.
func sseFrom(v string) json.RawMessage {
	if len(v) > 0 && (v[0] == '{' || v[0] == '"') {
		return json.RawMessage(v)
	}
	b, _ := json.Marshal(v)
	return b
}

// sseTransport writes a session's batches to an event-stream response.
type sseTransport struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	st        *sseState
	untracked prometheus.Counter
	timeout   time.Duration

	mu   sync.Mutex // guards following and every write to w
	done bool
}

func newSSETransport(w http.ResponseWriter, st *sseState, untracked prometheus.Counter, timeout time.Duration) *sseTransport {
	if timeout <= 0 {
		timeout = session.DefaultWriteTimeout
	}
	return &sseTransport{w: w, rc: http.NewResponseController(w), st: st, untracked: untracked, timeout: timeout}
}

// start writes the response header and the retry hint.
func (t *sseTransport) start() error {
	h := t.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	t.w.WriteHeader(http.StatusOK)
	// A stream reads nothing more; a server read timeout expiring under
	// net/http's background read would cancel the request's context.
	_ = t.rc.SetReadDeadline(time.Time{})
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.flush([]byte("retry: " + strconv.Itoa(int(sseRetry/time.Millisecond)) + "\n\n"))
}

// flush writes p and flushes it, within the write timeout. Caller holds mu.
func (t *sseTransport) flush(p []byte) error {
	if t.done {
		return session.ErrClosed
	}
	_ = t.rc.SetWriteDeadline(time.Now().Add(t.timeout))
	if _, err := t.w.Write(p); err != nil {
		return err
	}
	return t.rc.Flush()
}

// write turns a batch into events. A message frame follows the line its
// FramePrefix wrote (sseState.prefix): NUL, the position slot and the
// offset, which become the event's id here, in the order of writing.
func (t *sseTransport) write(_ context.Context, batch []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	bp := sseBufs.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxSSEBuf {
			sseBufs.Put(bp)
		}
	}()
	b := (*bp)[:0]
	untracked := 0
	t.st.mu.Lock()
	for len(batch) > 0 {
		line := batch
		if i := bytes.IndexByte(batch, '\n'); i >= 0 {
			line, batch = batch[:i], batch[i+1:]
		} else {
			batch = nil
		}
		if len(line) > 0 && line[0] == 0 {
			// Only a record's event has an id and a number; the
			// position line of another stream item (a retention gap)
			// is dropped.
			next := batch
			if i := bytes.IndexByte(next, '\n'); i >= 0 {
				next = next[:i]
			}
			if string(frameOp(next)) != "message" {
				continue
			}
			slot, offset := parseSSEPrefix(line[1:])
			if slot < 0 {
				untracked++
			}
			b = append(b, "id: "...)
			b = t.st.appendID(b, t.st.advance(slot, offset))
			b = append(b, '\n')
			continue
		}
		if op := frameOp(line); string(op) != "message" {
			b = append(b, "event: "...)
			b = append(b, op...)
			b = append(b, '\n')
		}
		b = append(b, "data: "...)
		b = append(b, line...)
		b = append(b, "\n\n"...)
	}
	t.st.mu.Unlock()
	if untracked > 0 {
		t.untracked.Add(float64(untracked))
	}
	*bp = b
	return t.flush(b)
}

// sseBufs holds the buffers write builds its events in: shared by the
// streams, so that one that is not writing holds none.
var sseBufs = sync.Pool{New: func() any { b := make([]byte, 0, 4<<10); return &b }}

// maxSSEBuf bounds the buffers kept in sseBufs: the events of a batch of
// the default 64 KiB with their ids and field names fit.
const maxSSEBuf = 256 << 10

// parseSSEPrefix reads "<slot> <offset>" as sseState.prefix wrote it.
func parseSSEPrefix(p []byte) (slot int32, offset int64) {
	var v [2]int64
	k, neg := 0, false
	for _, c := range p {
		switch {
		case c == '-':
			neg = true
		case c == ' ':
			if neg {
				v[k] = -v[k]
			}
			k, neg = 1, false
		default:
			v[k] = v[k]*10 + int64(c-'0')
		}
	}
	if neg {
		v[k] = -v[k]
	}
	return int32(v[0]), v[1]
}

// frameOp returns the op of a frame the router encoded: every frame starts
// with {"op":"<op>". It allocates nothing.
func frameOp(line []byte) []byte {
	const prefix = `{"op":"`
	if !bytes.HasPrefix(line, []byte(prefix)) {
		return []byte("frame")
	}
	rest := line[len(prefix):]
	if i := bytes.IndexByte(rest, '"'); i > 0 {
		return rest[:i]
	}
	return []byte("frame")
}

func (t *sseTransport) keepalive(context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.flush([]byte(": keepalive\n\n"))
}

func (t *sseTransport) close(code websocket.StatusCode, reason string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	frame := encodeReply("close", nil, map[string]any{"code": int(code), "reason": reason})
	err := t.flush(append(append([]byte("event: close\ndata: "), frame...), "\n\n"...))
	t.done = true
	return err
}

func (t *sseTransport) closeNow() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.done = true
	// Unblock a write stuck on a client that does not read: the handler
	// returns once the session ends, and net/http closes the connection.
	_ = t.rc.SetWriteDeadline(time.Now())
	return nil
}
