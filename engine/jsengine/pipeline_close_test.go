package jsengine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// TestCloseAnswersQueuedClaims: a node with pipelined batches in
// flight on several partitions (replicated stream) and a record with a
// MsgID queued behind its claim's create on another partition is closed
// before any acknowledgement comes back. Every AppendAsync must be
// answered (with the engine closed): a gateway session waits for each
// answer. failPending skips the claim's pend ("its record waits in its
// partition's queue") and then drains the batch queues one map entry at a
// time, returning at the first entry with nothing queued (a partition
// whose batch was in flight): the queued record is never answered.
func TestCloseAnswersQueuedClaims(t *testing.T) {
	e, px := stalledReplicas(t, "rvjsclose")
	ctx := t.Context()
	const plainTopics = 7
	topics := []string{"claimq"}
	for i := range plainTopics {
		topics = append(topics, fmt.Sprintf("plain%d", i))
	}
	for _, tp := range topics {
		if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: tp, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
		// Warm: the partition's state known, the claim path taken once.
		for _, id := range []string{"", "warm-" + tp} {
			if _, errs := appendAllAsync(ctx, t, e, []engine.Message{{Topic: tp, MsgID: id, Data: []byte("warm" + id)}}); len(errs) > 0 {
				t.Fatal(errs[0])
			}
		}
	}
	px.Stall() // nothing the node sends reaches NATS: no acknowledgement comes
	var (
		mu      sync.Mutex
		pending = map[string]bool{}
	)
	send := func(m engine.Message) {
		what := m.Topic + "/" + m.MsgID
		mu.Lock()
		pending[what] = true
		mu.Unlock()
		e.AppendAsync(ctx, m, func(engine.Appended, error) {
			mu.Lock()
			delete(pending, what)
			mu.Unlock()
		})
	}
	for i := range plainTopics { // a batch in flight on each, nothing queued behind it
		send(engine.Message{Topic: fmt.Sprintf("plain%d", i), Data: []byte("p")})
	}
	send(engine.Message{Topic: "claimq", MsgID: "queued", Data: []byte("q")}) // waits for its claim
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_ = e.Close(cctx) // over the stalled link its hand-back may time out: not the point
	cancel()
	px.Resume()
	// Polled, not waited on: a goroutine waiting for an answer that never
	// comes would outlive the test.
	for deadline := time.Now().Add(15 * time.Second); ; {
		mu.Lock()
		left := len(pending)
		mu.Unlock()
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("15 s after Close, appends never answered: %v", pending)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
