package jsengine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestOtherSessionsCancelFailsBatch: node A queues x (MsgID), p1
// and p2 (no MsgID, two sessions) into one partition of a replicated
// stream; before A's batch is published, node B stores x (a retry through
// another gateway) and p1's session goes away (its context canceled).
// A's batch is refused for x, x is answered as B's duplicate, and p1 and
// p2 are batched again after it, the partition's state to be reloaded
// (requeueClaimed) with the first record's context: p1's, canceled. p2,
// whose session is alive and whose append nothing refused, must be
// stored; it fails with p1's cancellation.
func TestOtherSessionsCancelFailsBatch(t *testing.T) {
	c := natstest.NewCluster(t, 3)
	nodes := replicaNodes(t, c, "rvjsctx", 2)
	a, b := nodes[0], nodes[1]
	const topic = "ctx"
	if _, err := a.CreateTopic(t.Context(), engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a.SetBeforeBatchSend(func() {
		once.Do(func() {
			close(held)
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
		})
	})
	ctx1, cancel1 := context.WithCancel(t.Context())
	defer cancel1()
	msgs := []struct {
		ctx context.Context
		m   engine.Message
	}{
		{t.Context(), engine.Message{Topic: topic, MsgID: "x", Data: []byte("A x")}},
		{ctx1, engine.Message{Topic: topic, Data: []byte("p1")}},
		{t.Context(), engine.Message{Topic: topic, Data: []byte("p2")}},
	}
	got := make([]engine.Appended, len(msgs))
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	wg.Add(len(msgs))
	for i, m := range msgs {
		a.AppendAsync(m.ctx, m.m, func(r engine.Appended, err error) {
			got[i], errs[i] = r, err
			wg.Done()
		})
	}
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("A's first batch was never sent")
	}
	_, err := b.Append(t.Context(), engine.Message{Topic: topic, MsgID: "x", Data: []byte("B x")})
	cancel1()
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	waitGroup(t, &wg)
	t.Logf("x: %+v %v; p1: %+v %v", got[0], errs[0], got[1], errs[1])
	if errs[2] != nil {
		t.Errorf("p2 (its session alive): %v, want stored", errs[2])
	}
}
