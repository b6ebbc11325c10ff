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

// TestClaimOvertakenKeepsAcksAboveAHole: a node whose member stops owning
// a partition while the node's claim on it is being written (the member
// leaves, or a gateway shutting down hands it back, as happens while
// gateways restart one at a time) releases the partition as soon as the
// claim lands. That release must carry what the claim read (the leases and
// the acks above the unacked record); the node that takes the partition
// over then delivers the unacked record again, with its attempt counted
// on, and none of the acked ones.
func TestClaimOvertakenKeepsAcksAboveAHole(t *testing.T) {
	for _, tc := range []struct {
		name     string
		handBack bool
	}{{"Leave", false}, {"HandBack", true}} {
		t.Run(tc.name, func(t *testing.T) {
			url := natstest.URL(t)
			o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: engine.GroupPolicy{AckTimeout: time.Hour}}}
			a := newNode(t, o)
			b := newNode(t, o)
			gate := &gateKV{armed: new(atomic.Bool), blocked: make(chan struct{}), release: make(chan struct{})}
			b.WrapBuckets(func(kv jetstream.KeyValue) jetstream.KeyValue {
				return &gateKV{KeyValue: kv, armed: gate.armed, blocked: gate.blocked, release: gate.release}
			})
			leaveAHole(t, a, "hole", "g", "m1")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// m2 on b: m1 still owns the only partition.
			if _, err := b.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "hole", Member: "m2", MaxInFlight: holeRecords}, newManual()); err != nil {
				t.Fatal(err)
			}
			gate.armed.Store(true) // b's next position write, its claim, waits
			if err := a.Leave(ctx, "g", "m1"); err != nil {
				t.Fatalf("Leave m1: %v", err)
			}
			select {
			case <-gate.blocked:
			case <-ctx.Done():
				t.Fatal("b never claimed the partition")
			}
			var err error
			if tc.handBack {
				err = b.HandBack(ctx, []engine.MemberRef{{Group: "g", Member: "m2"}})
			} else {
				err = b.Leave(ctx, "g", "m2")
			}
			if err != nil {
				t.Fatalf("m2 going: %v", err)
			}
			before, err := a.StoredPosition(ctx, "g", "hole", 0) // a's release
			if err != nil {
				t.Fatal(err)
			}
			close(gate.release) // the claim lands after m2 went
			// b releases the partition it just claimed.
			var released string
			waitUntil(t, "b to release the partition it claimed", func() bool {
				released, err = a.StoredPosition(ctx, "g", "hole", 0)
				return err == nil && released != before && !strings.Contains(released, `"holder"`)
			})
			t.Logf("released by a: %s", before)
			t.Logf("released by b: %s", released)
			takeOver(t, a, "hole", "g", "m3")
		})
	}
}

// gateKV holds back the first Update of a group position once armed,
// telling blocked, until release is closed.
type gateKV struct {
	jetstream.KeyValue
	armed   *atomic.Bool
	blocked chan struct{}
	release chan struct{}
}

func (kv *gateKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if strings.HasPrefix(key, "c.") && kv.armed.CompareAndSwap(true, false) {
		close(kv.blocked)
		select {
		case <-kv.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return kv.KeyValue.Update(ctx, key, value, last)
}
