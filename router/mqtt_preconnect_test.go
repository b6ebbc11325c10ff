package router_test

import (
	"bufio"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestMQTTPreConnectCounted: a connection that has not sent its
// CONNECT yet holds a goroutine, a socket and (once it announces a
// remaining length) a buffer of up to --mqtt-max-packet-bytes, so it
// takes a connection slot like any session: with --max-connections 1 and
// one connection trickling its CONNECT, a second is closed at once rather
// than held for --mqtt-connect-timeout; once the first is admitted and
// ends, the slot is free again.
func TestMQTTPreConnectCounted(t *testing.T) {
	for _, transport := range []string{"tcp", "ws"} {
		t.Run(transport, func(t *testing.T) {
			g := newGateway(t, withMQTT, func(c *gwConfig) {
				c.router.MaxConnections = 1
				c.router.MQTT.ConnectTimeout = time.Minute
			})
			if transport == "ws" {
				slow := dialRaw(t, g, transport, 4)
				// A CONNECT header announcing 512 KiB, then nothing.
				slow.write(t, []byte{packets.Connect << 4, 0x80, 0x80, 0x20})
				// The WebSocket upgrade is refused (HTTP 503), as /v1/ws's is.
				if _, err := dialMQTTConn(t.Context(), g, transport); err == nil {
					t.Fatal("a second WebSocket to /mqtt was upgraded past --max-connections 1")
				}
				slow.nc.Close()
			} else {
				// Two connections trickling their CONNECT: whichever the
				// gateway takes second is closed at once.
				closed := make(chan error, 2)
				var rs []*rawMQTT
				for range 2 {
					r := dialRaw(t, g, transport, 4)
					r.write(t, []byte{packets.Connect << 4, 0x80, 0x80, 0x20})
					rs = append(rs, r)
				}
				for _, r := range rs {
					go func() {
						_ = r.nc.SetReadDeadline(time.Now().Add(waitTimeout))
						_, err := r.br.ReadByte()
						closed <- err
					}()
				}
				// EOF, or a reset: the gateway closed without reading.
				if err := <-closed; err == nil || isTimeout(err) {
					t.Fatalf("two connections before their CONNECT past --max-connections 1: %v, want one closed", err)
				}
				for _, r := range rs {
					r.nc.Close()
				}
				<-closed
			}
			// The slot comes back: a client connects (bounded retries while
			// the first connection's end is seen by the gateway).
			deadline := time.Now().Add(waitTimeout)
			for {
				nc, err := dialMQTTConn(t.Context(), g, transport)
				if err == nil {
					r := &rawMQTT{nc: nc, br: bufio.NewReader(nc), v: 5}
					t.Cleanup(func() { nc.Close() })
					_ = nc.SetWriteDeadline(time.Now().Add(waitTimeout))
					if _, err := nc.Write(connectBytes("after-" + transport)); err == nil {
						if pk, err := r.read(t); err == nil && pk.FixedHeader.Type == packets.Connack && pk.ReasonCode == 0 {
							break
						}
					}
					nc.Close()
				}
				if time.Now().After(deadline) {
					t.Fatalf("no connection after the first ended: %v", err)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}
