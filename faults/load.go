package faults

// The load a scenario runs under: WebSocket publishers that retry with
// their msg_id, and plain subscribers, one of each per gateway or more,
// every operation recorded in a History.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// PublishBound is the longest a publish may wait for its answer
// (published or an error), even while NATS is unreachable: past it the
// publish counts as hung, a violation.
const PublishBound = 10 * time.Second

// retryPause is a publisher's pause before retrying a failed publish.
const retryPause = 100 * time.Millisecond

// loadStats is what the load saw; guarded by load.mu.
type loadStats struct {
	Acked, Duplicates int
	Failed            map[string]int // by error code ("closed": no answer)
	// SlowestFailure is the longest a failed publish took to be answered.
	SlowestFailure time.Duration
	// SlowestAck is the longest a successful publish took.
	SlowestAck time.Duration
	Delivered  int
	Gaps       int
}

// load is the clients of a run.
type load struct {
	h     *History
	topic string // the plain subscribers' topic
	jobs  string // the group's topic
	group groupState

	mu         sync.Mutex // guards the fields below
	stats      loadStats
	violations []string
	seen       map[string]int // violations by text, counted
	acks       chan struct{}  // one send (when room) per ack, for waiters
	ackedBy    []int          // acks per publisher
	subNext    map[int]int64  // per subscriber: the offset it expects next
	subMoved   chan struct{}  // one send (when room) per delivery
	marks      []mark         // moments of the run

	pubs sync.WaitGroup // the publishers
	wg   sync.WaitGroup // the subscribers and members
}

func newLoad(h *History, topic, jobs string, publishers int) *load {
	return &load{h: h, topic: topic, jobs: jobs,
		group: groupState{acked: map[int64]ackSeen{}, moved: make(chan struct{}, 1)}, acks: make(chan struct{}, 1),
		stats: loadStats{Failed: map[string]int{}}, seen: map[string]int{}, subNext: map[int]int64{}, subMoved: make(chan struct{}, 1), ackedBy: make([]int, publishers)}
}

func (l *load) violate(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := fmt.Sprintf(format, args...)
	if l.seen[v]++; l.seen[v] == 1 && len(l.violations) < 50 {
		l.violations = append(l.violations, v)
	}
}

// violationList is the violations, each with how often it was seen.
func (l *load) violationList() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, len(l.violations))
	for i, v := range l.violations {
		out[i] = v
		if n := l.seen[v]; n > 1 {
			out[i] = fmt.Sprintf("%s (%d times)", v, n)
		}
	}
	return out
}

// mark notes a moment of the run, for the violations that say when.
func (l *load) mark(what string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.marks = append(l.marks, mark{what: what, at: time.Now()})
}

// mark is a moment of the run.
type mark struct {
	what string
	at   time.Time
}

// sinceMarks says how long after each mark t is.
func (l *load) sinceMarks(t time.Time) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var parts []string
	for _, m := range l.marks {
		if d := t.Sub(m.at); d >= 0 {
			parts = append(parts, fmt.Sprintf("%v after %s", d.Round(time.Millisecond), m.what))
		} else {
			parts = append(parts, fmt.Sprintf("%v before %s", (-d).Round(time.Millisecond), m.what))
		}
	}
	return strings.Join(parts, ", ")
}

// logName names the topic's only partition in the history.
func (l *load) logName() string { return l.topic + "/0" }

// topicOf is publisher i's topic: odd publishers feed the group.
func (l *load) topicOf(i int) string {
	if i%2 == 1 {
		return l.jobs
	}
	return l.topic
}

// wsClient is one WebSocket session.
type wsClient struct {
	c       *websocket.Conn
	pending []frame // frames read, not yet returned
}

func dialWS(ctx context.Context, url string) (*wsClient, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(1 << 20)
	w := &wsClient{c: c}
	// The session opens with a welcome frame.
	if f, err := w.read(ctx); err != nil || f.Op != "welcome" {
		w.close()
		return nil, fmt.Errorf("faults: no welcome from %s: %+v %v", url, f, err)
	}
	return w, nil
}

func (w *wsClient) send(ctx context.Context, v any) error {
	data, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return w.c.Write(ctx, websocket.MessageText, data)
}

// frame is the fields of the frames the load reads.
type frame struct {
	Op        string `json:"op"`
	ID        int64  `json:"id"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
	Duplicate bool   `json:"duplicate"`
	Data      string `json:"data"`
	Reason    string `json:"reason"`
	From, To  int64
}

// read returns the next frame; a WebSocket message may hold several
// (one JSON object a line).
func (w *wsClient) read(ctx context.Context) (frame, error) {
	for len(w.pending) == 0 {
		_, data, err := w.c.Read(ctx)
		if err != nil {
			return frame{}, err
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		for dec.More() {
			var f frame
			if err := dec.Decode(&f); err != nil {
				return frame{}, err
			}
			w.pending = append(w.pending, f)
		}
	}
	f := w.pending[0]
	w.pending = w.pending[1:]
	return f, nil
}

func (w *wsClient) close() { _ = w.c.CloseNow() }

// publisher publishes to gateway urls[0] until ctx ends, keeping up to window
// publishes in flight (pipelined; replies come in request order); every
// publish has a msg_id and is retried with it until it is published. When
// its connection fails (or cannot be made) it goes on through the next
// gateway of urls, in turn, retrying there. Once
// ctx ends it sends nothing more and returns once the publishes in flight
// are answered (each within PublishBound) or its connection fails.
// It is one loop of about 130 lines on purpose: the connection, the
// window in flight and the retries are its locals, shared by the loop,
// the drop on a failed connection and the drain once stopped.
func (l *load) publisher(ctx context.Context, i int, urls []string, window int) {
	url, next := urls[0], 1 // after a failed connection: the next of urls
	defer l.pubs.Done()
	type inflight struct {
		id    int64
		data  string
		pend  *Pending
		start time.Time
	}
	var (
		w       *wsClient
		id      int64
		seq     int
		retry   []string // data to publish again, oldest first
		flight  []inflight
		backoff bool
	)
	defer func() {
		// Stopped: the publishes in flight get their answers (within the
		// bound), so that few end of unknown outcome.
		for w != nil && len(flight) > 0 {
			rctx, cancel := context.WithDeadline(context.Background(), flight[0].start.Add(PublishBound))
			f, err := w.read(rctx)
			cancel()
			if err != nil || f.ID != flight[0].id {
				break
			}
			if f.Op == "published" {
				flight[0].pend.Acked(f.Offset)
			} else {
				flight[0].pend.Failed()
			}
			flight = flight[1:]
		}
		for _, f := range flight {
			f.pend.Failed()
		}
		if w != nil {
			w.close()
		}
	}()
	drop := func() { // the connection failed: everything in flight is unknown
		l.mu.Lock()
		l.stats.Failed["closed"] += len(flight)
		l.mu.Unlock()
		for _, f := range flight {
			f.pend.Failed()
			retry = append(retry, f.data)
		}
		flight = nil
		if w != nil {
			w.close()
			w = nil
		}
		url, next = urls[next%len(urls)], next+1
		backoff = true
	}
	topic := l.topicOf(i)
	for ctx.Err() == nil {
		if backoff && !pause(ctx, retryPause) {
			return
		}
		backoff = false
		if w == nil {
			var err error
			if w, err = dialWS(ctx, url); err != nil {
				w = nil
				backoff = true
				continue
			}
		}
		// Fill the window: retries first, in order.
		for len(flight) < window && ctx.Err() == nil {
			var data string
			if len(retry) > 0 {
				data, retry = retry[0], retry[1:]
			} else {
				data = fmt.Sprintf("p%d-%d", i, seq)
				seq++
			}
			id++
			f := inflight{id: id, data: data, pend: l.h.Publish(i, topic+"/0", data, data), start: time.Now()}
			flight = append(flight, f)
			if err := w.send(ctx, map[string]any{"op": "publish", "id": id, "topic": topic, "data": data, "msg_id": data}); err != nil {
				break
			}
		}
		if w == nil || len(flight) == 0 {
			continue
		}
		// The oldest publish's answer, within the bound from its send,
		// even once the publisher is stopped: a publish abandoned then
		// would be of unknown outcome, and its record may be stored after
		// the final read (its gateway finishes it).
		head := flight[0]
		rctx, cancel := context.WithDeadline(context.Background(), head.start.Add(PublishBound))
		f, err := w.read(rctx)
		cancel()
		took := time.Since(head.start)
		if err != nil {
			if errors.Is(rctx.Err(), context.DeadlineExceeded) {
				l.violate("publisher %d: publish %s unanswered after %v", i, head.data, took.Round(time.Millisecond))
			}
			drop()
			continue
		}
		if f.ID != head.id {
			l.violate("publisher %d: answer %s %s to another request", i, f.Op, f.Code)
			drop()
			continue
		}
		flight = flight[1:]
		if f.Op == "published" {
			head.pend.Acked(f.Offset)
			l.mu.Lock()
			l.stats.Acked++
			l.ackedBy[i]++
			if f.Duplicate {
				l.stats.Duplicates++
			}
			l.stats.SlowestAck = max(l.stats.SlowestAck, took)
			l.mu.Unlock()
			select {
			case l.acks <- struct{}{}:
			default:
			}
			continue
		}
		head.pend.Failed()
		retry = append(retry, head.data)
		backoff = true
		l.mu.Lock()
		l.stats.Failed[f.Code]++
		l.stats.SlowestFailure = max(l.stats.SlowestFailure, took)
		l.mu.Unlock()
		if f.Op != "error" || f.Code != "unavailable" {
			l.violate("publisher %d: publish answered %s %s (%s)", i, f.Op, f.Code, f.Message)
		}
	}
}

// acked returns each publisher's count of acks so far.
func (l *load) acked() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.ackedBy...)
}

// waitProgress waits until every publisher has had n more publishes
// acknowledged than in base, or ctx ends.
func (l *load) waitProgress(ctx context.Context, base []int, n int) error {
	for {
		now := l.acked()
		done := true
		for i := range now {
			if now[i] < base[i]+n {
				done = false
			}
		}
		if done {
			return nil
		}
		select {
		case <-l.acks:
		case <-ctx.Done():
			return fmt.Errorf("publishers acked %v, want %d more than %v: %w", now, n, base, ctx.Err())
		}
	}
}

// subscriber subscribes to the topic on gateway url from its earliest
// record and records what it is delivered until ctx ends; it checks order
// and that every offset was delivered or reported in a gap. After a
// reconnection it subscribes from the earliest again and skips (still
// recording them) the records it had.
func (l *load) subscriber(ctx context.Context, client int, url string) {
	defer l.wg.Done()
	next := int64(0) // the offset expected next
	for ctx.Err() == nil {
		w, err := dialWS(ctx, url)
		if err != nil {
			pause(ctx, retryPause)
			continue
		}
		sub := map[string]any{"op": "subscribe", "id": 1, "pattern": l.topic, "from": "earliest"}
		seen := next // below it: records this subscriber already had
		next = 0
		if err := w.send(ctx, sub); err != nil {
			w.close()
			continue
		}
		for {
			f, err := w.read(ctx)
			if err != nil {
				break
			}
			switch f.Op {
			case "message":
				l.h.Delivered(client, l.logName(), f.Offset, f.Data)
				if f.Offset != next {
					l.violate("subscriber %d: offset %d delivered, %d expected", client, f.Offset, next)
				}
				next = f.Offset + 1
				if f.Offset < seen {
					continue
				}
				l.mu.Lock()
				l.stats.Delivered++
				l.subNext[client] = next
				l.mu.Unlock()
				select {
				case l.subMoved <- struct{}{}:
				default:
				}
			case "gap":
				if f.From != next {
					l.violate("subscriber %d: gap from %d, %d expected", client, f.From, next)
				}
				next = f.To
				l.mu.Lock()
				l.stats.Gaps++
				l.subNext[client] = max(l.subNext[client], next)
				l.mu.Unlock()
			case "subscribed":
			case "error", "unsubscribed":
				if f.Code != "unavailable" && f.Reason != "unavailable" {
					l.violate("subscriber %d: %s %s%s %s", client, f.Op, f.Code, f.Reason, f.Message)
				}
				// Refused, or its replay given up, while NATS is
				// unreachable: subscribe again.
				pause(ctx, retryPause)
				w.close()
			}
		}
		w.close()
	}
}

// waitSubscribers waits until every subscriber in clients has been
// delivered (or told of a gap for) every offset below n, or ctx ends.
func (l *load) waitSubscribers(ctx context.Context, clients []int, n int64) error {
	for {
		l.mu.Lock()
		behind := map[int]int64{}
		for _, c := range clients {
			if l.subNext[c] < n {
				behind[c] = l.subNext[c]
			}
		}
		l.mu.Unlock()
		if len(behind) == 0 {
			return nil
		}
		select {
		case <-l.subMoved:
		case <-ctx.Done():
			return fmt.Errorf("subscribers at %v of %d records: %w", behind, n, ctx.Err())
		}
	}
}

// pause waits d or until ctx ends; false if ctx ended.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
