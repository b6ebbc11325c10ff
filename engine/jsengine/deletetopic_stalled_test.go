package jsengine_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// storedUnder is how many messages the record stream of prefix holds on
// subjects matching filter.
func storedUnder(t *testing.T, url, prefix, filter string) uint64 {
	t.Helper()
	var n uint64
	for _, c := range recInfo(t, url, prefix, filter).State.Subjects {
		n += c
	}
	return n
}

// TestDeleteTopicOverStalledLinkLeavesNoRecords: a DeleteTopic whose
// removal from the topic bucket the link holds for a little over five
// seconds, within the call's own context of thirty, and a retry once the
// link flows again, must leave the topic either in place or gone with its
// records. The removal, cut short at the round trip's bound whatever the
// caller's context allowed, failed the call before the records were
// purged; let through when the link flowed, it removed the topic, and the
// retry answered "unknown topic": the records stayed in the record stream
// for good, with no topic and nothing left to purge them.
func TestDeleteTopicOverStalledLinkLeavesNoRecords(t *testing.T) {
	url := natstest.URL(t)
	px := newLinkProxy(t, url)
	prefix := natstest.Prefix(t, url)
	e := newNode(t, nodeOpts{url: px.URL(), prefix: prefix})
	var armed atomic.Bool
	stalled := make(chan struct{})
	e.SetBeforeTopicDelete(func() {
		if armed.CompareAndSwap(true, false) {
			px.Stall()
			close(stalled)
		}
	})
	ctx := context.Background()
	const topic = "doomed"
	for range 3 {
		if _, err := e.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"r"`)}); err != nil {
			t.Fatal(err)
		}
	}
	filter := prefix + ".rec." + topic + ".>"
	if n := storedUnder(t, url, prefix, filter); n != 3 {
		t.Fatalf("%d records stored, want 3", n)
	}

	armed.Store(true)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- e.DeleteTopic(dctx, topic) }() // ends within dctx
	<-stalled
	held := time.NewTimer(5500 * time.Millisecond)
	defer held.Stop()
	var err error
	select {
	case err = <-res:
		<-held.C
		px.Resume()
	case <-held.C:
		px.Resume()
		err = <-res
	}
	t.Logf("DeleteTopic = %v", err)
	if err != nil {
		// The caller retries what failed.
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		err = e.DeleteTopic(rctx, topic)
		rcancel()
		t.Logf("DeleteTopic again = %v", err)
	}
	if err != nil && !errors.Is(err, engine.ErrUnknownTopic) {
		t.Fatalf("DeleteTopic retried: %v", err)
	}
	if n := storedUnder(t, url, prefix, filter); n != 0 {
		t.Errorf("topic deleted (%v), %d of its records left in the record stream", err, n)
	}
}
