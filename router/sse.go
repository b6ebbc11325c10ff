package router

// Server-Sent Events: GET /v1/sse?pattern=P[&pattern=Q][&from=…][&on_full=…]
// streams what a WebSocket subscription would deliver, as text/event-stream,
// to clients that cannot open a WebSocket (proxies that block it) or only
// need to receive.
//
// An SSE stream is a session like a WebSocket one, on the same machinery:
// the same authentication (a token in the query or the Authorization
// header), connection limits, subscriptions (one per pattern, through
// conn.subscribe, so replay, "last", filters and the switch-over are the
// WebSocket's), bounded outbound queue with its drop policies, metrics and
// shutdown. Only the transport differs: session.NewOneWay writes the queue's
// batches to the response, where sseTransport turns each frame into an
// event:
//
//   - a message frame is an event of the default type ("message") whose
//     data is the frame's JSON and whose id is a position token: the epoch
//     and, for every pattern, the last offset delivered on every (topic,
//     partition), base64url-encoded. It is opaque to clients.
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
// positions exactly as a WebSocket subscribe with "from": {"epoch",
// "positions"} does, with the same "recovered" answer in its subscribed
// event. A token from another epoch resumes as such a subscribe would (from
// the earliest records, recovered false).
//
// Each write extends the response's write deadline by the session's write
// timeout (http.ResponseController), so a server-wide WriteTimeout does not
// cut a long-lived stream, while a client that stops reading is still
// dropped after that timeout; the read deadline is lifted once the stream
// starts.
//
// Concurrency: the session's writer goroutine calls Write and Close, its
// keepalive goroutine Keepalive; sseTransport.mu serializes them. The
// position state is touched by Write only.

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/switchyard/switchyard/session"
	"github.com/switchyard/switchyard/trie"
)

// sseRetry is the reconnect delay the stream asks EventSource to use: a
// second is quick enough that a dropped dashboard hardly notices, slow
// enough that a gateway restart is not met by a storm of reconnects.
const sseRetry = time.Second

func (rt *Router) serveSSE(c echo.Context) error {
	if rt.closing.Load() {
		return perr(codeShuttingDown, "server is shutting down")
	}
	q := c.QueryParams()
	patterns := q["pattern"]
	switch {
	case len(patterns) == 0:
		return perr(codeBadRequest, `missing query parameter "pattern"`)
	case len(patterns) > rt.opts.MaxSubscriptions:
		return perr(codeTooManySubs, "a session may hold at most %d subscriptions", rt.opts.MaxSubscriptions)
	}
	for _, p := range patterns {
		if pe := validPattern(&rt.opts.Bounds, p); pe != nil {
			return pe
		}
	}
	var from json.RawMessage
	if f := q.Get("from"); f != "" {
		from = sseFrom(f)
		if _, pe := parseFrom(from); pe != nil {
			return pe
		}
	}
	tok := c.Request().Header.Get("Last-Event-ID")
	if tok == "" {
		tok = q.Get("last_event_id")
	}
	var resume *ssePositions
	if tok != "" {
		var err error
		if resume, err = decodeSSEToken(tok); err != nil {
			return perr(codeBadRequest, "Last-Event-ID is not a position token of this gateway")
		}
	}
	var onFull *string
	if v := q.Get("on_full"); v != "" {
		onFull = &v
	}
	who, release, err := rt.admitConn(c)
	if err != nil {
		return err
	}
	if release == nil {
		return nil // admitConn wrote the refusal
	}

	cn := &conn{rt: rt, id: newID(), who: who, subs: make(map[subKey]*subscription), byID: make(map[uint64]*subscription)}
	if rt.opts.PublishRate > 0 {
		cn.limiter = rate.NewLimiter(rate.Limit(rt.opts.PublishRate), rt.opts.PublishBurst)
	}
	epoch := rt.eng.Epoch()
	tr := newSSETransport(c.Response(), epoch, rt.opts.Session.WriteTimeout)
	if resume != nil && resume.epoch == epoch {
		tr.pos = resume // ids keep the partitions seen before the drop
	}
	sopts := rt.opts.Session
	sopts.EncodeGap = cn.encodeGap
	sopts.OnDrop = cn.onDrop
	sopts.OnSent = rt.onSent
	cn.sess = session.NewOneWay(cn.id, sopts, session.Transport{
		Write:     tr.write,
		Keepalive: tr.keepalive,
		Close:     tr.close,
		CloseNow:  tr.closeNow,
	})
	if !rt.addConn(cn) {
		release()
		return perr(codeShuttingDown, "server is shutting down")
	}
	if err := tr.start(); err != nil {
		rt.removeConn(cn)
		release()
		return nil // the client is gone
	}
	// The session is counted, limited and torn down as a WebSocket
	// session is (runStart, runEnd); only its welcome differs.
	cn.runStart(encodeReply("welcome", nil, map[string]any{
		"session": cn.id,
		"epoch":   epoch,
		"limits": map[string]any{
			"max_subscriptions": rt.opts.MaxSubscriptions,
			"queue_messages":    sopts.QueueMessages,
		},
	}))
	// The client going away ends the session as a WebSocket close would.
	stop := context.AfterFunc(c.Request().Context(), cn.cancel)
	for i, p := range patterns {
		pattern := p
		req := &request{Op: "subscribe", ID: json.RawMessage(strconv.Itoa(i + 1)), Pattern: &pattern, From: from, OnFull: onFull}
		if resume != nil && resume.has(pattern) {
			req.From = resume.from(pattern)
		}
		if pe := cn.subscribe(req); pe != nil {
			cn.sess.Send(session.Item{Frame: cn.errorFrame(req.ID, pe)})
		}
	}
	err = cn.sess.Run(cn.ctx, nil)
	stop()
	cn.runEnd(err, release)
	return nil
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
	w       http.ResponseWriter
	rc      *http.ResponseController
	epoch   string
	timeout time.Duration

	mu   sync.Mutex // guards following and every write to w
	buf  []byte
	pos  *ssePositions
	done bool
}

func newSSETransport(w http.ResponseWriter, epoch string, timeout time.Duration) *sseTransport {
	if timeout <= 0 {
		timeout = session.DefaultWriteTimeout
	}
	return &sseTransport{w: w, rc: http.NewResponseController(w), epoch: epoch, timeout: timeout, pos: &ssePositions{epoch: epoch}}
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

func (t *sseTransport) write(_ context.Context, batch []byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.buf[:0]
	for len(batch) > 0 {
		line := batch
		if i := bytes.IndexByte(batch, '\n'); i >= 0 {
			line, batch = batch[:i], batch[i+1:]
		} else {
			batch = nil
		}
		op := frameOp(line)
		if op == "message" {
			var m struct {
				Pattern   string `json:"pattern"`
				Topic     string `json:"topic"`
				Partition int    `json:"partition"`
				Offset    int64  `json:"offset"`
				Group     string `json:"group"`
			}
			if json.Unmarshal(line, &m) == nil && m.Group == "" {
				t.pos.set(m.Pattern, m.Topic, m.Partition, m.Offset)
				b = append(b, "id: "...)
				b = t.pos.appendToken(b)
				b = append(b, '\n')
			}
		} else {
			b = append(b, "event: "...)
			b = append(b, op...)
			b = append(b, '\n')
		}
		b = append(b, "data: "...)
		b = append(b, line...)
		b = append(b, "\n\n"...)
	}
	t.buf = b
	if cap(t.buf) > 64<<10 {
		t.buf = nil // one large batch is not worth keeping
	}
	return t.flush(b)
}

// frameOp returns the op of a frame the router encoded: every frame starts
// with {"op":"<op>".
func frameOp(line []byte) string {
	const prefix = `{"op":"`
	if !bytes.HasPrefix(line, []byte(prefix)) {
		return "frame"
	}
	rest := line[len(prefix):]
	if i := bytes.IndexByte(rest, '"'); i > 0 {
		return string(rest[:i])
	}
	return "frame"
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

// ssePositions is the content of a position token: the last offset
// delivered per pattern and (topic, partition), in first-seen order so that
// tokens are stable.
type ssePositions struct {
	epoch string
	subs  []ssePatternPos
}

type ssePatternPos struct {
	pattern string
	parts   []ssePart
	index   map[partKey]int
}

type ssePart struct {
	topic     string
	partition int
	offset    int64
}

func (p *ssePositions) set(pattern, topic string, partition int, offset int64) {
	var sp *ssePatternPos
	for i := range p.subs {
		if p.subs[i].pattern == pattern {
			sp = &p.subs[i]
			break
		}
	}
	if sp == nil {
		p.subs = append(p.subs, ssePatternPos{pattern: pattern, index: map[partKey]int{}})
		sp = &p.subs[len(p.subs)-1]
	}
	if sp.index == nil {
		sp.index = map[partKey]int{}
		for i, pt := range sp.parts {
			sp.index[partKey{pt.topic, pt.partition}] = i
		}
	}
	k := partKey{topic, partition}
	if i, ok := sp.index[k]; ok {
		sp.parts[i].offset = offset
		return
	}
	sp.index[k] = len(sp.parts)
	sp.parts = append(sp.parts, ssePart{topic, partition, offset})
}

// appendToken appends the token: base64url (no padding) of
// {"e":epoch,"s":[{"p":pattern,"o":[[topic,partition,offset],…]},…]}.
func (p *ssePositions) appendToken(dst []byte) []byte {
	js := make([]byte, 0, 64)
	js = append(js, `{"e":`...)
	js = appendString(js, p.epoch)
	js = append(js, `,"s":[`...)
	for i, sp := range p.subs {
		if i > 0 {
			js = append(js, ',')
		}
		js = append(js, `{"p":`...)
		js = appendString(js, sp.pattern)
		js = append(js, `,"o":[`...)
		for j, pt := range sp.parts {
			if j > 0 {
				js = append(js, ',')
			}
			js = append(js, '[')
			js = appendString(js, pt.topic)
			js = append(js, ',')
			js = strconv.AppendInt(js, int64(pt.partition), 10)
			js = append(js, ',')
			js = strconv.AppendInt(js, pt.offset, 10)
			js = append(js, ']')
		}
		js = append(js, "]}"...)
	}
	js = append(js, "]}"...)
	return base64.RawURLEncoding.AppendEncode(dst, js)
}

func decodeSSEToken(tok string) (*ssePositions, error) {
	js, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return nil, err
	}
	var raw struct {
		E *string `json:"e"`
		S []struct {
			P string               `json:"p"`
			O [][3]json.RawMessage `json:"o"`
		} `json:"s"`
	}
	if err := json.Unmarshal(js, &raw); err != nil {
		return nil, err
	}
	if raw.E == nil {
		return nil, errors.New("no epoch")
	}
	p := &ssePositions{epoch: *raw.E}
	for _, s := range raw.S {
		sp := ssePatternPos{pattern: s.P}
		for _, o := range s.O {
			var pt ssePart
			if json.Unmarshal(o[0], &pt.topic) != nil || json.Unmarshal(o[1], &pt.partition) != nil || json.Unmarshal(o[2], &pt.offset) != nil {
				return nil, errors.New("malformed position")
			}
			if trie.ValidateTopic(pt.topic) != nil || pt.partition < 0 || pt.offset < -1 {
				return nil, errors.New("position out of range")
			}
			sp.parts = append(sp.parts, pt)
		}
		p.subs = append(p.subs, sp)
	}
	return p, nil
}

// has reports whether the token holds positions of pattern; a pattern that
// had delivered nothing resumes with the stream's own from, as the
// WebSocket clients do.
func (p *ssePositions) has(pattern string) bool {
	for _, sp := range p.subs {
		if sp.pattern == pattern && len(sp.parts) > 0 {
			return true
		}
	}
	return false
}

// from returns the subscribe "from" that resumes pattern after its
// positions.
func (p *ssePositions) from(pattern string) json.RawMessage {
	type pos struct {
		Topic     string `json:"topic"`
		Partition int    `json:"partition"`
		Offset    int64  `json:"offset"`
	}
	out := struct {
		Epoch     string `json:"epoch"`
		Positions []pos  `json:"positions"`
	}{Epoch: p.epoch, Positions: []pos{}}
	for _, sp := range p.subs {
		if sp.pattern != pattern {
			continue
		}
		for _, pt := range sp.parts {
			out.Positions = append(out.Positions, pos{pt.topic, pt.partition, pt.offset})
		}
	}
	b, _ := json.Marshal(out)
	return b
}
