package router_test

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestMQTTTakeoverHandsBackLeases: a session taken over hands its
// unacknowledged shared-subscription deliveries back to the group, and its
// plain subscriptions end: the new session with the same client id gets
// the record again with DUP, and a plain publish reaches it once.
func TestMQTTTakeoverHandsBackLeases(t *testing.T) {
	g := newGateway(t, withMQTT)
	sub := func(r *rawMQTT) {
		r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
			Filters: packets.Subscriptions{{Filter: "$share/tk/tk/+", Qos: 1}, {Filter: "plain/t", Qos: 0}}})
		r.expect(t, packets.Suback)
	}
	old := dialRaw(t, g, "tcp", 5)
	old.connect(t, "taken", 30)
	sub(old)
	pub := g.dial(t)
	pub.publish(t, "tk.a", "leased")
	if p := old.expect(t, packets.Publish); p.FixedHeader.Dup {
		t.Fatal("first delivery with DUP")
	}
	nw := dialRaw(t, g, "ws", 5)
	nw.connect(t, "taken", 30)
	if d := old.expect(t, packets.Disconnect); d.ReasonCode != 0x8E {
		t.Fatalf("DISCONNECT %#x, want 0x8E", d.ReasonCode)
	}
	old.expectClosed(t)
	sub(nw)
	p := nw.expect(t, packets.Publish)
	if string(p.Payload) != `"leased"` || !p.FixedHeader.Dup {
		t.Fatalf("redelivery %q dup=%v", p.Payload, p.FixedHeader.Dup)
	}
	nw.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: p.PacketID})
	pub.publish(t, "plain.t", "once")
	if p := nw.expect(t, packets.Publish); string(p.Payload) != `"once"` {
		t.Fatalf("plain delivery %q", p.Payload)
	}
	nw.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	nw.expect(t, packets.Pingresp) // nothing else: one copy
}

// TestMQTTConcurrentTakeover: CONNECTs with one client id at once
// leave exactly one session; every other gets DISCONNECT 0x8E.
func TestMQTTConcurrentTakeover(t *testing.T) {
	g := newGateway(t, withMQTT)
	const n = 6
	rs := make([]*rawMQTT, n)
	for i := range rs {
		rs[i] = dialRaw(t, g, []string{"tcp", "ws"}[i%2], 5)
	}
	var wg sync.WaitGroup
	for _, r := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = r.nc.SetWriteDeadline(deadlineSoon())
			_, _ = r.nc.Write(connectBytes("race"))
		}()
	}
	wg.Wait()
	for _, r := range rs {
		r.expect(t, packets.Connack)
		r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
		pk, err := r.read(t)
		switch {
		case err != nil:
			t.Fatalf("read: %v", err)
		case pk.FixedHeader.Type == packets.Pingresp:
			// Alive now; a CONNECT admitted later may still take it over.
		case pk.FixedHeader.Type == packets.Disconnect:
			if pk.ReasonCode != 0x8E {
				t.Fatalf("DISCONNECT %#x", pk.ReasonCode)
			}
			r.expectClosed(t)
		}
	}
	// Exactly one is still answering.
	still := 0
	for _, r := range rs {
		_ = r.nc.SetWriteDeadline(deadlineSoon())
		if _, err := r.nc.Write([]byte{packets.Pingreq << 4, 0}); err != nil {
			continue
		}
		for {
			pk, err := r.read(t)
			if err != nil {
				break
			}
			if pk.FixedHeader.Type == packets.Pingresp {
				still++
				break
			}
		}
	}
	if still != 1 {
		t.Fatalf("%d sessions answer after %d CONNECTs with one client id, want 1", still, n)
	}
}

func deadlineSoon() time.Time { return time.Now().Add(waitTimeout) }

func connectBytes(id string) []byte {
	pk := connectPacket(id, 30)
	pk.ProtocolVersion = 5
	var b bytes.Buffer
	_ = pk.ConnectEncode(&b)
	return b.Bytes()
}
