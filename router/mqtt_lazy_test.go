package router_test

import (
	"fmt"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/router"
)

// TestMQTTIdleSessionMapsLazy: an idle subscribed MQTT session holds none
// of its packet-identifier maps; its first QoS 1 delivery makes the
// in-flight one, and only that.
func TestMQTTIdleSessionMapsLazy(t *testing.T) {
	g := newGateway(t, withMQTT)
	r := dialRaw(t, g, "tcp", 5)
	r.connect(t, "lazy", 30)
	r.subscribeQoS1(t, "lazy/t")
	made, ok := router.MQTTSessionMapsMade(g.rt, "lazy")
	if !ok || len(made) != 0 {
		t.Fatalf("idle session: maps made %v (%v), want none", made, ok)
	}
	pub := g.dial(t)
	pub.publish(t, "lazy.t", "one")
	r.expect(t, packets.Publish)
	made, _ = router.MQTTSessionMapsMade(g.rt, "lazy")
	if fmt.Sprint(made) != "[inflight]" {
		t.Fatalf("after a QoS 1 delivery: maps made %v, want [inflight]", made)
	}
}
