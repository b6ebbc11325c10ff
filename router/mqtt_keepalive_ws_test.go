package router_test

import "testing"

// TestMQTTKeepAliveWebSocket: over GET /mqtt as over TCP, a session
// silent for 1.5 times its keep alive is ended with DISCONNECT 0x8D
// (docs/mqtt.md, "Keep alive"), counted.
func TestMQTTKeepAliveWebSocket(t *testing.T) {
	g := newGateway(t, withMQTT)
	r := silentPastKeepAlive(t, g, "ws", "silent-ws")
	r.expectClosed(t)
	if got := metricValue(t, g.reg, "switchyard_mqtt_disconnects_total", map[string]string{"reason": "keep_alive_timeout"}); got != 1 {
		t.Fatalf("disconnects_total{keep_alive_timeout} = %v, want 1", got)
	}
}
