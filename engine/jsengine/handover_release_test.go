package jsengine_test

// Tests of the hand-over: a release whose write meets a conflict
// and then a failed read.

import (
	"context"
	"errors"
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

// conflictKV, once armed, answers the next Update of a key starting with
// prefix with a conflict (as when another node wrote the key meanwhile)
// without writing it, and the Get that follows with a failure (as in a
// NATS blip); then it passes everything through.
type conflictKV struct {
	jetstream.KeyValue
	prefix string
	armed  *atomic.Bool
	failed *atomic.Bool // the Update was refused: fail the next Get
}

func (kv *conflictKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if strings.HasPrefix(key, kv.prefix) && kv.armed.CompareAndSwap(true, false) {
		kv.failed.Store(true)
		return 0, jetstream.ErrKeyExists
	}
	return kv.KeyValue.Update(ctx, key, value, last)
}

func (kv *conflictKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if strings.HasPrefix(key, kv.prefix) && kv.failed.CompareAndSwap(true, false) {
		return nil, errors.New("the read failed")
	}
	return kv.KeyValue.Get(ctx, key)
}

// TestReleaseAfterConflictAndFailedRead: a node whose member leaves
// releases the partition to another node's member. When the release meets
// a conflict and the read that follows fails, the node must still write
// its release (after a pause), or the other node, which waits for a live
// holder to release, never delivers the partition again.
func TestReleaseAfterConflictAndFailedRead(t *testing.T) {
	url := natstest.URL(t)
	o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: engine.GroupPolicy{AckTimeout: time.Hour}}}
	a, b := twoNodes(t, o)
	armed := new(atomic.Bool)
	a.WrapBuckets(func(kv jetstream.KeyValue) jetstream.KeyValue {
		return &conflictKV{KeyValue: kv, prefix: jsengine.PositionKeyPrefix("g", "st"), armed: armed, failed: new(atomic.Bool)}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: "st", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	m1 := joinManual(t, ctx, a, "g", "st", "m1")
	appendN(t, ctx, a, "st", 3)
	ackNext(t, ctx, a, "g", "m1", m1, 2)
	m1.next(t, 20*time.Second) // offset 2: leased, never acked
	waitUntil(t, "the acks to be written", func() bool {
		v, err := b.StoredPosition(ctx, "g", "st", 0)
		return err == nil && strings.Contains(v, `"off":2,`)
	})
	m2 := joinManual(t, ctx, b, "g", "st", "m2")
	waitUntil(t, "a to see m2", func() bool {
		info, err := a.Group(ctx, "g")
		return err == nil && len(info.Members) == 2
	})
	armed.Store(true) // a's release meets a conflict, then a failed read
	if err := a.Leave(ctx, "g", "m1"); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	if d := m2.next(t, 20*time.Second); d.Record.Offset != 2 || d.Attempt != 2 {
		t.Fatalf("m2 got offset %d attempt %d, want offset 2 attempt 2", d.Record.Offset, d.Attempt)
	}
}
