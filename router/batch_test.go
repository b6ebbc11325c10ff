package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// batchEngine announces the records of the engine it wraps as a tail of a
// shared store does: with a context carrying an engine.Batch, whose runs
// the test ends (End), and which Close ends before the engine closes.
type batchEngine struct {
	engine.Engine
	mu  sync.Mutex   // guards b: announcements and End may come from several goroutines
	b   engine.Batch // guarded by mu
	ctx context.Context
}

func newBatchEngine(e engine.Engine) *batchEngine {
	be := &batchEngine{Engine: e}
	be.ctx = engine.WithBatch(context.Background(), &be.b)
	return be
}

func (e *batchEngine) Watch(o engine.Observer) func() {
	return e.Engine.Watch(batchShim{e: e, o: o})
}

// End ends the run of announcements.
func (e *batchEngine) End() {
	e.mu.Lock()
	e.b.End()
	e.mu.Unlock()
}

func (e *batchEngine) Close(ctx context.Context) error {
	e.End()
	return e.Engine.Close(ctx)
}

// batchShim is the wrapped engine's observer: it announces each record to
// o in the batchEngine's run.
type batchShim struct {
	e *batchEngine
	o engine.Observer
}

func (s batchShim) Appended(r *engine.Record) {
	s.e.mu.Lock()
	engine.Announce(s.e.ctx, s.o, r)
	s.e.mu.Unlock()
}

func (s batchShim) TopicDeleted(topic string) { s.o.TopicDeleted(topic) }

// messages returns the offsets of the messages in the next WebSocket
// messages the client receives, until it has n, and in how many
// WebSocket messages they came.
func (c *client) messages(t *testing.T, n int) (offsets []int64, batches int) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for len(offsets) < n {
		select {
		case data := <-c.raw:
			got := false
			for _, line := range strings.Split(string(data), "\n") {
				var m struct {
					Op     string `json:"op"`
					Offset int64  `json:"offset"`
				}
				if err := json.Unmarshal([]byte(line), &m); err != nil {
					t.Fatalf("frame %q: %v", line, err)
				}
				if m.Op == "message" {
					offsets, got = append(offsets, m.Offset), true
				}
			}
			if got {
				batches++
			}
		case <-deadline:
			t.Fatalf("%d of %d messages arrived", len(offsets), n)
		}
	}
	return offsets, batches
}

// quietFor reports whether the client receives no message within d.
func (c *client) quietFor(d time.Duration) bool {
	select {
	case data := <-c.raw:
		if strings.Contains(string(data), `"op":"message"`) {
			c.raw <- data // for messages; nothing was queued before it (the run waited for quiet)
			return false
		}
		return c.quietFor(d)
	case <-time.After(d):
		return true
	}
}

// TestEngineRunIsOneBatch: records an engine announces in one run of an
// engine.Batch reach a subscriber once the run ends, as one WebSocket
// message; records of a run still open when the engine closes reach it as
// the engine ends the run.
//
// A session's writer writes what it finds queued without a wake, so a
// writer still running after its previous write may send some of a run
// early: each run waits for the writer before it to park (20 ms without a
// message), a run counts as batched when nothing came before End and the
// whole run came as one message, and the test wants one such run of five
// tries per run length, so that a writer descheduled on a busy machine
// does not fail it. Without the deferral the first record wakes the
// writer at once, in every try.
func TestEngineRunIsOneBatch(t *testing.T) {
	var be *batchEngine
	g := newGateway(t, func(c *gwConfig) {
		c.wrap = func(e engine.Engine) engine.Engine { be = newBatchEngine(e); return be }
		// A run held open for 20 ms: only End may wake, not the bound on
		// deferred wakes (see TestEngineRunStallIsBounded).
		c.router.Session.MaxDeferredWake = time.Hour
	})
	sub := g.dial(t)
	sub.subscribe(t, "t")
	ctx := context.Background()
	var next int64
	// run publishes n records in one run, ends it after d, and reports
	// whether they came after End as one message.
	run := func(n int, d time.Duration, end func()) bool {
		t.Helper()
		from := next
		if d > 0 && !sub.quietFor(d) { // the writer of the run before parks
			t.Fatal("a message came with no run open")
		}
		for range n {
			if _, err := g.rt.Publish(ctx, engine.Message{Topic: "t", Data: fmt.Appendf(nil, "%d", next)}); err != nil {
				t.Fatal(err)
			}
			next++
		}
		quiet := d == 0 || sub.quietFor(d)
		end()
		offs, batches := sub.messages(t, n)
		for i, off := range offs {
			if off != from+int64(i) {
				t.Fatalf("offsets %v, want %d to %d", offs, from, next-1)
			}
		}
		return quiet && batches == 1
	}
	for _, n := range []int{5, 1, 12} {
		batched := false
		for try := 0; try < 5 && !batched; try++ {
			batched = run(n, 20*time.Millisecond, be.End)
		}
		if !batched {
			t.Fatalf("in five tries, a run of %d records never reached the subscriber as one batch after its End", n)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	run(3, 0, func() {
		if err := be.Close(cctx); err != nil {
			t.Fatal(err)
		}
	})
}
