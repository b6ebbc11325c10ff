package router_test

import (
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestRetainedPublishRefusedByAppend: a retained PUBLISH that the
// append refuses (here --max-topics: the topic would be one too many) is
// answered 0x97 but its message has already been stored as the topic's
// retained message (mqtt_retain.go stores before appending), so new
// subscriptions get a message the publisher was told was refused, on a
// topic that does not exist.
func TestRetainedPublishRefusedByAppend(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) { c.router.MaxTopics = 1 })
	g.dial(t).publish(t, "r5.only", 1) // the one topic allowed

	r := dialRaw(t, g, "tcp", 5)
	r.connect(t, "r5-pub", 30)
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
		TopicName: "r5/over", PacketID: 1, Payload: []byte("refused")})
	if ack := r.expect(t, packets.Puback); ack.ReasonCode != 0x97 {
		t.Fatalf("PUBACK %#x for a publish past --max-topics, want 0x97", ack.ReasonCode)
	}
	if n := metricValue(t, g.reg, "switchyard_mqtt_retained_messages", nil); n != 0 {
		t.Fatalf("switchyard_mqtt_retained_messages = %v after the retained PUBLISH was refused (0x97), want 0", n)
	}
}
