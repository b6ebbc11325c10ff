package router_test

import (
	"context"
	"encoding/hex"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestMQTTPersistentSessionSweptWhileLive: gateway b loses sight of
// gateway a in the membership (a's live key removed, again until b's
// sweep has removed the record) while a's MQTT 5 connection holds its
// persistent session (expiry 1 s). The removal is no takeover: the
// connection runs on, a puts the record back under the connection, and
// the connection's next SUBSCRIBE saves every subscription in it.
func TestMQTTPersistentSessionSweptWhileLive(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	a := newJSGatewaySweep(t, url, prefix, time.Hour)
	b := newJSGatewaySweep(t, url, prefix, 20*time.Millisecond)
	const id = "sw-persist"
	tc := dialTaken(t, a, id, false, 1)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if _, err := tc.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "sw/one", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	st := b.eng.(engine.MQTTSessionStore)
	rec, ok, err := st.LoadMQTTSession(ctx, id, time.Now())
	if err != nil || !ok || rec.IsHold() {
		t.Fatalf("no persistent session stored for the live connection (%+v, %v, %v)", rec, ok, err)
	}
	owner := rec.Owner

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sessions, err := js.KeyValue(ctx, prefix+"_mqtt_sessions")
	if err != nil {
		t.Fatal(err)
	}
	w, err := sessions.Watch(ctx, hex.EncodeToString([]byte(id)), jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = w.Stop() }()
	live, err := js.KeyValue(ctx, prefix+"_live")
	if err != nil {
		t.Fatal(err)
	}
	node := a.eng.(engine.Nodes).NodeID()
	// a's heartbeat puts its key back every MemberTTL/3: removed again
	// until b's sweep (after the expiry, 1 s) removes the record.
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	removed := false
	for i := 0; !removed && i < int(waitTimeout/(200*time.Millisecond)); i++ {
		if err := live.Delete(ctx, "n."+node); err != nil {
			t.Fatal(err)
		}
		select {
		case ent := <-w.Updates():
			removed = ent != nil && ent.Operation() != jetstream.KeyValuePut
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	if !removed {
		t.Fatal("b's sweep did not remove the live connection's session")
	}
	select {
	case ent := <-w.Updates():
		if ent == nil || ent.Operation() != jetstream.KeyValuePut {
			t.Fatalf("after the removal: %+v, want the record put back", ent)
		}
	case rc := <-tc.disc:
		t.Fatalf("the live connection was ended with DISCONNECT %#x though no connection claimed its client id", rc)
	case <-ctx.Done():
		t.Fatal("the removed record was not put back")
	}
	if _, err := tc.c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "sw/two", QoS: 1}}}); err != nil {
		t.Fatalf("subscribe after the removal: %v", err)
	}
	rec, ok, err = st.LoadMQTTSession(ctx, id, time.Now())
	if err != nil || !ok || rec.Owner != owner || len(rec.Subs) != 2 {
		t.Fatalf("after the SUBSCRIBE: %+v (found %v, %v), want the connection's session with both subscriptions", rec, ok, err)
	}
	select {
	case rc := <-tc.disc:
		t.Fatalf("the live connection was ended with DISCONNECT %#x", rc)
	default:
	}
}
