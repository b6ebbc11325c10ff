package router_test

// A persistent session resuming with a backlog past its bounds while its
// client does not acknowledge: the replay waits for the window, the
// session's other packets still go out, live deliveries past the held
// bounds are dropped and counted as before, and the session still ends
// by its keep alive (docs/mqtt.md, "Persistent sessions").

import (
	"strconv"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// connectPersistentKeepAlive is connectPersistent with keep alive ka
// seconds.
func connectPersistentKeepAlive(t *testing.T, g *gateway, id string, ka uint16) (*rawMQTT, packets.Packet) {
	t.Helper()
	r := dialRaw(t, g, "tcp", 5)
	pk := connectPacket(id, ka)
	pk.Connect.Clean = false
	pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = 600, true
	r.send(t, pk)
	return r, r.expect(t, packets.Connack)
}

// ackBacklog acknowledges every PUBLISH it reads until topic's payloads
// "m"+from to "m"+(to-1) came, in order; other topics' are acknowledged
// and left. dup, when set, lists the payloads that must come with DUP.
func (r *rawMQTT) ackBacklog(t *testing.T, topic string, from, to int, dup map[string]bool) {
	t.Helper()
	for i := from; i < to; {
		pk, err := r.read(t)
		if err != nil {
			t.Fatalf("waiting for m%d on %s: %v", i, topic, err)
		}
		if pk.FixedHeader.Type != packets.Publish {
			continue
		}
		if pk.FixedHeader.Qos > 0 {
			r.puback(t, pk.PacketID)
		}
		if pk.TopicName != topic {
			continue
		}
		want := "m" + strconv.Itoa(i)
		if string(pk.Payload) != want {
			t.Fatalf("got %q on %s, want %q (the replay lost or reordered messages)", pk.Payload, topic, want)
		}
		if dup[want] && !pk.FixedHeader.Dup {
			t.Fatalf("%s without DUP, want DUP: it was in flight when the session was saved", want)
		}
		i++
	}
}

// resumeWithBacklog makes the persistent session id with a QoS 1
// subscription to topic, ends its connection, and publishes n messages
// "m0"... to topic; it returns the publisher.
func resumeWithBacklog(t *testing.T, g *gateway, id, topic string, n int) *mqttClient {
	t.Helper()
	r, _ := connectPersistentKeepAlive(t, g, id, 30)
	if sa := r.subscribeQoS1(t, topic); len(sa.ReasonCodes) != 1 || sa.ReasonCodes[0] != 1 {
		t.Fatalf("SUBACK %v", sa.ReasonCodes)
	}
	_ = r.nc.Close()
	waitSaved(t, g, id)
	pub, _ := dialSession(t, g, 5, "tcp", id+"-pub", true, 0)
	for i := range n {
		pub.publish(t, topic, 1, "m"+strconv.Itoa(i))
	}
	return pub
}

// TestMQTTResumeBacklogWindowStuck: a session resumes with 100 messages
// waiting (queue bound 16, window 2) and acknowledges nothing at first:
// it gets the 2 the window lets go, then its PINGRESP and the SUBACK of a
// new filter as usual; live QoS 1 deliveries to that filter meanwhile are
// dropped past the held bound and counted. Once it acknowledges, the
// replay goes on: all 100 arrive, in order.
func TestMQTTResumeBacklogWindowStuck(t *testing.T) {
	const n = 100
	g := newGateway(t, withResumeBounds(16, 2, 0))
	pub := resumeWithBacklog(t, g, "rbw-1", "rbw/t", n)

	r, ack := connectPersistentKeepAlive(t, g, "rbw-1", 30)
	if !ack.SessionPresent {
		t.Fatal("Session Present 0")
	}
	p0, p1 := r.expect(t, packets.Publish), r.expect(t, packets.Publish)
	if string(p0.Payload) != "m0" || string(p1.Payload) != "m1" {
		t.Fatalf("first deliveries %q, %q, want m0, m1", p0.Payload, p1.Payload)
	}
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	r.expect(t, packets.Pingresp) // nothing else: the window is full
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 2,
		Filters: packets.Subscriptions{{Filter: "rbw/live", Qos: 1}}})
	if sa := r.expect(t, packets.Suback); sa.PacketID != 2 || len(sa.ReasonCodes) != 1 || sa.ReasonCodes[0] != 1 {
		t.Fatalf("SUBACK %d %v, want 2 [1]", sa.PacketID, sa.ReasonCodes)
	}
	window := map[string]string{"why": "window_full"}
	live := 0
	waitUntil(t, "a live delivery past the held bound is dropped, counted", func() bool {
		pub.publish(t, "rbw/live", 1, "live"+strconv.Itoa(live))
		live++
		return metricValue(t, g.reg, "switchyard_mqtt_skipped_total", window) > 0
	})
	if d := metricValue(t, g.reg, "switchyard_drops_total", nil); d == 0 {
		t.Fatal("live deliveries dropped for the window, none counted in switchyard_drops_total")
	}

	r.puback(t, p0.PacketID)
	r.puback(t, p1.PacketID)
	r.ackBacklog(t, "rbw/t", 2, n, nil)
}

// TestMQTTResumeBacklogWindowStuckEnds: a resumed session that gets its
// window's 2 deliveries of a backlog of 100 and then sends nothing is
// ended by its keep alive (DISCONNECT 0x8D), the replay waiting for the
// window with it; the next connection gets the whole backlog, in order,
// the 2 in flight again with DUP.
func TestMQTTResumeBacklogWindowStuckEnds(t *testing.T) {
	const n = 100
	g := newGateway(t, withResumeBounds(16, 2, 0))
	resumeWithBacklog(t, g, "rbe-1", "rbe/t", n)

	r, ack := connectPersistentKeepAlive(t, g, "rbe-1", 1)
	if !ack.SessionPresent {
		t.Fatal("Session Present 0")
	}
	start := time.Now()
	r.expect(t, packets.Publish)
	r.expect(t, packets.Publish)
	if d := r.expect(t, packets.Disconnect); d.ReasonCode != 0x8D {
		t.Fatalf("DISCONNECT %#x, want 0x8D (keep alive timeout)", d.ReasonCode)
	}
	if el := time.Since(start); el < time.Second {
		t.Fatalf("ended after %v, before the keep alive", el)
	}
	waitSaved(t, g, "rbe-1")

	r, ack = connectPersistentKeepAlive(t, g, "rbe-1", 30)
	if !ack.SessionPresent {
		t.Fatal("Session Present 0 after the keep alive ended the session")
	}
	r.ackBacklog(t, "rbe/t", 0, n, map[string]bool{"m0": true, "m1": true})
	expectNoDrops(t, g)
}
