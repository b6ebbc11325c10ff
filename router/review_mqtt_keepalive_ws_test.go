package router_test

import (
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestReviewMQTTKeepAliveWebSocket: over GET /mqtt as over TCP, a session
// silent for 1.5 times its keep alive is ended with DISCONNECT 0x8D
// (docs/mqtt.md, "Keep alive"), counted.
func TestReviewMQTTKeepAliveWebSocket(t *testing.T) {
	g := newGateway(t, withMQTT)
	r := dialRaw(t, g, "ws", 5)
	start := time.Now()
	r.connect(t, "silent-ws", 1)
	d := r.expect(t, packets.Disconnect)
	if d.ReasonCode != 0x8D {
		t.Fatalf("DISCONNECT %#x, want 0x8D", d.ReasonCode)
	}
	if el := time.Since(start); el < 1500*time.Millisecond {
		t.Fatalf("closed after %v, before 1.5 times the keep alive", el)
	}
	r.expectClosed(t)
	if got := metricValue(t, g.reg, "switchyard_mqtt_disconnects_total", map[string]string{"reason": "keep_alive_timeout"}); got != 1 {
		t.Fatalf("disconnects_total{keep_alive_timeout} = %v, want 1", got)
	}
}
