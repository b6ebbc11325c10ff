package jsengine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// holeRecords is how many records the hole tests lease at once: the first
// stays unacked (the hole), the others are acked above it.
const holeRecords = 10

// leaveAHole appends holeRecords records to a one-partition topic, has
// member on e take them all (the group's window holds them all) and acks
// every one but offset 0.
func leaveAHole(t *testing.T, e *jsengine.Engine, topic, group, member string) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	mc := newManual()
	if _, err := e.Join(ctx, engine.JoinRequest{Group: group, Pattern: topic, Member: member, MaxInFlight: holeRecords}, mc); err != nil {
		t.Fatal(err)
	}
	for i := range holeRecords {
		if _, err := e.Append(ctx, engine.Message{Topic: topic, Data: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	for range holeRecords {
		d := mc.next(t, 20*time.Second)
		if d.Record.Offset == 0 {
			continue // the hole: leased, never acked
		}
		if err := e.Ack(ctx, group, member, posOf(d.Record)); err != nil {
			t.Fatalf("ack %d: %v", d.Record.Offset, err)
		}
	}
}

// takeOver joins member on e, appends a marker record and settles what
// the member gets until the marker comes, failing the test for every
// record acked above the hole that is delivered again. Offset 0, never
// acked, must come again, with its attempt counted on.
func takeOver(t *testing.T, e *jsengine.Engine, topic, group, member string) {
	t.Helper()
	ctx := context.Background()
	mc := newManual()
	if _, err := e.Join(ctx, engine.JoinRequest{Group: group, Pattern: topic, Member: member, MaxInFlight: holeRecords}, mc); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"marker"`)}); err != nil {
		t.Fatal(err)
	}
	var again []int64
	hole := false
	for marker := false; !marker || !hole; {
		d := mc.next(t, 20*time.Second)
		switch off := d.Record.Offset; {
		case off == holeRecords:
			marker = true
		case off == 0:
			hole = true
			if d.Attempt != 2 {
				t.Errorf("the unacked record came again with attempt %d, want 2", d.Attempt)
			}
		default:
			again = append(again, off)
		}
		if err := e.Ack(ctx, group, member, posOf(d.Record)); err != nil {
			t.Fatalf("ack %d: %v", d.Record.Offset, err)
		}
	}
	if len(again) > 0 {
		t.Errorf("%d records acked above an unacked one were delivered again: offsets %v", len(again), again)
	}
	waitUntil(t, "the group to commit every record", func() bool {
		info, err := e.Group(ctx, group)
		return err == nil && len(info.Partitions) == 1 && info.Partitions[0].Committed == holeRecords+1
	})
}

// TestCloseKeepsAcksAboveAHole: a node that closes while a record is
// leased below acked ones hands the partition back with those acks; the
// node that takes it over after a reopen delivers the unacked record
// again and none of the acked ones. Also when the member was handed back
// just before Close, as a gateway shutting down does (the release that
// HandBack queued for the committer, whose write fails here, is written
// by Close), and when the committer wrote the position once more after
// Close read its revision (Close's write meets a newer revision of its
// own node and is written over it).
func TestCloseKeepsAcksAboveAHole(t *testing.T) {
	for _, tc := range []struct {
		name            string
		handBack, stale bool
	}{{"Close", false, false}, {"HandBackThenClose", true, false}, {"CloseAfterACommitterWrite", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			url := natstest.URL(t)
			o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: engine.GroupPolicy{AckTimeout: time.Hour}}}
			a := newNode(t, o)
			kv := &testKV{refuse: new(atomic.Bool), stale: new(atomic.Bool), refused: make(chan struct{}, 1)}
			a.WrapBuckets(func(b jetstream.KeyValue) jetstream.KeyValue {
				return &testKV{KeyValue: b, refuse: kv.refuse, stale: kv.stale, refused: kv.refused}
			})
			leaveAHole(t, a, "hole", "g", "m1")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if tc.handBack {
				kv.refuse.Store(true)
				if err := a.HandBack(ctx, []engine.MemberRef{{Group: "g", Member: "m1"}}); err != nil {
					t.Fatalf("HandBack: %v", err)
				}
				select {
				case <-kv.refused:
				case <-ctx.Done():
					t.Fatal("the release was never written")
				}
				kv.refuse.Store(false)
			}
			kv.stale.Store(tc.stale)
			if err := a.Close(ctx); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if tc.stale && kv.stale.Load() {
				t.Fatal("Close wrote no position")
			}
			takeOver(t, newNode(t, o), "hole", "g", "m1")
		})
	}
}

// TestHandBackKeepsAcksAboveAHole: a partition that moves to a member on
// another node (its member on this node leaves, the node stays up) is
// released with the acks above its unacked record; the other node
// delivers none of them again.
func TestHandBackKeepsAcksAboveAHole(t *testing.T) {
	url := natstest.URL(t)
	a, b := twoNodes(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: engine.GroupPolicy{AckTimeout: time.Hour}}})
	leaveAHole(t, a, "hole", "g", "m1")
	if err := a.Leave(context.Background(), "g", "m1"); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	takeOver(t, b, "hole", "g", "m2")
}

// testKV fails every Update while refuse is set, telling refused; with
// stale set, the next Update of a position first writes the stored value
// again, as a committer round under way would, so the Update meets a newer
// revision than the one it names.
type testKV struct {
	jetstream.KeyValue
	refuse, stale *atomic.Bool
	refused       chan struct{}
}

func (kv *testKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if kv.refuse.Load() {
		select {
		case kv.refused <- struct{}{}:
		default:
		}
		return 0, errors.New("refused by the test")
	}
	if strings.HasPrefix(key, "c.") && kv.stale.CompareAndSwap(true, false) {
		ent, err := kv.KeyValue.Get(ctx, key)
		if err != nil {
			return 0, err
		}
		if _, err := kv.KeyValue.Update(ctx, key, ent.Value(), last); err != nil {
			return 0, err
		}
	}
	return kv.KeyValue.Update(ctx, key, value, last)
}
