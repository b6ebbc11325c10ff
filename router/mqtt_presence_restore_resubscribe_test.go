package router_test

// A persistent MQTT session restored with its presence filters, whose
// client then subscribes to the same filters again with presence=true (as
// clients that subscribe on every connect do): the filters are the
// session's already, in the presence set already.

import (
	"context"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/switchyard/switchyard/engine"
)

// subscribePresenceAll subscribes filters at QoS 1 in one SUBSCRIBE with
// presence=true and returns the reason codes.
func subscribePresenceAll(t *testing.T, c *paho.Client, filters ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	subs := make([]paho.SubscribeOptions, len(filters))
	for i, f := range filters {
		subs[i] = paho.SubscribeOptions{Topic: f, QoS: 1}
	}
	sa, err := c.Subscribe(ctx, &paho.Subscribe{
		Properties:    &paho.SubscribeProperties{User: paho.UserProperties{{Key: "presence", Value: "true"}}},
		Subscriptions: subs})
	if sa == nil || len(sa.Reasons) != len(filters) {
		t.Fatalf("SUBACK %v, %v", sa, err) // err also when a filter is refused: the codes tell
	}
	return sa.Reasons
}

// TestPresenceRestoreResubscribeBurst: a connection may join as many
// presence sets at once as the join burst. A session restored with two
// presence filters, on a node whose burst is 2, subscribes to them again
// with presence: the SUBACK must grant both, as it does for a fresh
// connection (and did before restored filters joined), and the filters
// must go on delivering.
func TestPresenceRestoreResubscribeBurst(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.router.Presence.JoinRate, c.router.Presence.JoinBurst = 0.001, 2 // two joins per connection
	})
	c, _ := dialSession(t, g, 5, "tcp", "rvpb-1", false, 600)
	if rc := subscribePresenceAll(t, c.v5, "rvpb/1", "rvpb/2"); rc[0] != 1 || rc[1] != 1 {
		t.Fatalf("first SUBACK %v: want both granted at QoS 1 (burst 2)", rc)
	}
	c.leave(t, g, "rvpb-1")

	c2, present := dialSession(t, g, 5, "tcp", "rvpb-1", false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	rc := subscribePresenceAll(t, c2.v5, "rvpb/1", "rvpb/2")
	if rc[0] != 1 || rc[1] != 1 {
		t.Errorf("SUBACK %#v after the session was restored: want both filters granted at QoS 1 "+
			"(the same SUBSCRIBE a fresh connection gets granted with burst 2; the restore spent the burst)", rc)
	}
	// The SUBSCRIBE saved the session before its SUBACK.
	rec, ok, err := g.eng.(engine.MQTTSessionStore).LoadMQTTSession(context.Background(), "rvpb-1", time.Now())
	if err != nil || !ok {
		t.Fatalf("stored session: %v %v", ok, err)
	}
	if len(rec.Subs) != 2 {
		t.Errorf("stored filters %+v after the SUBSCRIBE: want rvpb/1 and rvpb/2, which the session held", rec.Subs)
	}
	if t.Failed() {
		return
	}
	pub, _ := dialSession(t, g, 5, "tcp", "rvpb-pub", true, 0)
	pub.publish(t, "rvpb/1", 1, "one")
	pub.publish(t, "rvpb/2", 1, "two")
	c2.expectPayloads(t, "one", "two")
}
