package router_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
)

// slowRetained is the memory engine with a slow read of the retained
// store, as a JetStream round trip under load is.
type slowRetained struct {
	*memengine.Engine
	delay time.Duration
}

func (e slowRetained) Retained(ctx context.Context, pattern string, fn func(engine.RetainedMessage) bool) error {
	select {
	case <-time.After(e.delay):
	case <-ctx.Done():
		return ctx.Err()
	}
	return e.Engine.Retained(ctx, pattern, fn)
}

// TestMQTTRetainedReadBeforeSuback: a retained message published once the
// subscriber has its SUBACK reaches it once, live; the SUBSCRIBE's read of
// the retained store is done before the SUBACK, so it cannot see it too.
// The read came after the SUBACK was queued: with a 300 ms read the
// message came twice, live and again as retained (TestMQTTRetainOptions's
// "retain as published" saw the same under load).
func TestMQTTRetainedReadBeforeSuback(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.wrap = func(e engine.Engine) engine.Engine {
			return slowRetained{Engine: e.(*memengine.Engine), delay: 300 * time.Millisecond}
		}
	})
	pub, err := dialMQTT(t, g, 5, "tcp", "ord-pub", "")
	if err != nil {
		t.Fatal(err)
	}
	sub, err := dialMQTT(t, g, 5, "tcp", "ord-sub", "")
	if err != nil {
		t.Fatal(err)
	}
	sub.subscribe(t, "ord/#", 1)
	pub.publishRetained(t, "ord/x", 1, "r")
	sub.subscribe(t, "ordm", 0) // after the first SUBSCRIBE's retained, were there any
	pub.publish(t, "ordm", 0, "m")
	sub.expectMsgsAnyOrder(t, mqttMsg{topic: "ord/x", payload: "r", qos: 1}, mqttMsg{topic: "ordm", payload: "m"})
	select {
	case m := <-sub.msgs:
		t.Fatalf("then %s %q retain %v, want nothing more", m.topic, m.payload, m.retain)
	default:
	}
}
