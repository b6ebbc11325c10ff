package jsengine_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// holder counts its deliveries, remembers the last and acks nothing.
type holder struct {
	n    atomic.Int64
	last atomic.Pointer[engine.Delivery]
}

func (h *holder) Deliver(d engine.Delivery)               { h.n.Add(1); h.last.Store(&d) }
func (*holder) Skipped(string, string, int, int64, int64) {}

// TestAppendCostOfFullWindows: groups whose members hold a full window and
// never ack (abandoned pull members, say) cost an append what idle groups
// cost: nothing measurable. A member of them that acks gets the next
// record.
func TestAppendCostOfFullWindows(t *testing.T) {
	const groups, window = 500, 5
	url := natstest.URL(t)
	e := newNode(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url)})
	ctx := context.Background()
	for _, name := range []string{"none", "full"} {
		if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: name, MaxMessages: 1 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	members := make([]*holder, groups)
	for i := range members {
		members[i] = &holder{}
		if _, err := e.Join(ctx, engine.JoinRequest{Group: fmt.Sprintf("g%d", i), Pattern: "full", Member: "m", MaxInFlight: window}, members[i]); err != nil {
			t.Fatal(err)
		}
	}
	for range window {
		if _, err := e.Append(ctx, engine.Message{Topic: "full"}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < groups; {
		if members[i].n.Load() == window {
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("member %d got %d records, want its window %d", i, members[i].n.Load(), window)
		}
		time.Sleep(5 * time.Millisecond) // deliveries follow bucket writes
	}
	none, full := appendCosts(t, e, "none", "full", 100)
	ratio := float64(full) / float64(none)
	t.Logf("append: %v with no group, %v with %d groups of full windows (%.2f×)", none, full, groups, ratio)
	// Twice leaves room for a loaded machine; a cost per group is many
	// times that.
	if ratio > 2 {
		t.Errorf("an append costs %.1f× with %d groups of full windows; want within 2× of none", ratio, groups)
	}
	m := members[0]
	before := m.n.Load()
	if err := e.Ack(ctx, "g0", "m", engine.Position{Topic: "full", Offset: m.last.Load().Record.Offset}); err != nil {
		t.Fatal(err)
	}
	for m.n.Load() == before {
		if time.Now().After(deadline.Add(30 * time.Second)) {
			t.Fatal("an ack of a member of a full window brought no further record")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// appendCosts returns the least time one append took to each of two
// topics, over interleaved rounds of n appends.
func appendCosts(t *testing.T, e *jsengine.Engine, a, b string, n int) (time.Duration, time.Duration) {
	t.Helper()
	ctx := context.Background()
	round := func(topic string) time.Duration {
		start := time.Now()
		for range n {
			if _, err := e.Append(ctx, engine.Message{Topic: topic}); err != nil {
				t.Fatal(err)
			}
		}
		return time.Since(start) / time.Duration(n)
	}
	bestA, bestB := time.Duration(1<<63-1), time.Duration(1<<63-1)
	for range 5 {
		bestA = min(bestA, round(a))
		bestB = min(bestB, round(b))
	}
	return bestA, bestB
}
