package jsengine_test

// Tests of the hand-over of a group partition between nodes: claims and
// releases racing with members coming and going, Close and Seek.

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

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
