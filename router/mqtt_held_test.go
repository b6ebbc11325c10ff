package router_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestMQTTHeldBytesBounded: the QoS 1 deliveries an MQTT session
// holds while its in-flight window is full are copies of their packets,
// its own (the queue's frames are shared between sessions): besides their
// count (--queue-messages, 1,024) their bytes are bounded
// (--mqtt-max-held-bytes, 4 MiB), past which the oldest is dropped,
// counted. A client with Receive Maximum 1 that never acknowledges gets
// 40 records of 200 KiB held: about 20 of them, not 8 MB.
func TestMQTTHeldBytesBounded(t *testing.T) {
	g := newGateway(t, withMQTT)
	r := dialRaw(t, g, "tcp", 5)
	pk := connectPacket("never-acks", 30)
	pk.Properties.ReceiveMaximum = 1
	r.send(t, pk)
	r.expect(t, packets.Connack)
	if ack := r.subscribeQoS1(t, "held/t"); !bytes.Equal(ack.ReasonCodes, []byte{1}) {
		t.Fatalf("SUBACK %v", ack.ReasonCodes)
	}
	native := g.dial(t)
	big := strings.Repeat("x", 200<<10)
	const n = 40
	for range n {
		native.publish(t, "held.t", big)
	}
	window := map[string]string{"why": "window_full"}
	deadline := time.Now().Add(waitTimeout)
	for metricValue(t, g.reg, "switchyard_mqtt_skipped_total", window) < n-1-21 {
		if time.Now().After(deadline) {
			t.Fatalf("%v held deliveries dropped of %d held, want at least %d: the held copies are bounded by count only",
				metricValue(t, g.reg, "switchyard_mqtt_skipped_total", window), n-1, n-1-21)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if p := r.expect(t, packets.Publish); len(p.Payload) < 200<<10 {
		t.Fatalf("first delivery of %d bytes", len(p.Payload))
	}
}
