package session

import (
	"fmt"
	"testing"
	"time"
)

// TestPingRacesReaderEnd: sessions accepted by Accept ping every
// millisecond a client that never answers (the pong timeout is a minute),
// while the client sends frames and leaves in the middle; every session
// ends at once with its connection, whatever its keepalive ping was
// doing when the reader ended.
func TestPingRacesReaderEnd(t *testing.T) {
	for i := range 24 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			rs := rawServeMode(t, i%4 == 3, Options{PingInterval: time.Millisecond, PongTimeout: time.Minute}, echo{})
			for j := range i % 6 {
				if _, err := rs.client.Write(maskedText(fmt.Sprint("f", j))); err != nil {
					t.Fatal(err)
				}
			}
			if i%2 == 1 {
				if _, err := rs.client.Write(maskedFrame(0x80|opClose, "\x03\xe8")); err != nil {
					t.Fatal(err)
				}
			}
			_ = rs.client.Close()
			rs.waitEnded(t, 15*time.Second, "the client left")
		})
	}
}
