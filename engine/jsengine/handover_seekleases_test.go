package jsengine_test

// Tests of the hand-over: the leases a held position carries past
// its window after a Seek.

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestSeekOnHolderResetsAttemptsPastWindow: attempts before a Seek do not
// count. A Seek on the node holding the partition, made while a write of
// its position is under way, must not let that write's leases (of records
// past the window the Seek starts) come back: the records delivered again
// after the Seek come with attempt 1.
func TestSeekOnHolderResetsAttemptsPastWindow(t *testing.T) {
	const n, window = 6, 3
	url := natstest.URL(t)
	a := newNode(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: engine.GroupPolicy{AckTimeout: time.Hour}}})
	gate := newGate(a, jsengine.PositionKeyPrefix("g", "sl"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: "sl", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	m1 := newManual()
	if _, err := a.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "sl", Member: "m1", MaxInFlight: window}, m1); err != nil {
		t.Fatal(err)
	}
	appendN(t, ctx, a, "sl", n)
	// 0..2 acked; 3..5 leased (attempt 1), their leases written.
	for range n {
		d := m1.next(t, 20*time.Second)
		if d.Record.Offset < window {
			if err := a.Ack(ctx, "g", "m1", posOf(d.Record)); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitUntil(t, "the leases to be written", func() bool {
		v, err := a.StoredPosition(ctx, "g", "sl", 0)
		return err == nil && strings.Contains(v, `"off":3,`) && strings.Contains(v, `{"o":5,"a":1}`)
	})
	gate.armed.Store(true)
	if err := a.Ack(ctx, "g", "m1", engine.Position{Topic: "sl", Offset: 3}); err != nil {
		t.Fatal(err)
	}
	gate.waitBlocked(t, ctx, "the write of the ack") // it carries the leases of 4 and 5
	if err := a.Seek(ctx, "g", "sl", 0, engine.Start{Kind: engine.StartOffset, Offset: 0}); err != nil {
		t.Fatalf("Seek: %v", err)
	}
	close(gate.release)
	for want := int64(0); want < n; want++ {
		d := m1.next(t, 20*time.Second)
		if d.Record.Offset != want || d.Attempt != 1 {
			v, _ := a.StoredPosition(ctx, "g", "sl", 0)
			t.Fatalf("after a Seek to 0 got offset %d attempt %d, want offset %d attempt 1 (stored %s)", d.Record.Offset, d.Attempt, want, v)
		}
		if err := a.Ack(ctx, "g", "m1", posOf(d.Record)); err != nil {
			t.Fatal(err)
		}
	}
}
