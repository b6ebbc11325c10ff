package router_test

import (
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestMQTTRepliesOwedBounded: replies an MQTT session owes behind
// an append in flight (PUBCOMPs for PUBRELs, PUBACKs of refused
// publishes) are bounded by --control-queue-bytes like any reply: a client
// that keeps one append in flight and floods PUBRELs is ended (DISCONNECT
// 0x97) rather than growing the list of replies owed without bound.
func TestMQTTRepliesOwedBounded(t *testing.T) {
	g, ge := newGatedGateway(t, withMQTT, func(c *gwConfig) { c.router.Session.ControlBytes = 4096 })
	r := dialRaw(t, g, "tcp", 5)
	r.connect(t, "pubrel-flood", 30)
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: 1,
		TopicName: "held/t", Payload: []byte("x")})
	ge.waitCalls(t, 1) // the append stays in flight
	const n = 20000    // 80 KB of PUBRELs, 100 KB of PUBCOMPs owed
	flood := make([]byte, 0, 4*n)
	for i := range n {
		id := uint16(i%60000 + 2)
		flood = append(flood, packets.Pubrel<<4|2, 2, byte(id>>8), byte(id))
	}
	r.write(t, flood)
	for {
		pk, err := r.read(t)
		if err != nil {
			t.Fatalf("no DISCONNECT 0x97 for %d replies owed past --control-queue-bytes 4096: %v", n, err)
		}
		if pk.FixedHeader.Type == packets.Disconnect {
			if pk.ReasonCode != 0x97 {
				t.Fatalf("DISCONNECT %#x, want 0x97", pk.ReasonCode)
			}
			break
		}
	}
	r.expectClosed(t)
}
