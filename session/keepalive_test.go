package session

import (
	"testing"
	"time"
)

// TestKeepaliveEndsWithConnection: a client that goes away while the
// session's keepalive ping waits for its pong ends the session at once,
// not when the pong timeout (here 30 s) has passed: a vanished client
// keeps nothing of the gateway's (its subscriptions, its connection slot)
// for the length of a pong timeout.
func TestKeepaliveEndsWithConnection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		leave func(c *rawClient) error
	}{
		{"TCP close", func(c *rawClient) error { return c.Close() }},
		{"close frame, then TCP close", func(c *rawClient) error {
			if _, err := c.Write(maskedFrame(0x80|opClose, "\x03\xe8")); err != nil {
				return err
			}
			return c.Close()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const pongTimeout = 30 * time.Second
			rs := rawServe(t, Options{PingInterval: 10 * time.Millisecond, PongTimeout: pongTimeout}, echo{})
			if b0, _ := rs.client.readFrame(t); b0 != 0x80|opPing {
				t.Fatalf("first frame of the server starts %#x, want a ping", b0)
			}
			// The ping is outstanding: the client never answers it.
			if err := tc.leave(rs.client); err != nil {
				t.Fatal(err)
			}
			rs.waitEnded(t, pongTimeout/3, "the client left with a ping outstanding")
		})
	}
}
