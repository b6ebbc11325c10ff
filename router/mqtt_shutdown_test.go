package router_test

import (
	"context"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestMQTTShutdown: Shutdown ends an MQTT 5 session, over TCP and
// WebSocket, with DISCONNECT 0x8B (server shutting down) and a close, a
// 3.1.1 session with a close, a connection still before its CONNECT with a
// close; and it returns once every MQTT goroutine has stopped (goleak).
func TestMQTTShutdown(t *testing.T) {
	g := newGateway(t, withMQTT)
	v5tcp := dialRaw(t, g, "tcp", 5)
	v5tcp.connect(t, "shut-tcp", 30)
	v5ws := dialRaw(t, g, "ws", 5)
	v5ws.connect(t, "shut-ws", 30)
	v4 := dialRaw(t, g, "tcp", 4)
	v4.connect(t, "shut-v4", 30)
	pre := dialRaw(t, g, "tcp", 4)
	pre.write(t, []byte{packets.Connect << 4, 20}) // a CONNECT begun, never finished
	// The session is listed before Shutdown runs (a PINGREQ answered).
	for _, r := range []*rawMQTT{v5tcp, v5ws, v4} {
		r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
		r.expect(t, packets.Pingresp)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := g.rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*rawMQTT{v5tcp, v5ws} {
		if d := r.expect(t, packets.Disconnect); d.ReasonCode != 0x8B {
			t.Fatalf("DISCONNECT %#x, want 0x8B", d.ReasonCode)
		}
		r.expectClosed(t)
	}
	v4.expectClosed(t)
	pre.expectClosed(t)
}
