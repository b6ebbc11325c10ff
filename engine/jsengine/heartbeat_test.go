package jsengine_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestHeartbeatAfterLeave: a member that leaves while the heartbeat is
// between listing the node's members and writing their keys is not
// registered again. Before, the heartbeat's write brought the key back
// and every other node assigned partitions to a member nobody served,
// until the key expired.
func TestHeartbeatAfterLeave(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	const ttl = 1500 * time.Millisecond // heartbeat every 500 ms
	a, nc := newConnNode(t, url, prefix, engine.GroupPolicy{}, ttl)
	ctx := context.Background()
	const topic, group = "beat.leave", "workers"
	if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	c := newCollector(t)
	if _, err := a.Join(ctx, engine.JoinRequest{Group: group, Pattern: topic, Member: "m1"}, c.consumer(a, "m1")); err != nil {
		t.Fatal(err)
	}

	var (
		once     sync.Once
		leaveErr error
		calls    int
		mu       sync.Mutex
		next     = make(chan struct{}) // closed at the heartbeat after the leave
	)
	a.SetBeforeMemberBeat(func() {
		mu.Lock()
		defer mu.Unlock()
		calls++
		switch calls {
		case 1:
			once.Do(func() {
				lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				leaveErr = a.Leave(lctx, group, "m1")
			})
		case 2:
			close(next)
		}
	})
	select {
	case <-next:
	case <-time.After(10 * time.Second):
		t.Fatal("no second heartbeat within 10 s")
	}
	a.SetBeforeMemberBeat(func() {})
	mu.Lock()
	err := leaveErr
	mu.Unlock()
	if err != nil {
		t.Fatalf("Leave: %v", err)
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, prefix+"_live")
	if err != nil {
		t.Fatal(err)
	}
	// The key is looked up well within its TTL of the stale write, so a
	// key written back by the heartbeat would still be there.
	if ent, err := kv.Get(ctx, jsengine.MemberKey(group, "m1")); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("live key of the departed member after a heartbeat: %v (err %v), want not found", ent, err)
	}
}
