package router_test

// MQTT persistent sessions with real clients (docs/mqtt.md, "Persistent
// sessions"): paho.golang for MQTT 5, paho.mqtt.golang for 3.1.1, raw
// packets where a client must not acknowledge.

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt311 "github.com/eclipse/paho.mqtt.golang"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine"
)

// dialSession connects a paho client of protocol level version with
// client id id, clean or not, and (MQTT 5) session expiry interval expiry,
// and returns it with the CONNACK's Session Present. The client acks
// every QoS 1 and 2 delivery.
func dialSession(t *testing.T, g *gateway, version byte, transport, id string, clean bool, expiry uint32) (*mqttClient, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c := &mqttClient{msgs: make(chan mqttMsg, 1024)}
	if version == 5 {
		nc, err := dialMQTTConn(ctx, g, transport)
		if err != nil {
			t.Fatal(err)
		}
		c.v5 = paho.NewClient(paho.ClientConfig{Conn: nc,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
				c.msgs <- mqttMsg{topic: pr.Packet.Topic, payload: string(pr.Packet.Payload), qos: pr.Packet.QoS}
				return true, nil
			}}})
		cp := &paho.Connect{ClientID: id, CleanStart: clean, KeepAlive: 30, Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}
		ack, err := c.v5.Connect(ctx, cp)
		if err != nil {
			nc.Close()
			t.Fatalf("connect %s: %v", id, err)
		}
		t.Cleanup(func() { _ = c.v5.Disconnect(&paho.Disconnect{}) })
		return c, ack.SessionPresent
	}
	opts := mqtt311.NewClientOptions().AddBroker("tcp://" + g.rt.MQTTAddr().String()).SetClientID(id).SetProtocolVersion(4).
		SetCleanSession(clean).SetAutoReconnect(false).SetOrderMatters(true).SetKeepAlive(30 * time.Second).
		SetConnectTimeout(waitTimeout).
		SetDefaultPublishHandler(func(_ mqtt311.Client, m mqtt311.Message) {
			c.msgs <- mqttMsg{topic: m.Topic(), payload: string(m.Payload()), qos: m.Qos()}
		})
	c.v3 = mqtt311.NewClient(opts)
	tok := c.v3.Connect()
	if err := wait311(tok); err != nil {
		t.Fatalf("connect %s: %v", id, err)
	}
	t.Cleanup(func() { c.v3.Disconnect(50) })
	return c, tok.(*mqtt311.ConnectToken).SessionPresent()
}

// leave disconnects c normally and waits until the gateway has saved the
// session of client id id with its expiry time.
func (c *mqttClient) leave(t *testing.T, g *gateway, id string) {
	t.Helper()
	if c.v5 != nil {
		if err := c.v5.Disconnect(&paho.Disconnect{}); err != nil {
			t.Fatal(err)
		}
	} else {
		c.v3.Disconnect(50)
	}
	waitSaved(t, g, id)
}

// waitSaved waits until the stored session of client id id has an expiry
// time: its connection's end saved it.
func waitSaved(t *testing.T, g *gateway, id string) {
	t.Helper()
	st := g.eng.(engine.MQTTSessionStore)
	waitUntil(t, "the session of "+id+" is saved by its end", func() bool {
		rec, ok, err := st.LoadMQTTSession(context.Background(), id, time.Now())
		return err == nil && ok && !rec.ExpiresAt.IsZero()
	})
}

func sessionResult(t *testing.T, g *gateway, result string) float64 {
	return metricValue(t, g.reg, "switchyard_mqtt_sessions_total", map[string]string{"result": result})
}

// expectFresh reads the next messages and checks their payloads, in
// order, skipping those of seen: QoS 1 is at least once, and a client
// that leaves right after a delivery may not have sent its PUBACK.
func (c *mqttClient) expectFresh(t *testing.T, seen map[string]bool, want ...string) {
	t.Helper()
	for _, w := range want {
		m := c.next(t)
		for seen[m.payload] && m.payload != w {
			m = c.next(t)
		}
		if m.payload != w {
			t.Fatalf("got %q on %s, want %q", m.payload, m.topic, w)
		}
		seen[w] = true
	}
}

// expectPayloads reads the next messages and checks their payloads, in
// order.
func (c *mqttClient) expectPayloads(t *testing.T, want ...string) {
	t.Helper()
	for _, w := range want {
		if m := c.next(t); m.payload != w {
			t.Fatalf("got %q on %s, want %q", m.payload, m.topic, w)
		}
	}
}

// TestMQTTPersistentSessionResume: a session that is not clean (3.1.1
// clean session 0; MQTT 5 clean start 0 with a session expiry) keeps its
// subscriptions while its client is away: on reconnect Session Present is
// 1, the QoS 1 messages published meanwhile come first, in order, the
// QoS 0 subscription's do not (it is live again), and both deliver live.
func TestMQTTPersistentSessionResume(t *testing.T) {
	g := newGateway(t, withMQTT)
	pub, _ := dialSession(t, g, 5, "tcp", "ps-pub", true, 0)
	for _, tc := range []struct {
		v  byte
		tr string
	}{{4, "tcp"}, {5, "tcp"}, {5, "ws"}} {
		t.Run(fmt.Sprintf("v%d/%s", tc.v, tc.tr), func(t *testing.T) {
			id := fmt.Sprintf("ps-%d-%s", tc.v, tc.tr)
			t1, t0 := fmt.Sprintf("ps/%d%s/q1", tc.v, tc.tr), fmt.Sprintf("ps/%d%s/q0", tc.v, tc.tr)
			c, present := dialSession(t, g, tc.v, tc.tr, id, false, 600)
			if present {
				t.Fatal("Session Present 1 on the first connect")
			}
			if rc := c.subscribe(t, t1, 1); rc != 1 {
				t.Fatalf("SUBACK %d", rc)
			}
			if rc := c.subscribe(t, t0, 0); rc != 0 {
				t.Fatalf("SUBACK %d", rc)
			}
			pub.publish(t, t1, 1, "before")
			c.expectPayloads(t, "before")
			c.leave(t, g, id)

			for i := range 3 {
				pub.publish(t, t1, 1, fmt.Sprint("away", i))
			}
			pub.publish(t, t0, 1, "away-qos0")
			resumed := sessionResult(t, g, "resumed")
			c2, present := dialSession(t, g, tc.v, tc.tr, id, false, 600)
			if !present {
				t.Fatal("Session Present 0 on the reconnect")
			}
			if got := sessionResult(t, g, "resumed"); got != resumed+1 {
				t.Fatalf("resumed %v, want %v", got, resumed+1)
			}
			seen := map[string]bool{"before": true}
			c2.expectFresh(t, seen, "away0", "away1", "away2")
			pub.publish(t, t0, 1, "live-qos0")
			pub.publish(t, t1, 1, "live-qos1")
			c2.expectFresh(t, seen, "live-qos0", "live-qos1")
			c2.leave(t, g, id)
			// The messages delivered and acked are not delivered again.
			pub.publish(t, t1, 1, "again")
			c3, present := dialSession(t, g, tc.v, tc.tr, id, false, 600)
			if !present {
				t.Fatal("Session Present 0 on the second reconnect")
			}
			c3.expectFresh(t, seen, "again")
		})
	}
}

// TestMQTTPersistentSessionCleanStart: a clean connect discards the stored
// session: Session Present 0, nothing of what was published meanwhile,
// and the next connect that is not clean finds no session.
func TestMQTTPersistentSessionCleanStart(t *testing.T) {
	g := newGateway(t, withMQTT)
	pub, _ := dialSession(t, g, 5, "tcp", "pc-pub", true, 0)
	for _, v := range []byte{4, 5} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			id, topic := fmt.Sprintf("pc-%d", v), fmt.Sprintf("pc/%d", v)
			c, _ := dialSession(t, g, v, "tcp", id, false, 600)
			c.subscribe(t, topic, 1)
			c.leave(t, g, id)
			pub.publish(t, topic, 1, "away")
			discarded := sessionResult(t, g, "discarded")
			c2, present := dialSession(t, g, v, "tcp", id, true, 0)
			if present {
				t.Fatal("Session Present 1 on a clean connect")
			}
			if got := sessionResult(t, g, "discarded"); got != discarded+1 {
				t.Fatalf("discarded %v, want %v", got, discarded+1)
			}
			c2.subscribe(t, topic+"/x", 1)
			pub.publish(t, topic+"/x", 1, "live")
			c2.expectPayloads(t, "live") // not "away"
			if v == 5 {
				_ = c2.v5.Disconnect(&paho.Disconnect{})
			} else {
				c2.v3.Disconnect(50)
			}
			c3, present := dialSession(t, g, v, "tcp", id, false, 600)
			if present {
				t.Fatal("Session Present 1 after a clean connect discarded the session")
			}
			c3.subscribe(t, topic+"/y", 1)
			pub.publish(t, topic, 1, "not subscribed")
			pub.publish(t, topic+"/y", 1, "live")
			c3.expectPayloads(t, "live")
		})
	}
}

// TestMQTTPersistentSessionExpiry: an MQTT 5 session lasts its expiry
// interval once its connection is gone: the sweeper removes it, counted,
// and the client id then starts afresh.
func TestMQTTPersistentSessionExpiry(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) { c.router.MQTT.SessionSweep = 20 * time.Millisecond })
	c, _ := dialSession(t, g, 5, "tcp", "pe-1", false, 1)
	c.subscribe(t, "pe/t", 1)
	expired := sessionResult(t, g, "expired")
	_ = c.v5.Disconnect(&paho.Disconnect{})
	waitMetric(t, g, "switchyard_mqtt_sessions_total", map[string]string{"result": "expired"}, expired+1)
	waitMetric(t, g, "switchyard_mqtt_sessions_stored", nil, 0)
	if _, present := dialSession(t, g, 5, "tcp", "pe-1", false, 1); present {
		t.Fatal("Session Present 1 after the session expired")
	}
}

// TestMQTTPersistentSessionInFlightDup: QoS 1 deliveries sent and not
// acknowledged when the connection is lost are delivered again on
// resume, with DUP; once acknowledged they are not.
func TestMQTTPersistentSessionInFlightDup(t *testing.T) {
	g := newGateway(t, withMQTT)
	pub, _ := dialSession(t, g, 5, "tcp", "pd-pub", true, 0)
	connect := func() (*rawMQTT, packets.Packet) { return connectPersistent(t, g, "pd-1") }
	r, ack := connect()
	if ack.ReasonCode != 0 || ack.SessionPresent {
		t.Fatalf("CONNACK %#x present %v", ack.ReasonCode, ack.SessionPresent)
	}
	r.subscribeQoS1(t, "pd/t")
	pub.publish(t, "pd/t", 1, "m1")
	pub.publish(t, "pd/t", 1, "m2")
	for _, w := range []string{"m1", "m2"} {
		p := r.expect(t, packets.Publish)
		if string(p.Payload) != w || p.FixedHeader.Dup {
			t.Fatalf("PUBLISH %q dup %v, want %q without DUP", p.Payload, p.FixedHeader.Dup, w)
		}
	}

	_ = r.nc.Close() // lost, nothing acknowledged
	waitSaved(t, g, "pd-1")

	r, ack = connect()
	if !ack.SessionPresent {
		t.Fatal("Session Present 0 on the reconnect")
	}
	for _, w := range []string{"m1", "m2"} {
		p := r.expect(t, packets.Publish)
		if string(p.Payload) != w || !p.FixedHeader.Dup || p.FixedHeader.Qos != 1 {
			t.Fatalf("PUBLISH %q dup %v QoS %d, want %q again with DUP at QoS 1", p.Payload, p.FixedHeader.Dup, p.FixedHeader.Qos, w)
		}
		r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: p.PacketID})
	}
	pub.publish(t, "pd/t", 1, "m3")
	if p := r.expect(t, packets.Publish); string(p.Payload) != "m3" || p.FixedHeader.Dup {
		t.Fatalf("PUBLISH %q dup %v, want m3", p.Payload, p.FixedHeader.Dup)
	} else {
		r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: p.PacketID})
	}

	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	r.expect(t, packets.Pingresp) // the PUBACKs were read before
	_ = r.nc.Close()
	waitSaved(t, g, "pd-1")
	r, ack = connect()
	if !ack.SessionPresent {
		t.Fatal("Session Present 0 on the second reconnect")
	}
	pub.publish(t, "pd/t", 1, "m4")
	if p := r.expect(t, packets.Publish); string(p.Payload) != "m4" {
		t.Fatalf("PUBLISH %q, want m4 (nothing acknowledged again)", p.Payload)
	}
}

// TestMQTTPersistentSessionGap: messages retention trimmed before a
// resumed session got them are counted in
// switchyard_mqtt_session_gaps_total; the rest are delivered.
func TestMQTTPersistentSessionGap(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.engine.Defaults = engine.TopicConfig{Partitions: 1, MaxMessages: 2, OnFull: engine.DropOldest}
	})
	pub, _ := dialSession(t, g, 5, "tcp", "pg-pub", true, 0)
	c, _ := dialSession(t, g, 5, "tcp", "pg-1", false, 600)
	c.subscribe(t, "pg/t", 1)
	pub.publish(t, "pg/t", 1, "seen")
	c.expectPayloads(t, "seen")
	c.leave(t, g, "pg-1")
	for i := range 5 {
		pub.publish(t, "pg/t", 1, fmt.Sprint("away", i))
	}
	c2, present := dialSession(t, g, 5, "tcp", "pg-1", false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	c2.expectPayloads(t, "away3", "away4")
	waitMetric(t, g, "switchyard_mqtt_session_gaps_total", nil, 3)
}

// TestMQTTPersistentSessionBounds: past --mqtt-max-sessions a CONNECT
// that would store one more session is refused (0x97; 3 for 3.1.1),
// while clean sessions and the stored one's own client id connect; a
// SUBSCRIBE past --mqtt-max-session-bytes gets 0x97.
func TestMQTTPersistentSessionBounds(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.router.MQTT.MaxSessions = 1
		c.router.MQTT.MaxSessionBytes = 400
	})
	c, _ := dialSession(t, g, 5, "tcp", "pb-1", false, 600)
	if rc := c.subscribe(t, "pb/a", 1); rc != 1 {
		t.Fatalf("SUBACK %#x", rc)
	}
	long := "pb/" + string(make([]byte, 0, 400))
	for range 400 {
		long += "x"
	}
	if rc := c.subscribe(t, long, 1); rc != 0x97 {
		t.Fatalf("SUBACK %#x for a filter past the session's bytes, want 0x97", rc)
	}
	for _, v := range []byte{4, 5} {
		r := dialRaw(t, g, "tcp", v)
		pk := connectPacket(fmt.Sprintf("pb-other-%d", v), 30)
		pk.Connect.Clean = false
		pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = 600, v == 5
		r.send(t, pk)
		want := byte(0x97)
		if v == 4 {
			want = 3
		}
		if ack := r.expect(t, packets.Connack); ack.ReasonCode != want {
			t.Fatalf("v%d CONNACK %#x past the session bound, want %#x", v, ack.ReasonCode, want)
		}
	}
	if got := sessionResult(t, g, "refused_full"); got != 2 {
		t.Fatalf("refused_full %v, want 2", got)
	}
	dialSession(t, g, 5, "tcp", "pb-clean", true, 0)
	if _, present := dialSession(t, g, 5, "tcp", "pb-1", false, 600); !present {
		t.Fatal("the stored session's own client id was not resumed at the bound")
	}
}

// TestMQTTPersistentSessionShared: a shared subscription of a persistent
// session joins its group again on resume and gets what the group kept
// while the client was away.
func TestMQTTPersistentSessionShared(t *testing.T) {
	g := newGateway(t, withMQTT)
	pub, _ := dialSession(t, g, 5, "tcp", "psh-pub", true, 0)
	c, _ := dialSession(t, g, 5, "tcp", "psh-1", false, 600)
	if rc := c.subscribe(t, "$share/pshg/psh/#", 1); rc != 1 {
		t.Fatalf("SUBACK %#x", rc)
	}
	pub.publish(t, "psh/a", 1, "first")
	c.expectPayloads(t, "first")
	// The client acknowledges after its handler has the message: leaving
	// before the gateway has its PUBACK would have "first" come again.
	waitUntil(t, "the group commits past first", func() bool {
		gs, err := g.eng.Groups(context.Background())
		if err != nil {
			return false
		}
		for _, gi := range gs {
			for _, p := range gi.Partitions {
				if gi.Name == "pshg" && p.Topic == "psh.a" && p.Committed >= 1 {
					return true
				}
			}
		}
		return false
	})
	c.leave(t, g, "psh-1")
	pub.publish(t, "psh/a", 1, "away")
	c2, present := dialSession(t, g, 5, "tcp", "psh-1", false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	c2.expectPayloads(t, "away")
}

// TestMQTTPersistentSessionTakeover: a second connection with the client
// id of a running persistent session on the same gateway takes it over
// from that session's last positions: the delivery the first connection
// had not acknowledged comes again with DUP, the first is told 0x8E, and
// the subscription delivers live to the second. An UNSUBSCRIBE is
// stored: the filter is not restored.
func TestMQTTPersistentSessionTakeover(t *testing.T) {
	g := newGateway(t, withMQTT)
	pub, _ := dialSession(t, g, 5, "tcp", "pt-pub", true, 0)
	connect := func() (*rawMQTT, packets.Packet) { return connectPersistent(t, g, "pt-1") }
	r1, _ := connect()
	r1.subscribeQoS1(t, "pt/a", "pt/b")
	var b bytes.Buffer
	un := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1}, ProtocolVersion: 5, PacketID: 2,
		Filters: packets.Subscriptions{{Filter: "pt/b"}}}
	if err := un.UnsubscribeEncode(&b); err != nil {
		t.Fatal(err)
	}
	r1.write(t, b.Bytes())
	r1.expect(t, packets.Unsuback)
	pub.publish(t, "pt/a", 1, "m1")
	if p := r1.expect(t, packets.Publish); string(p.Payload) != "m1" {
		t.Fatalf("PUBLISH %q, want m1", p.Payload)
	}
	r2, ack := connect() // r1 still open, m1 not acknowledged
	if ack.ReasonCode != 0 || !ack.SessionPresent {
		t.Fatalf("CONNACK %#x present %v, want the session taken over", ack.ReasonCode, ack.SessionPresent)
	}
	if d := r1.expect(t, packets.Disconnect); d.ReasonCode != 0x8E {
		t.Fatalf("first connection: DISCONNECT %#x, want 0x8E", d.ReasonCode)
	}
	p := r2.expect(t, packets.Publish)
	if string(p.Payload) != "m1" || !p.FixedHeader.Dup {
		t.Fatalf("PUBLISH %q dup %v, want m1 again with DUP", p.Payload, p.FixedHeader.Dup)
	}
	r2.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: p.PacketID})
	pub.publish(t, "pt/b", 1, "unsubscribed")
	pub.publish(t, "pt/a", 1, "m2")
	if p := r2.expect(t, packets.Publish); string(p.Payload) != "m2" || p.FixedHeader.Dup {
		t.Fatalf("PUBLISH %q dup %v, want m2", p.Payload, p.FixedHeader.Dup)
	}
}

// connectPersistent connects a raw MQTT 5 client over TCP with client id
// id, clean start 0 and a session expiry of 600 s, and returns it with
// its CONNACK.
func connectPersistent(t *testing.T, g *gateway, id string) (*rawMQTT, packets.Packet) {
	t.Helper()
	r := dialRaw(t, g, "tcp", 5)
	pk := connectPacket(id, 30)
	pk.Connect.Clean = false
	pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = 600, true
	r.send(t, pk)
	return r, r.expect(t, packets.Connack)
}
