//go:build linux

package router_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestMQTTWebSocketAdmittedWhileShutdownClosesIt: Shutdown closes a GET
// /mqtt connection whose CONNECT is still being admitted (its connect
// hook has not answered); the admission then goes on and gives the
// closed connection an idle socket. The connection's close and the
// admission must be ordered (the race detector checks).
func TestMQTTWebSocketAdmittedWhileShutdownClosesIt(t *testing.T) {
	asked, answer := make(chan struct{}, 1), make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request, hook string, _ map[string]any) {
		if hook == "connect" {
			asked <- struct{}{}
			select {
			case <-answer:
			case <-r.Context().Done():
			}
		}
		reply(w, map[string]any{"allow": true, "user": "mq"})
	})
	g := newGateway(t, withMQTT, withHooks(b))
	r := dialRaw(t, g, "ws", 5)
	r.send(t, connectPacket("admitted-while-closing", 30))
	<-asked
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		shut <- g.rt.Shutdown(ctx)
	}()
	// The close handshake reaches the client: its read ends.
	if pk, err := r.read(t); err == nil && pk.FixedHeader.Type != packets.Connack {
		t.Fatalf("got %s before the close", packets.PacketNames[pk.FixedHeader.Type])
	}
	close(answer)
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
