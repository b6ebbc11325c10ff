package router_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestMQTTHoldSweptEndsLiveConnection: gateway a is alive and its
// clean MQTT 5 client connected; gateway b loses sight of a in the
// membership for a moment (a's live key gone, as after a pause longer
// than MemberTTL; a's heartbeat puts it back). Nothing claims the client
// id, yet b's sweeps remove the hold of a's connection (a hold's expiry is
// 0), and a's watcher, told of the removal, ends the live connection with
// DISCONNECT 0x8E "session taken over".
func TestMQTTHoldSweptEndsLiveConnection(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	a := newJSGatewaySweep(t, url, prefix, time.Hour)
	b := newJSGatewaySweep(t, url, prefix, 20*time.Millisecond)
	tc := dialTaken(t, a, "rv2-hold", true, 0)
	st := b.eng.(engine.MQTTSessionStore)
	if _, ok, err := st.LoadMQTTSession(context.Background(), "rv2-hold", time.Now()); err != nil || !ok {
		t.Fatalf("no hold stored for the live connection (%v, %v)", ok, err)
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
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	kv, err := js.KeyValue(ctx, prefix+"_live")
	if err != nil {
		t.Fatal(err)
	}
	node := a.eng.(engine.Nodes).NodeID()
	if err := kv.Delete(ctx, "n."+node); err != nil {
		t.Fatal(err)
	}

	select {
	case rc := <-tc.disc:
		t.Fatalf("gateway a's live connection was ended with DISCONNECT %#x though no connection claimed its client id (its hold was swept by gateway b)", rc)
	case <-time.After(2 * time.Second):
	}
	if _, ok, err := st.LoadMQTTSession(context.Background(), "rv2-hold", time.Now()); err != nil || !ok {
		t.Fatalf("the live connection's hold was removed (%v, %v)", ok, err)
	}
}
