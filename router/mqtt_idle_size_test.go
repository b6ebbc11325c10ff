package router_test

// What an idle MQTT session does not hold until it needs it, end to end:
// the publish pipeline, made by the session's first PUBLISH.

import (
	"bytes"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/router"
)

// TestMQTTPublishPipelineMadeByFirstPublish: an MQTT session that only
// subscribes holds no publish pipeline, over TCP and GET /mqtt; a PUBREL
// before any publish is answered (PUBCOMP 0x92) without one; the first
// QoS 1 PUBLISH makes it and gets its PUBACK, and a PUBREL after it is
// answered in order behind it.
func TestMQTTPublishPipelineMadeByFirstPublish(t *testing.T) {
	for _, tr := range []string{"tcp", "ws"} {
		t.Run(tr, func(t *testing.T) {
			g := newGateway(t, withMQTT)
			r := dialRaw(t, g, tr, 5)
			r.connect(t, "lazypipe-"+tr, 30)
			if rc := r.subscribeQoS1(t, "lazypipe/sub").ReasonCodes; len(rc) != 1 || rc[0] != 1 {
				t.Fatalf("SUBACK %v, want [1]", rc)
			}
			pubrel := func(id uint16) {
				t.Helper()
				var b bytes.Buffer
				pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pubrel, Qos: 1}, PacketID: id, ProtocolVersion: 5}
				if err := pk.PubrelEncode(&b); err != nil {
					t.Fatal(err)
				}
				r.write(t, b.Bytes())
				if c := r.expect(t, packets.Pubcomp); c.PacketID != id || c.ReasonCode != 0x92 {
					t.Fatalf("PUBCOMP %d %#x, want %d 0x92", c.PacketID, c.ReasonCode, id)
				}
			}
			pubrel(7)
			if n, pipes := router.SessionPipes(g.rt); n != 1 || pipes != 0 {
				t.Fatalf("%d sessions, %d with a publish pipeline; want 1 without one before any publish", n, pipes)
			}
			if rc := r.publishRaw(t, 1, "lazypipe/pub", "x", packets.Properties{}); rc != 0 {
				t.Fatalf("PUBACK %#x, want success", rc)
			}
			if n, pipes := router.SessionPipes(g.rt); n != 1 || pipes != 1 {
				t.Fatalf("%d sessions, %d with a publish pipeline; want the publishing one with one", n, pipes)
			}
			pubrel(8)
		})
	}
}

// TestMQTTStoredPartOnlyForStoredSessions: a clean session without a
// session expiry makes no stored part (mqttStored); one with an expiry,
// and one that resumes it (clean start 0), make it, and the resumed one
// gets what was published while it was away.
func TestMQTTStoredPartOnlyForStoredSessions(t *testing.T) {
	g := newGateway(t, withMQTT)
	pub, _ := dialSession(t, g, 5, "ws", "part-pub", true, 0)
	kept, present := dialSession(t, g, 5, "tcp", "part-kept", true, 600)
	if present {
		t.Fatal("Session Present on a clean start")
	}
	if rc := kept.subscribe(t, "part/kept", 1); rc != 1 {
		t.Fatalf("SUBACK %d, want 1", rc)
	}
	if n, parts := router.MQTTStoredParts(g.rt); n != 2 || parts != 1 {
		t.Fatalf("%d MQTT sessions, %d with a stored part; want 2, of which the kept one", n, parts)
	}
	kept.leave(t, g, "part-kept")
	pub.publish(t, "part/kept", 1, "while away")
	back, present := dialSession(t, g, 5, "tcp", "part-kept", false, 600)
	if !present {
		t.Fatal("no Session Present on resume")
	}
	back.expectPayloads(t, "while away")
	if n, parts := router.MQTTStoredParts(g.rt); n != 2 || parts != 1 {
		t.Fatalf("%d MQTT sessions, %d with a stored part; want 2, of which the resumed one", n, parts)
	}
}
