package router_test

// A persistent session's filter subscribed again from QoS 1 to 0 while a
// QoS 1 delivery of it is not acknowledged: a resume sends that delivery
// again [MQTT-4.4.0-1].

import (
	"fmt"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
	"github.com/switchyard/switchyard/router"
)

// TestMQTTResubQoSDownInFlightResent: "m1" is delivered at QoS 1 and not
// acknowledged, the filter is subscribed again at QoS 0 and delivers "m2"
// at QoS 0, and the connection is lost. On resume the first PUBLISH is
// "m1" again, at QoS 1 with DUP; once acknowledged, a later resume sends
// neither "m1" nor "m2" again. MQTT 5 and 3.1.1.
func TestMQTTResubQoSDownInFlightResent(t *testing.T) {
	g := newGateway(t, withMQTT)
	for _, v := range []byte{4, 5} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) { resubQoSDownInFlight(t, g, v, "rqd") })
	}
}

// TestMQTTResubQoSDownInFlightResentJetStream is
// TestMQTTResubQoSDownInFlightResent on JetStream.
func TestMQTTResubQoSDownInFlightResentJetStream(t *testing.T) {
	url := natstest.URL(t)
	g := newJSGatewayWith(t, url, natstest.Prefix(t, url), nil, router.Options{}, nil)
	resubQoSDownInFlight(t, g, 5, "rqdjs")
}

func resubQoSDownInFlight(t *testing.T, g *gateway, v byte, prefix string) {
	id, topic := fmt.Sprintf("%s-%d", prefix, v), fmt.Sprintf("%s/%d/t", prefix, v)
	pub, _ := dialSession(t, g, 5, "tcp", id+"-pub", true, 0)
	connect := func() (*rawMQTT, bool) { return connectRawPersistent(t, g, v, id) }
	r, _ := connect()
	r.subscribeQoS1(t, topic)
	pub.publish(t, topic, 1, "m1")
	p1 := r.expect(t, packets.Publish)
	if string(p1.Payload) != "m1" || p1.FixedHeader.Qos != 1 || p1.FixedHeader.Dup {
		t.Fatalf("PUBLISH %q QoS %d dup %v, want m1 at QoS 1", p1.Payload, p1.FixedHeader.Qos, p1.FixedHeader.Dup)
	}
	r.subscribeQoS0(t, topic) // m1 not acknowledged
	pub.publish(t, topic, 1, "m2")
	if p := r.expect(t, packets.Publish); string(p.Payload) != "m2" || p.FixedHeader.Qos != 0 {
		t.Fatalf("PUBLISH %q QoS %d, want m2 at QoS 0", p.Payload, p.FixedHeader.Qos)
	}
	_ = r.nc.Close() // lost, m1 not acknowledged
	waitSaved(t, g, id)

	r, present := connect()
	if !present {
		t.Fatal("Session Present 0 on the reconnect")
	}
	// m1 comes again before or alongside the live traffic; m2 does not.
	pub.publish(t, topic, 1, "live")
	var m1 packets.Packet
	for live := false; !live || m1.PacketID == 0; {
		pk, err := r.read(t)
		if err != nil {
			t.Fatalf("resume: m1 seen %v, live seen %v, then %v: "+
				"the unacknowledged delivery of a filter gone to QoS 0 was not sent again", m1.PacketID != 0, live, err)
		}
		if pk.FixedHeader.Type != packets.Publish {
			t.Fatalf("got %s, want PUBLISH", packets.PacketNames[pk.FixedHeader.Type])
		}
		switch string(pk.Payload) {
		case "m1":
			if m1.PacketID != 0 || pk.FixedHeader.Qos != 1 || !pk.FixedHeader.Dup {
				t.Fatalf("m1 again at QoS %d dup %v (once before: %v), want once at QoS 1 with DUP",
					pk.FixedHeader.Qos, pk.FixedHeader.Dup, m1.PacketID != 0)
			}
			m1 = pk
		case "live":
			if live || pk.FixedHeader.Qos != 0 {
				t.Fatalf("live again or at QoS %d", pk.FixedHeader.Qos)
			}
			live = true
		default:
			t.Fatalf("resume sent %q QoS %d dup %v", pk.Payload, pk.FixedHeader.Qos, pk.FixedHeader.Dup)
		}
	}
	t.Logf("m1 resent with packet identifier %d (first sent with %d)", m1.PacketID, p1.PacketID)
	pk := m1
	r.puback(t, pk.PacketID)
	r.noPublishYet(t) // the PUBACK was read; m2 is not sent again
	_ = r.nc.Close()
	waitSaved(t, g, id)

	r, present = connect()
	if !present {
		t.Fatal("Session Present 0 on the second reconnect")
	}
	pub.publish(t, topic, 1, "m3")
	if p := r.expect(t, packets.Publish); string(p.Payload) != "m3" || p.FixedHeader.Qos != 0 {
		t.Fatalf("PUBLISH %q QoS %d dup %v, want m3 at QoS 0 (m1 acknowledged, m2 delivered at QoS 0)",
			p.Payload, p.FixedHeader.Qos, p.FixedHeader.Dup)
	}
}

// connectRawPersistent connects a raw client of protocol level v with
// client id id, clean start 0 and (MQTT 5) a session expiry of 600 s, and
// returns it with the CONNACK's Session Present.
func connectRawPersistent(t *testing.T, g *gateway, v byte, id string) (*rawMQTT, bool) {
	t.Helper()
	r := dialRaw(t, g, "tcp", v)
	pk := connectPacket(id, 30)
	pk.Connect.Clean = false
	pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = 600, v == 5
	r.send(t, pk)
	ack := r.expect(t, packets.Connack)
	if ack.ReasonCode != 0 {
		t.Fatalf("CONNACK %#x", ack.ReasonCode)
	}
	return r, ack.SessionPresent
}

// subscribeQoS0 subscribes filter again at QoS 0 (packet id 2).
func (r *rawMQTT) subscribeQoS0(t *testing.T, filter string) {
	t.Helper()
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 2,
		Filters: packets.Subscriptions{{Filter: filter, Qos: 0}}})
	if ack := r.expect(t, packets.Suback); len(ack.ReasonCodes) != 1 || ack.ReasonCodes[0] != 0 {
		t.Fatalf("SUBACK %v, want QoS 0", ack.ReasonCodes)
	}
}

// TestMQTTResubQoSDownInFlightTrimmed: the delivery in flight of a filter
// gone to QoS 0 that retention trimmed before the resume is counted in
// switchyard_mqtt_session_gaps_total and not sent.
func TestMQTTResubQoSDownInFlightTrimmed(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.engine.Defaults = engine.TopicConfig{Partitions: 1, MaxMessages: 1, OnFull: engine.DropOldest}
	})
	checkInFlightTrimmed(t, g, "rqdt-1", "rqdt/t")
}

// checkInFlightTrimmed: topic keeps one record; m1, in flight of its filter
// gone to QoS 0, is trimmed by m2 before the resume, which counts it in
// switchyard_mqtt_session_gaps_total and does not send it.
func checkInFlightTrimmed(t *testing.T, g *gateway, id, topic string) {
	t.Helper()
	pub, _ := dialSession(t, g, 5, "tcp", id+"-pub", true, 0)
	r, _ := connectRawPersistent(t, g, 5, id)
	r.subscribeQoS1(t, topic)
	pub.publish(t, topic, 1, "m1")
	if p := r.expect(t, packets.Publish); string(p.Payload) != "m1" {
		t.Fatalf("PUBLISH %q, want m1", p.Payload)
	}
	r.subscribeQoS0(t, topic)      // m1 not acknowledged
	pub.publish(t, topic, 1, "m2") // trims m1
	if p := r.expect(t, packets.Publish); string(p.Payload) != "m2" || p.FixedHeader.Qos != 0 {
		t.Fatalf("PUBLISH %q QoS %d, want m2 at QoS 0", p.Payload, p.FixedHeader.Qos)
	}
	_ = r.nc.Close()
	waitSaved(t, g, id)
	r, present := connectRawPersistent(t, g, 5, id)
	if !present {
		t.Fatal("Session Present 0 on the reconnect")
	}
	waitMetric(t, g, "switchyard_mqtt_session_gaps_total", nil, 1)
	pub.publish(t, topic, 1, "live")
	if p := r.expect(t, packets.Publish); string(p.Payload) != "live" {
		t.Fatalf("PUBLISH %q, want live (m1 trimmed, m2 delivered at QoS 0)", p.Payload)
	}
}
