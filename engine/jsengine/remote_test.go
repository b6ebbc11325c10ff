package jsengine_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestAckThroughLaggingNode: a delivery is nacked, then its redelivery
// acked, through a node whose group watcher has not yet applied the
// holder's claim (held here; on a loaded machine it lags by itself, and
// TestAckOnAnyNode then failed): the settles still reach the holder,
// which finds the bucket's position naming it before the delivery.
func TestAckThroughLaggingNode(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	policy := engine.GroupPolicy{BackoffMin: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond}
	a, b := twoNodes(t, nodeOpts{url: url, prefix: prefix, c: enginetest.Config{Policy: policy}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const topic = "lagging"
	if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Topic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	// b's watcher applies group definitions but no position.
	held := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(held) }) }
	defer release()
	b.SetBeforeGroupEvent(func(key string) {
		if strings.HasPrefix(key, "c.") {
			<-held
		}
	})
	mc := newManual()
	if _, err := a.Join(ctx, engine.JoinRequest{Group: "g", Pattern: topic, Member: "m0"}, mc); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "b to know the group", func() bool {
		_, err := b.Group(ctx, "g")
		return err == nil
	})
	if _, err := a.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"x"`)}); err != nil {
		t.Fatal(err)
	}
	d := mc.next(t, 10*time.Second)
	pos := posOf(d.Record)
	if err := b.Nack(ctx, "g", "m0", pos, "through b"); err != nil {
		t.Fatalf("Nack through the lagging node: %v", err)
	}
	if d = mc.next(t, 10*time.Second); posOf(d.Record) != pos || d.Attempt != 2 {
		t.Fatalf("redelivered %v attempt %d, want %v attempt 2", posOf(d.Record), d.Attempt, pos)
	}
	if err := b.Ack(ctx, "g", "m0", pos); err != nil {
		t.Fatalf("Ack through the lagging node: %v", err)
	}
	if err := b.Ack(ctx, "g", "m0", pos); !errors.Is(err, engine.ErrNotInFlight) {
		t.Errorf("a second ack through the lagging node: %v, want ErrNotInFlight", err)
	}
	release()
	waitUntil(t, "the ack committed", func() bool {
		info, err := b.Group(ctx, "g")
		return err == nil && len(info.Partitions) == 1 && info.Partitions[0].Committed == 1
	})
}
