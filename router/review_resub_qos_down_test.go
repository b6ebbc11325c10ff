package router_test

// Resend of the deliveries in flight of a filter restored at QoS 0.

import (
	"slices"
	"strings"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
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

// TestReviewResendThenQoS1NoReplayOfQoS0: a resume resends "m1" (in
// flight of a filter gone to QoS 0) and the client does not acknowledge
// it; "m2" is delivered at QoS 0, then the filter is subscribed again at
// QoS 1. A later resume sends "m1" again, but not "m2", which was
// delivered at QoS 0 (forgetPositions: what a filter delivered at QoS 0
// is not replayed by a later resume).
func TestReviewResendThenQoS1NoReplayOfQoS0(t *testing.T) {
	g := newGateway(t, withMQTT)
	const id, topic = "rvq-up", "rvq/up/t"
	pub, _ := dialSession(t, g, 5, "tcp", id+"-pub", true, 0)
	r, _ := connectRawPersistent(t, g, 5, id)
	r.subscribeQoS1(t, topic)
	pub.publish(t, topic, 1, "m1")
	r.expect(t, packets.Publish)
	r.subscribeQoS0(t, topic)
	_ = r.nc.Close()
	waitSaved(t, g, id)

	r, _ = connectRawPersistent(t, g, 5, id)
	if p := r.expect(t, packets.Publish); string(p.Payload) != "m1" || !p.FixedHeader.Dup {
		t.Fatalf("PUBLISH %q dup %v, want m1 again", p.Payload, p.FixedHeader.Dup)
	}
	pub.publish(t, topic, 1, "m2")
	if p := r.expect(t, packets.Publish); string(p.Payload) != "m2" || p.FixedHeader.Qos != 0 {
		t.Fatalf("PUBLISH %q QoS %d, want m2 at QoS 0", p.Payload, p.FixedHeader.Qos)
	}
	r.subscribeQoS1(t, topic) // m1 still not acknowledged
	r.noPublishYet(t)
	_ = r.nc.Close()
	waitSaved(t, g, id)

	r, _ = connectRawPersistent(t, g, 5, id)
	pub.publish(t, topic, 1, "live")
	var got []string
	for len(got) == 0 || got[len(got)-1] != "live" {
		p := r.expect(t, packets.Publish)
		r.puback(t, p.PacketID)
		got = append(got, string(p.Payload))
		if len(got) > 4 {
			break
		}
	}
	if strings.Join(got, " ") != "m1 live" {
		t.Fatalf("last resume sent %q, want [m1 live]: m2, delivered at QoS 0, is replayed", got)
	}
}

// TestReviewQoS0ThenQoS1NoReplayOfQoS0Control is
// TestReviewResendThenQoS1NoReplayOfQoS0 within one connection, without
// a resend: "m1" in flight, QoS 0, "m2", QoS 1, then a resume.
func TestReviewQoS0ThenQoS1NoReplayOfQoS0Control(t *testing.T) {
	g := newGateway(t, withMQTT)
	const id, topic = "rvq-upc", "rvq/upc/t"
	pub, _ := dialSession(t, g, 5, "tcp", id+"-pub", true, 0)
	r, _ := connectRawPersistent(t, g, 5, id)
	r.subscribeQoS1(t, topic)
	pub.publish(t, topic, 1, "m1")
	r.expect(t, packets.Publish)
	r.subscribeQoS0(t, topic)
	pub.publish(t, topic, 1, "m2")
	if p := r.expect(t, packets.Publish); string(p.Payload) != "m2" || p.FixedHeader.Qos != 0 {
		t.Fatalf("PUBLISH %q QoS %d, want m2 at QoS 0", p.Payload, p.FixedHeader.Qos)
	}
	r.subscribeQoS1(t, topic) // m1 still not acknowledged
	r.noPublishYet(t)
	_ = r.nc.Close()
	waitSaved(t, g, id)

	r, _ = connectRawPersistent(t, g, 5, id)
	pub.publish(t, topic, 1, "live")
	var got []string
	for len(got) == 0 || got[len(got)-1] != "live" {
		p := r.expect(t, packets.Publish)
		r.puback(t, p.PacketID)
		got = append(got, string(p.Payload))
		if len(got) > 4 {
			break
		}
	}
	if strings.Join(got, " ") != "m1 live" {
		t.Fatalf("resume sent %q, want [m1 live]: m2, delivered at QoS 0, is replayed", got)
	}
}

// TestReviewResendTrimmedJetStream is TestMQTTResubQoSDownInFlightTrimmed
// on JetStream: the delivery in flight that retention trimmed is counted
// as a gap and not sent.
func TestReviewResendTrimmedJetStream(t *testing.T) {
	url := natstest.URL(t)
	g := newJSGateway(t, url, natstest.Prefix(t, url))
	const id, topic = "rvqtj-1", "rvqtj/t"
	if code, _, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "rvqtj.t", "partitions": 1,
		"retention": map[string]any{"max_messages": 1}}); code != 201 {
		t.Fatalf("topic not made: %d", code)
	}
	pub, _ := dialSession(t, g, 5, "tcp", id+"-pub", true, 0)
	r, _ := connectRawPersistent(t, g, 5, id)
	r.subscribeQoS1(t, topic)
	pub.publish(t, topic, 1, "m1")
	if p := r.expect(t, packets.Publish); string(p.Payload) != "m1" {
		t.Fatalf("PUBLISH %q, want m1", p.Payload)
	}
	r.subscribeQoS0(t, topic)
	pub.publish(t, topic, 1, "m2") // trims m1
	if p := r.expect(t, packets.Publish); string(p.Payload) != "m2" || p.FixedHeader.Qos != 0 {
		t.Fatalf("PUBLISH %q QoS %d, want m2 at QoS 0", p.Payload, p.FixedHeader.Qos)
	}
	_ = r.nc.Close()
	waitSaved(t, g, id)
	r, _ = connectRawPersistent(t, g, 5, id)
	waitMetric(t, g, "switchyard_mqtt_session_gaps_total", nil, 1)
	pub.publish(t, topic, 1, "live")
	if p := r.expect(t, packets.Publish); string(p.Payload) != "live" {
		t.Fatalf("PUBLISH %q dup %v, want live (m1 trimmed, m2 delivered at QoS 0)", p.Payload, p.FixedHeader.Dup)
	}
}

// TestReviewResendHeldThenQoS1: "x1" on rvq/held/x and "y1" on
// rvq/held/y are in flight of filter rvq/held/# gone to QoS 0. A resume
// with Receive Maximum 1 sends x1 again, which takes the window, so y1,
// sent again too, is held. The filter is then subscribed again at QoS 1
// and the connection is lost before the window opens. The next resume
// must send y1 again: it was never acknowledged [MQTT-4.4.0-1].
func TestReviewResendHeldThenQoS1(t *testing.T) {
	g := newGateway(t, withMQTT)
	const id, filter = "rvq-held", "rvq/held/#"
	pub, _ := dialSession(t, g, 5, "tcp", id+"-pub", true, 0)
	r, _ := connectRawPersistent(t, g, 5, id)
	r.subscribeQoS1(t, filter)
	pub.publish(t, "rvq/held/x", 1, "x1")
	r.expect(t, packets.Publish)
	pub.publish(t, "rvq/held/y", 1, "y1")
	r.expect(t, packets.Publish)
	r.subscribeQoS0(t, filter) // neither acknowledged
	_ = r.nc.Close()
	waitSaved(t, g, id)

	r = dialRaw(t, g, "tcp", 5)
	pk := connectPacket(id, 30)
	pk.Connect.Clean = false
	pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = 600, true
	pk.Properties.ReceiveMaximum = 1
	r.send(t, pk)
	if ack := r.expect(t, packets.Connack); ack.ReasonCode != 0 || !ack.SessionPresent {
		t.Fatalf("CONNACK %#x present %v", ack.ReasonCode, ack.SessionPresent)
	}
	if p := r.expect(t, packets.Publish); string(p.Payload) != "x1" {
		t.Fatalf("resume sent %q first, want x1", p.Payload)
	}
	r.subscribeQoS1(t, filter) // y1 held, not written
	_ = r.nc.Close()
	waitSaved(t, g, id)

	r, _ = connectRawPersistent(t, g, 5, id)
	pub.publish(t, "rvq/held/x", 1, "live")
	var got []string
	for len(got) == 0 || got[len(got)-1] != "live" {
		p := r.expect(t, packets.Publish)
		r.puback(t, p.PacketID)
		got = append(got, string(p.Payload))
		if len(got) > 4 {
			break
		}
	}
	if !slices.Contains(got, "y1") {
		t.Fatalf("last resume sent %q: y1, never acknowledged, is lost", got)
	}
}
