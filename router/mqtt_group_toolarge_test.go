package router_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestMQTTGroupTooLargeKeepsWindow: a shared-subscription delivery
// over the client's Maximum Packet Size is not written (counted
// too_large), and must not keep a packet identifier of the session's
// in-flight window: with a Receive Maximum of 2 and two such deliveries,
// a plain QoS 1 delivery still reaches the client.
func TestMQTTGroupTooLargeKeepsWindow(t *testing.T) {
	g := newGateway(t, withMQTT)
	r := dialRaw(t, g, "tcp", 5)
	pk := connectPacket("group-too-large", 30)
	pk.Properties.ReceiveMaximum = 2
	pk.Properties.MaximumPacketSize = 256
	r.send(t, pk)
	r.expect(t, packets.Connack)
	if ack := r.subscribeQoS1(t, "$share/big/big/+", "small/t"); !bytes.Equal(ack.ReasonCodes, []byte{1, 1}) {
		t.Fatalf("SUBACK %v", ack.ReasonCodes)
	}
	native := g.dial(t)
	big := strings.Repeat("x", 1000)
	native.publish(t, "big.a", big)
	native.publish(t, "big.b", big)
	skipped := map[string]string{"why": "too_large"}
	deadline := time.Now().Add(waitTimeout)
	for metricValue(t, g.reg, "switchyard_mqtt_skipped_total", skipped) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the two large group deliveries were not skipped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	native.publish(t, "small.t", "hi")
	p := r.expect(t, packets.Publish)
	if string(p.Payload) != `"hi"` || p.FixedHeader.Qos != 1 {
		t.Fatalf("delivery %q at QoS %d", p.Payload, p.FixedHeader.Qos)
	}
}
