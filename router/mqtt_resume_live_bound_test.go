package router_test

// A live delivery of a persistent session while another of its filters
// replays, the window full: the held deliveries are bounded by the queue
// bound (docs/mqtt.md), and a live one is dropped past that bound, not
// while none is held.

import (
	"strconv"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestMQTTResumeLiveHeldDuringReplay: a session resumes with 100 messages
// waiting on rvl/t (queue bound 8, window 1) and acknowledges nothing at
// first; it subscribes to rvl/live and one QoS 1 message is published
// there: the first live delivery, nothing else live held. Once the client
// acknowledges, the backlog comes whole, and so does that one message.
func TestMQTTResumeLiveHeldDuringReplay(t *testing.T) {
	const n = 100
	g := newGateway(t, withResumeBounds(8, 1, 0))
	pub := resumeWithBacklog(t, g, "rvl-1", "rvl/t", n)

	r, ack := connectPersistentKeepAlive(t, g, "rvl-1", 30)
	if !ack.SessionPresent {
		t.Fatal("Session Present 0")
	}
	p0 := r.expect(t, packets.Publish)
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 2,
		Filters: packets.Subscriptions{{Filter: "rvl/live", Qos: 1}}})
	if sa := r.expect(t, packets.Suback); sa.PacketID != 2 || len(sa.ReasonCodes) != 1 || sa.ReasonCodes[0] != 1 {
		t.Fatalf("SUBACK %d %v, want 2 [1]", sa.PacketID, sa.ReasonCodes)
	}
	// The replay has taken its budget (m0 written, 8 more queued or held).
	plain := map[string]string{"kind": "plain"}
	waitUntil(t, "the replay's budget is taken", func() bool {
		return metricValue(t, g.reg, "switchyard_deliveries_total", plain) >= 9
	})
	pub.publish(t, "rvl/live", 1, "live0")
	window := map[string]string{"why": "window_full"}

	r.puback(t, p0.PacketID)
	got := 0
	for i := 1; i < n || got == 0; {
		pk := r.expect(t, packets.Publish)
		r.puback(t, pk.PacketID)
		switch pk.TopicName {
		case "rvl/live":
			if string(pk.Payload) != "live0" {
				t.Fatalf("got %q on rvl/live, want live0", pk.Payload)
			}
			got++
		case "rvl/t":
			if want := "m" + strconv.Itoa(i); string(pk.Payload) != want {
				t.Fatalf("got %q on rvl/t, want %q", pk.Payload, want)
			}
			i++
			if i == n && got == 0 {
				// All the backlog came: a message published now on
				// rvl/live comes after live0, if live0 was kept.
				pub.publish(t, "rvl/live", 1, "live1")
				pk := r.expect(t, packets.Publish)
				r.puback(t, pk.PacketID)
				if string(pk.Payload) != "live0" {
					t.Fatalf("got %q on %s, want live0: the one live delivery, with no other live one held, "+
						"was dropped for the replay's held deliveries (window_full drops %v)",
						pk.Payload, pk.TopicName, metricValue(t, g.reg, "switchyard_mqtt_skipped_total", window))
				}
				got++
			}
		}
	}
}
