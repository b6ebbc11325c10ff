//go:build linux

package router_test

import (
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/router"
)

// TestMQTTTakeoverRacingFirstPark: a client id taken over again and
// again, each new session's CONNECT racing the previous session's first
// park: every session taken over gets DISCONNECT 0x8E and its connection
// closed, and once the last client leaves nothing stays parked.
func TestMQTTTakeoverRacingFirstPark(t *testing.T) {
	for _, transport := range []string{"tcp", "ws"} {
		t.Run(transport, func(t *testing.T) {
			g := newGateway(t, withMQTT)
			id := "race-" + transport
			prev := dialRaw(t, g, transport, 5)
			prev.connect(t, id, 30)
			for i := range 40 {
				next := dialRaw(t, g, transport, 5)
				next.connect(t, id, 30)
				if d := prev.expect(t, packets.Disconnect); d.ReasonCode != 0x8E {
					t.Fatalf("round %d: DISCONNECT %#x, want 0x8E", i, d.ReasonCode)
				}
				prev.expectClosed(t)
				prev = next
			}
			_ = prev.nc.Close()
			waitUntil(t, "no MQTT session parked", func() bool {
				n, _ := router.MQTTParked(g.rt, "")
				return n == 0
			})
			waitUntil(t, "the parked gauge back to 0", func() bool {
				return metricValue(t, g.reg, "switchyard_sessions_parked", nil) == 0
			})
		})
	}
}
