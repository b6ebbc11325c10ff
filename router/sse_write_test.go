//go:build !race

// Allocation counts mean nothing under the race detector, which drops
// pooled buffers at random.

package router

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/session"
)

// discardWriter is an http.ResponseWriter and Flusher that keeps nothing.
type discardWriter struct{ h http.Header }

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(int)             {}
func (w *discardWriter) Flush()                      {}

// TestSSEWriteAllocatesNothing: once a stream has seen its partitions,
// taking its frames from the queue with their positions and turning them
// into events (ids included) allocates nothing per delivery beyond what
// the same queue allocates for a WebSocket session, whatever the number of
// partitions seen; and the ids count on.
func TestSSEWriteAllocatesNothing(t *testing.T) {
	const topics = 1000
	cn := &conn{byID: map[uint64]*subscription{1: {pattern: "w.#"}}}
	r := newSSEResume(SSEOptions{}.withDefaults(), nil)
	st := r.newState("k", "e", []string{"w.#"})
	gap := func(dst []byte, _ session.Stream, _, _ int64) []byte { return dst }
	sseQ := session.NewQueue(session.Options{QueueMessages: 2 * topics, EncodeGap: gap, FramePrefix: st.prefix(cn)})
	wsQ := session.NewQueue(session.Options{QueueMessages: 2 * topics, EncodeGap: gap})
	tr := newSSETransport(&discardWriter{h: http.Header{}}, st, prometheus.NewCounter(prometheus.CounterOpts{Name: "x"}), 0)
	frame := []byte(`{"op":"message","pattern":"w.#","topic":"w.x","partition":0,"offset":1,"data":1}`)
	topicNames := make([]string, topics)
	for i := range topicNames {
		topicNames[i] = "w." + strings.Repeat("t", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
	}
	var buf []byte
	round := func(q *session.Queue, write bool, off int64) {
		for _, tn := range topicNames {
			q.Push(session.Item{Frame: frame, Stream: session.Stream{Sub: 1, Topic: tn}, Offset: off})
		}
		for {
			var n int
			buf, n = q.AppendBatch(buf[:0], 64<<10)
			if n == 0 {
				return
			}
			if !write {
				continue
			}
			if err := tr.write(context.Background(), buf); err != nil {
				t.Fatal(err)
			}
		}
	}
	round(wsQ, false, 0)
	round(sseQ, true, 0) // the stream sees its partitions
	off := int64(1)
	ws := testing.AllocsPerRun(5, func() { round(wsQ, false, off); off++ })
	sse := testing.AllocsPerRun(5, func() { round(sseQ, true, off); off++ })
	// Growing the undo ring and a pooled buffer are amortised; per
	// delivery there is nothing.
	if (sse-ws)/topics > 0.01 {
		t.Fatalf("a round of %d deliveries allocates %.0f times for SSE, %.0f for WebSocket", topics, sse, ws)
	}
	if want := uint64(1 + 1 + 5); st.seq != want*topics {
		t.Fatalf("the last id is %d, want %d", st.seq, want*topics)
	}
}
