package jsengine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestMQTTSessionHeldByLostNode: a session held (no expiry time) by a node
// that is gone is removed by another node's sweeps once the node has been
// gone for the session's expiry; one held by a live node stays.
func TestMQTTSessionHeldByLostNode(t *testing.T) {
	url := natstest.URL(t)
	a, b := twoNodes(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range []engine.MQTTSession{
		{ClientID: "held-a", Owner: "o1", Node: a.NodeID(), Claim: true, Expiry: 50 * time.Millisecond},
		{ClientID: "held-b", Owner: "o2", Node: b.NodeID(), Claim: true},
	} {
		if err := a.SaveMQTTSession(ctx, s, engine.MQTTSessionLimits{}); err != nil {
			t.Fatal(err)
		}
	}
	if n, _, err := b.ExpireMQTTSessions(ctx, time.Now()); err != nil || n != 0 {
		t.Fatalf("expired %d (%v) while both nodes are live", n, err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	removed := 0
	for i := 0; removed == 0; i++ {
		if i > 500 {
			t.Fatal("the session held by the closed node never expired")
		}
		n, _, err := b.ExpireMQTTSessions(ctx, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		removed += n
		time.Sleep(10 * time.Millisecond) // sweeps are periodic; the node's absence is timed
	}
	if _, ok, err := b.LoadMQTTSession(ctx, "held-a", time.Now()); err != nil || ok {
		t.Fatalf("held-a still stored (%v, %v)", ok, err)
	}
	if _, ok, err := b.LoadMQTTSession(ctx, "held-b", time.Now()); err != nil || !ok {
		t.Fatalf("held-b, held by a live node, removed (%v, %v)", ok, err)
	}
}

// TestMQTTSessionSweepMakesNoBucket: the sweep of expired sessions, which
// every gateway runs, finds nothing to do on a deployment that never
// stored a session, and makes no bucket for it (it made a three-replica
// bucket and its watcher on every JetStream gateway a minute after start:
// the cluster torture's baseline check saw its 40 goroutines).
func TestMQTTSessionSweepMakesNoBucket(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	e := newNode(t, nodeOpts{url: url, prefix: prefix})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if n, stored, err := e.ExpireMQTTSessions(ctx, time.Now()); err != nil || n != 0 || stored != 0 {
		t.Fatalf("sweep: %d expired, %d stored, %v; want nothing", n, stored, err)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.KeyValue(ctx, prefix+"_mqtt_sessions"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Fatalf("after a sweep the session bucket: %v, want not found", err)
	}
	// Once a session is stored, the sweep reads the bucket.
	if err := e.SaveMQTTSession(ctx, engine.MQTTSession{ClientID: "s1", Owner: "o1", Claim: true, Expiry: time.Minute}, engine.MQTTSessionLimits{}); err != nil {
		t.Fatal(err)
	}
	if _, stored, err := e.ExpireMQTTSessions(ctx, time.Now()); err != nil || stored != 1 {
		t.Fatalf("sweep after a save: %d stored, %v; want 1", stored, err)
	}
}
