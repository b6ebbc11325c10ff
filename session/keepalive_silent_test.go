package session

import (
	"context"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestKeepaliveEndsSilentClientAfterItsPing: a session accepted with
// AcceptOptions.OnPingReceived (the client's pings are left to the
// library) is ended by its keepalive when its client has sent one ping and
// then gone silent without closing its TCP connection (a client that lost
// power, a dropped NAT mapping), within PingInterval + PongTimeout (here
// 20 ms + 200 ms; the bound is 15 s). Before, it was never ended: the ping
// went to the library (headControl), whose reader then waited inside the
// library for the next data frame, so the burst never ended, and ownPing,
// its pong timeout passed while a burst was in progress, waited for that
// burst to catch up with its input forever.
func TestKeepaliveEndsSilentClientAfterItsPing(t *testing.T) {
	ao := &websocket.AcceptOptions{OnPingReceived: func(context.Context, []byte) bool { return true }}
	rs := rawServeAccept(t, ao, "", Options{PingInterval: 20 * time.Millisecond, PongTimeout: 200 * time.Millisecond}, echo{})
	if _, err := rs.client.Write(maskedFrame(0x80|opPing, "hi")); err != nil {
		t.Fatal(err)
	}
	// The client reads what the server sends (so no write of the server
	// blocks) and never answers: it is dead as far as the keepalive can
	// tell.
	go func() {
		buf := make([]byte, 512)
		for {
			if _, err := rs.client.Read(buf); err != nil {
				return
			}
		}
	}()
	rs.waitEnded(t, 15*time.Second, "a silent client whose one ping went to the library")
}
