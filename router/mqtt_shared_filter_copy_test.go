package router_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestMQTTSharedFilterDoesNotKeepSubscribePacket: a shared subscription's
// filter is kept past the SUBSCRIBE as a copy, not as a view into the
// packet it came in (the packet decoder's strings point into the packet's
// bytes), so a session holding a shared subscription does not hold the
// whole SUBSCRIBE: here 8 sessions each subscribed with 192 KiB of user
// properties, which a view would keep alive (1.5 MiB in all).
func TestMQTTSharedFilterDoesNotKeepSubscribePacket(t *testing.T) {
	g := newGateway(t, withMQTT)
	const sessions, pad = 8, 192 << 10
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	// MQTT strings are at most 65,535 bytes: the padding is 12 of 16 KiB.
	props := make([]packets.UserProperty, 12)
	for i := range props {
		props[i] = packets.UserProperty{Key: fmt.Sprint("pad", i), Val: strings.Repeat("x", pad/12)}
	}
	before := heap()
	clients := make([]*rawMQTT, 0, sessions)
	for i := range sessions {
		r := dialRaw(t, g, "tcp", 5)
		r.connect(t, fmt.Sprintf("shared-copy-%d", i), 60)
		r.send(t, packets.Packet{
			FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
			Filters:    packets.Subscriptions{{Filter: fmt.Sprintf("$share/copy%d/big/t", i), Qos: 1}},
			Properties: packets.Properties{User: props},
		})
		if sa := r.expect(t, packets.Suback); len(sa.ReasonCodes) != 1 || sa.ReasonCodes[0] != 1 {
			t.Fatalf("SUBACK %v, want granted QoS 1", sa.ReasonCodes)
		}
		clients = append(clients, r)
	}
	grown := int64(heap()) - int64(before)
	runtime.KeepAlive(clients)
	if per := grown / sessions; per > pad/2 {
		t.Fatalf("the heap grew by %d bytes per session holding a shared subscription; want well under the SUBSCRIBE's %d bytes of properties", per, pad)
	}
}
