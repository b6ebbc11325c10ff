package jsengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestLiveGroupFetchesNothing: a group keeping up with the head of its
// partition gets every record from this node's tail. An append makes the
// record's offset known before the tail has it; a pump in that moment (an
// ack arriving) must wait for the tail, which pumps the cursor, rather
// than fetch the record from NATS. (The partition's first record, before
// the tail has announced any, may still be fetched.)
func TestLiveGroupFetchesNothing(t *testing.T) {
	url := natstest.URL(t)
	e := newNode(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url)})
	ctx := context.Background()
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: "head", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	mc := newManual()
	if _, err := e.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "head", Member: "m", MaxInFlight: 64}, mc); err != nil {
		t.Fatal(err)
	}
	// Until the tail has announced a record of the partition, the engine
	// cannot tell that the tail will bring the next one, and a pump in
	// that moment may fetch the first record. Past the first, none.
	if _, err := e.Append(ctx, engine.Message{Topic: "head", Data: []byte(`0`)}); err != nil {
		t.Fatal(err)
	}
	if got := ackAll(t, e, mc, "g", "m", 1, 30*time.Second); got != 1 {
		t.Fatal("the first record was not delivered")
	}
	first := e.GroupFetches()
	const n = 300
	errc := make(chan error, 1)
	go func() { // appends n records, then exits
		for range n {
			if _, err := e.Append(ctx, engine.Message{Topic: "head", Data: []byte(`1`)}); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	if got := ackAll(t, e, mc, "g", "m", n, 30*time.Second); got != n {
		t.Fatalf("acked %d of %d records", got, n)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if f := e.GroupFetches() - first; f != 0 {
		t.Errorf("%d fetches from NATS for a group at the head, want 0", f)
	}
}
