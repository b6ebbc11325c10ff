package router_test

import (
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestMQTTGroupUnnameableAcked: a record MQTT cannot name, delivered
// by a group to an MQTT member of a QoS 1 shared subscription, is acked at
// once and delivered as nothing (mqtt_group.go), counted no_mqtt_name; it
// is not left leased to the group's ack timeout as an ack backlog (a
// backlog the session never had: its acker was never started).
func TestMQTTGroupUnnameableAcked(t *testing.T) {
	g := newGateway(t, withMQTT)
	r := dialRaw(t, g, "tcp", 5)
	r.connect(t, "noname-member", 30)
	r.subscribeQoS1(t, "$share/nn/x/+")
	native := g.dial(t)
	native.publish(t, "x.:2F", "no name") // the level "/": no MQTT name
	native.publish(t, "x.ok", "named")
	if p := r.expect(t, packets.Publish); string(p.Payload) != `"named"` {
		t.Fatalf("delivery %q", p.Payload)
	}
	noName := map[string]string{"why": "no_mqtt_name"}
	deadline := time.Now().Add(waitTimeout)
	for metricValue(t, g.reg, "switchyard_mqtt_skipped_total", noName) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the unnameable record was not counted")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := metricValue(t, g.reg, "switchyard_mqtt_skipped_total", map[string]string{"why": "ack_backlog"}); got != 0 {
		t.Fatalf("skipped_total{ack_backlog} = %v: the unnameable record was left leased, not acked", got)
	}
}
