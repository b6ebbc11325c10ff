package router_test

// Resend of the deliveries in flight of a filter restored at QoS 0.

import (
	"strings"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestReviewResendTooLargeNotAgain: the resent delivery the writer skips
// as too large for the client's Maximum Packet Size is, as MQTT asks
// [MQTT-3.1.2-25], as if sent: a later resume (with a larger Maximum
// Packet Size) must not send it again.
// QoS1 is the same for a filter still at QoS 1 (control).
func TestReviewResendTooLargeNotAgain(t *testing.T) {
	for _, down := range []bool{true, false} {
		t.Run(map[bool]string{true: "QoS0", false: "QoS1"}[down], func(t *testing.T) { resendTooLarge(t, down) })
	}
}

func resendTooLarge(t *testing.T, down bool) {
	g := newGateway(t, withMQTT)
	const id, topic = "rvq-big", "rvq/big/t"
	pub, _ := dialSession(t, g, 5, "tcp", id+"-pub", true, 0)
	r, _ := connectRawPersistent(t, g, 5, id)
	r.subscribeQoS1(t, topic)
	big := strings.Repeat("x", 400)
	pub.publish(t, topic, 1, big)
	if p := r.expect(t, packets.Publish); string(p.Payload) != big || p.FixedHeader.Qos != 1 {
		t.Fatalf("PUBLISH %d bytes QoS %d, want the big one at QoS 1", len(p.Payload), p.FixedHeader.Qos)
	}
	if down {
		r.subscribeQoS0(t, topic) // not acknowledged
	} else {
		r.noPublishYet(t)
	}
	_ = r.nc.Close()
	waitSaved(t, g, id)

	// Resume with a Maximum Packet Size the resent PUBLISH is past.
	r = dialRaw(t, g, "tcp", 5)
	pk := connectPacket(id, 30)
	pk.Connect.Clean = false
	pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = 600, true
	pk.Properties.MaximumPacketSize = 200
	r.send(t, pk)
	if ack := r.expect(t, packets.Connack); ack.ReasonCode != 0 || !ack.SessionPresent {
		t.Fatalf("CONNACK %#x present %v", ack.ReasonCode, ack.SessionPresent)
	}
	waitMetric(t, g, "switchyard_mqtt_skipped_total", map[string]string{"why": "too_large"}, 1)
	_ = r.nc.Close()
	waitSaved(t, g, id)

	r, present := connectRawPersistent(t, g, 5, id)
	if !present {
		t.Fatal("Session Present 0")
	}
	pub.publish(t, topic, 1, "live")
	for range 3 {
		p := r.expect(t, packets.Publish)
		if string(p.Payload) == "live" {
			r.noPublishYet(t)
			return
		}
		t.Fatalf("second resume sent again the delivery skipped as too large (%d bytes, QoS %d, DUP %v): "+
			"it is kept in flight for ever", len(p.Payload), p.FixedHeader.Qos, p.FixedHeader.Dup)
	}
}

// TestReviewResendOrder: two deliveries in flight of a wildcard filter
// gone to QoS 0, sent "first" on rvq/o/b then "second" on rvq/o/a, are
// sent again by a resume in the order they were first sent
// [MQTT-4.6.0-1]. QoS1 is the same for a filter still at QoS 1 (control).
func TestReviewResendOrder(t *testing.T) {
	for _, down := range []bool{true, false} {
		t.Run(map[bool]string{true: "QoS0", false: "QoS1"}[down], func(t *testing.T) {
			g := newGateway(t, withMQTT)
			id, filter := "rvq-ord", "rvq/o/#"
			pub, _ := dialSession(t, g, 5, "tcp", id+"-pub", true, 0)
			r, _ := connectRawPersistent(t, g, 5, id)
			r.subscribeQoS1(t, filter)
			for _, m := range [][2]string{{"rvq/o/b", "first"}, {"rvq/o/a", "second"}} {
				pub.publish(t, m[0], 1, m[1])
				if p := r.expect(t, packets.Publish); string(p.Payload) != m[1] {
					t.Fatalf("PUBLISH %q, want %q", p.Payload, m[1])
				}
			}
			if down {
				r.subscribeQoS0(t, filter) // neither acknowledged
			} else {
				r.noPublishYet(t)
			}
			_ = r.nc.Close()
			waitSaved(t, g, id)
			r, _ = connectRawPersistent(t, g, 5, id)
			var got []string
			for range 2 {
				got = append(got, string(r.expect(t, packets.Publish).Payload))
			}
			if got[0] != "first" || got[1] != "second" {
				t.Fatalf("resume sent the deliveries in flight as %q, want [first second], the order they were sent in", got)
			}
		})
	}
}
