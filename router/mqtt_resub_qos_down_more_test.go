package router_test

// Resend of the deliveries in flight of a filter restored at QoS 0.

import (
	"slices"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestMQTTResubQoSDownInFlightTrimmedJetStream is TestMQTTResubQoSDownInFlightTrimmed
// on JetStream: the delivery in flight that retention trimmed is counted
// as a gap and not sent.
func TestMQTTResubQoSDownInFlightTrimmedJetStream(t *testing.T) {
	url := natstest.URL(t)
	g := newJSGateway(t, url, natstest.Prefix(t, url))
	const id, topic = "rvqtj-1", "rvqtj/t"
	if code, _, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "rvqtj.t", "partitions": 1,
		"retention": map[string]any{"max_messages": 1}}); code != 201 {
		t.Fatalf("topic not made: %d", code)
	}
	checkInFlightTrimmed(t, g, id, topic)
}

// TestMQTTResubQoSDownResendHeldThenQoS1: "x1" on rvq/held/x and "y1" on
// rvq/held/y are in flight of filter rvq/held/# gone to QoS 0. A resume
// with Receive Maximum 1 sends x1 again, which takes the window, so y1,
// sent again too, is held. The filter is then subscribed again at QoS 1
// and the connection is lost before the window opens. The next resume
// must send y1 again: it was never acknowledged [MQTT-4.4.0-1].
func TestMQTTResubQoSDownResendHeldThenQoS1(t *testing.T) {
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
