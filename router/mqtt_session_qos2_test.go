package router_test

// QoS 2 deliveries of an MQTT persistent session across a resume: a
// delivery the client received (PUBREC) and did not complete (PUBCOMP)
// is released again (PUBREL) with its packet identifier, which no other
// delivery takes meanwhile [MQTT-4.4.0-1].

import (
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestMQTTPersistentSessionQoS2Released: the client received m1 (PUBREC
// sent, no PUBREL seen) and m2 (nothing sent) when its connection was
// lost. The resume sends PUBREL for m1's identifier and replays m2 with
// DUP under another identifier: a client that still holds m1's identifier
// as received (paho.golang) takes a DUP PUBLISH with it for m1 again and
// acknowledges it without delivering, so m2 under that identifier would
// be lost.
func TestMQTTPersistentSessionQoS2Released(t *testing.T) {
	g := newGateway(t, withMQTT)
	pub, _ := dialSession(t, g, 5, "tcp", "pq2-pub", true, 0)
	connect := func() (*rawMQTT, packets.Packet) { return connectPersistent(t, g, "pq2-1") }
	r, ack := connect()
	if ack.ReasonCode != 0 || ack.SessionPresent {
		t.Fatalf("CONNACK %#x present %v", ack.ReasonCode, ack.SessionPresent)
	}
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: "pq2/t", Qos: 2}}})
	if sa := r.expect(t, packets.Suback); len(sa.ReasonCodes) != 1 || sa.ReasonCodes[0] != 2 {
		t.Fatalf("SUBACK %v, want QoS 2 granted", sa.ReasonCodes)
	}
	pub.publish(t, "pq2/t", 2, "m1")
	p1 := r.expect(t, packets.Publish)
	pub.publish(t, "pq2/t", 2, "m2")
	p2 := r.expect(t, packets.Publish)
	if string(p1.Payload) != "m1" || string(p2.Payload) != "m2" || p1.FixedHeader.Qos != 2 {
		t.Fatalf("PUBLISH %q, %q at QoS %d, want m1, m2 at QoS 2", p1.Payload, p2.Payload, p1.FixedHeader.Qos)
	}
	r.write(t, []byte{packets.Pubrec << 4, 2, byte(p1.PacketID >> 8), byte(p1.PacketID)})
	if rel := r.expect(t, packets.Pubrel); rel.PacketID != p1.PacketID {
		t.Fatalf("PUBREL %d, want %d", rel.PacketID, p1.PacketID)
	}
	_ = r.nc.Close() // lost before the client saw the PUBREL: m1's identifier is still held as received
	waitSaved(t, g, "pq2-1")

	r, ack = connect()
	if !ack.SessionPresent {
		t.Fatal("Session Present 0 on the reconnect")
	}
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	released, replayed := false, false
	for n := 0; n < 10; n++ {
		pk, err := r.read(t)
		if err != nil {
			t.Fatalf("reading the resumed session: %v", err)
		}
		switch pk.FixedHeader.Type {
		case packets.Pingresp:
			if !released {
				t.Fatalf("no PUBREL for packet identifier %d on the resumed session before the PINGRESP [MQTT-4.4.0-1]", p1.PacketID)
			}
		case packets.Pubrel:
			released = released || pk.PacketID == p1.PacketID
		case packets.Publish:
			if string(pk.Payload) == "m1" {
				t.Fatalf("m1 delivered again after its PUBREC")
			}
			if !pk.FixedHeader.Dup {
				t.Fatalf("PUBLISH %q without DUP, want m2 again with DUP", pk.Payload)
			}
			if pk.PacketID == p1.PacketID {
				t.Fatalf("m2 replayed under packet identifier %d, which the client still holds for m1 (PUBREC sent, no PUBCOMP): a client takes it for m1 again and drops it", pk.PacketID)
			}
			replayed = true
		}
		if released && replayed {
			break
		}
	}
	if !released {
		t.Fatalf("no PUBREL for packet identifier %d on the resumed session [MQTT-4.4.0-1]", p1.PacketID)
	}
	if !replayed {
		t.Fatal("m2 not replayed")
	}
}
