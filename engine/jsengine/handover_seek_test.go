package jsengine_test

// Tests of the hand-over: a Seek racing with a claim of the node's
// own that starts from its pending release.

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// seekHoldKV lets the first Update of a key starting with prefix made
// once armed (the Seek's) reach the bucket, then holds its return until
// another Update of such a key succeeds (the claim), or until bound: the
// Seek has written its offset but not yet come back to the engine.
type seekHoldKV struct {
	jetstream.KeyValue
	prefix  string
	mu      sync.Mutex
	armed   bool
	written chan struct{} // closed when the Seek's write is stored
	claimed chan struct{} // closed when a later write is stored
	bound   time.Duration
	state   int // 0 armed or not, 1 the Seek's write stored, 2 a later one
}

func (kv *seekHoldKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if !strings.HasPrefix(key, kv.prefix) {
		return kv.KeyValue.Update(ctx, key, value, last)
	}
	kv.mu.Lock()
	seek := kv.armed
	kv.armed = false
	kv.mu.Unlock()
	rev, err := kv.KeyValue.Update(ctx, key, value, last)
	kv.mu.Lock()
	defer kv.mu.Unlock()
	switch {
	case seek && err == nil:
		kv.state = 1
		close(kv.written)
		kv.mu.Unlock()
		t := time.NewTimer(kv.bound) // the fixed engine holds its claim back: do not wait for ever
		select {
		case <-kv.claimed:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		kv.mu.Lock()
	case !seek && err == nil && kv.state == 1:
		kv.state = 2
		close(kv.claimed)
	}
	return rev, err
}

// TestSeekRacingOwnClaimMoves: a member is handed back and another joins
// the same node before the release is written (the committer is held up
// by another partition's write), so the node's claim starts from its
// pending release. A Seek made on that node meanwhile must move the group:
// the claim written while the Seek is coming back must not carry the
// offset the released member had reached over the offset sought.
func TestSeekRacingOwnClaimMoves(t *testing.T) {
	url := natstest.URL(t)
	a := newNode(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: engine.GroupPolicy{AckTimeout: time.Hour}}})
	gate := newGate(a, jsengine.PositionKeyPrefix("g", "rs.b"))
	hold := &seekHoldKV{prefix: jsengine.PositionKeyPrefix("g", "rs.a"), written: make(chan struct{}), claimed: make(chan struct{}), bound: 3 * time.Second}
	a.WrapBuckets(func(kv jetstream.KeyValue) jetstream.KeyValue { hold.KeyValue = kv; return hold })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range []string{"rs.a", "rs.b"} {
		if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: name, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
	}
	m1 := joinManual(t, ctx, a, "g", "rs.*", "m1")
	appendN(t, ctx, a, "rs.a", 5)
	ackNext(t, ctx, a, "g", "m1", m1, 5)
	waitUntil(t, "the acks to be written", func() bool {
		v, err := a.StoredPosition(ctx, "g", "rs.a", 0)
		return err == nil && strings.Contains(v, `"off":5,`)
	})
	gate.armed.Store(true)
	// rs.b's record is written as an attempt before it is delivered: the
	// gate holds that write, and the committer's round with it.
	if _, err := a.Append(ctx, engine.Message{Topic: "rs.b", Data: []byte(`"b"`)}); err != nil {
		t.Fatal(err)
	}
	gate.waitBlocked(t, ctx, "rs.b's attempt")
	if err := a.HandBack(ctx, []engine.MemberRef{{Group: "g", Member: "m1"}}); err != nil {
		t.Fatalf("HandBack: %v", err)
	}
	m2 := joinManual(t, ctx, a, "g", "rs.*", "m2")
	hold.mu.Lock()
	hold.armed = true
	hold.mu.Unlock()
	sought := make(chan error, 1)
	go func() { sought <- a.Seek(ctx, "g", "rs.a", 0, engine.Start{Kind: engine.StartOffset, Offset: 2}) }()
	select {
	case <-hold.written:
	case <-ctx.Done():
		t.Fatal("the Seek was never written")
	}
	close(gate.release) // the committer goes on: m2's claim
	if err := <-sought; err != nil {
		t.Fatalf("Seek: %v", err)
	}
	if _, err := a.Append(ctx, engine.Message{Topic: "rs.a", Data: []byte(`"marker"`)}); err != nil {
		t.Fatal(err)
	}
	var first engine.Delivery
	for {
		d := m2.next(t, 20*time.Second)
		if d.Record.Topic == "rs.a" {
			first = d
			break
		}
	}
	if first.Record.Offset != 2 {
		v, _ := a.StoredPosition(ctx, "g", "rs.a", 0)
		t.Fatalf("after a Seek to 2 the next member got rs.a offset %d first (stored %s)", first.Record.Offset, v)
	}
}
