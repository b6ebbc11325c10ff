package router_test

// A persistent session that UNSUBSCRIBEs a filter while the filter's
// resume replay waits for the in-flight window.

import (
	"bytes"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/mqtt"
)

// TestMQTTResumeReplayStopsAtUnsubscribe: a session resumes with 100 QoS 1
// messages waiting (queue bound 8, window 1), gets m0 and acknowledges
// nothing, then UNSUBSCRIBEs the filter. After its UNSUBACK the server
// must stop adding messages of the filter [MQTT-3.10.4-2]: what it had
// queued or held for the window then (the replay's budget, 8) may still
// come, not the rest of the backlog.
func TestMQTTResumeReplayStopsAtUnsubscribe(t *testing.T) {
	const n, bound = 100, 8
	g := newGateway(t, withResumeBounds(bound, 1, 0))
	resumeWithBacklog(t, g, "rvu-1", "rvu/a", n)

	r, ack := connectPersistentKeepAlive(t, g, "rvu-1", 30)
	if !ack.SessionPresent {
		t.Fatal("Session Present 0")
	}
	p0 := r.expect(t, packets.Publish)
	un := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1}, PacketID: 7,
		ProtocolVersion: 5, Filters: packets.Subscriptions{{Filter: "rvu/a"}}}
	var b bytes.Buffer
	if err := un.UnsubscribeEncode(&b); err != nil {
		t.Fatal(err)
	}
	r.write(t, b.Bytes())
	if ua := r.expect(t, packets.Unsuback); ua.PacketID != 7 {
		t.Fatalf("UNSUBACK %d, want 7", ua.PacketID)
	}
	r.puback(t, p0.PacketID)

	// Acknowledge whatever comes until the connection is quiet for a
	// second; count the filter's messages after the UNSUBACK.
	after, last := 0, ""
	for after <= bound+1 {
		_ = r.nc.SetReadDeadline(time.Now().Add(time.Second))
		pk, err := mqtt.ReadPacket(r.br, r.v, 1<<20)
		if err != nil {
			if isTimeout(err) {
				return // quiet: the replay stopped
			}
			t.Fatal(err)
		}
		if pk.FixedHeader.Type != packets.Publish {
			continue
		}
		if pk.FixedHeader.Qos > 0 {
			r.puback(t, pk.PacketID)
		}
		after++
		last = string(pk.Payload)
	}
	t.Fatalf("more than %d messages of the filter after its UNSUBACK (the last %q): the replay of an "+
		"unsubscribed filter goes on, paced by the window", bound+1, last)
}
