package router_test

import (
	"bytes"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// reviewConnect sends an MQTT 5 CONNECT with clean start clean and
// session expiry expiry, and returns its successful CONNACK.
func reviewConnect(t *testing.T, r *rawMQTT, id string, clean bool, expiry uint32) packets.Packet {
	t.Helper()
	pk := connectPacket(id, 30)
	pk.Connect.Clean = clean
	pk.Properties.SessionExpiryInterval = expiry
	pk.Properties.SessionExpiryIntervalFlag = expiry > 0
	r.send(t, pk)
	ack := r.expect(t, packets.Connack)
	if ack.ReasonCode != 0 {
		t.Fatalf("CONNACK %#x, want success", ack.ReasonCode)
	}
	return ack
}

// reviewDisconnect sends a DISCONNECT with reason rc and properties p.
func reviewDisconnect(t *testing.T, r *rawMQTT, rc byte, p packets.Properties) {
	t.Helper()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}, ProtocolVersion: r.v, ReasonCode: rc, Properties: p}
	var b bytes.Buffer
	if err := pk.DisconnectEncode(&b); err != nil {
		t.Fatal(err)
	}
	r.write(t, b.Bytes())
}

// TestMQTTResumeWithoutExpiry: an MQTT 5 CONNECT with clean start 0 and
// no session expiry resumes the stored session (Session Present 1) for the
// life of its connection; its stored QoS 1 subscription delivers. Such a
// session keeps no positions (mqttSession.trk is nil), yet its restored
// QoS 1 subscription is started with a replay that reads them
// (startResumed → resumeFrom → topicDels): the gateway panics.
func TestMQTTResumeWithoutExpiry(t *testing.T) {
	g := newGateway(t, withMQTT)
	a := dialRaw(t, g, "tcp", 5)
	reviewConnect(t, a, "review-rne", true, 60)
	if rc := a.subscribeQoS1(t, "review/rne").ReasonCodes; len(rc) != 1 || rc[0] != 1 {
		t.Fatalf("SUBACK %v, want [1]", rc)
	}
	reviewDisconnect(t, a, 0, packets.Properties{})
	a.expectClosed(t)
	waitSaved(t, g, "review-rne")

	b := dialRaw(t, g, "tcp", 5)
	if ack := reviewConnect(t, b, "review-rne", false, 0); !ack.SessionPresent {
		t.Fatal("no Session Present on resume")
	}
	if rc := b.publishRaw(t, 3, "review/rne", "x", packets.Properties{}); rc != 0 {
		t.Fatalf("PUBACK %#x, want success", rc)
	}
	if p := b.expect(t, packets.Publish); string(p.Payload) != "x" {
		t.Fatalf("delivery %q, want x", p.Payload)
	}
}
