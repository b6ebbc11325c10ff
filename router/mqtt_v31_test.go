package router_test

// MQTT 3.1 (protocol level 3, "MQIsdp"): paho.mqtt.golang's level 3
// client, and raw packets for what it never sends.

import (
	"strings"
	"testing"
	"time"

	mqtt311 "github.com/eclipse/paho.mqtt.golang"
	"github.com/mochi-mqtt/server/v2/packets"
)

// dial31 connects paho.mqtt.golang at protocol level 3 with client id id.
func dial31(t *testing.T, g *gateway, id string, clean bool) (mqtt311.Client, chan mqttMsg, error) {
	t.Helper()
	msgs := make(chan mqttMsg, 64)
	opts := mqtt311.NewClientOptions().AddBroker("tcp://" + g.rt.MQTTAddr().String()).SetClientID(id).
		SetProtocolVersion(3).SetCleanSession(clean).SetAutoReconnect(false).SetOrderMatters(true).
		SetKeepAlive(30 * time.Second).SetConnectTimeout(waitTimeout).
		SetDefaultPublishHandler(func(_ mqtt311.Client, m mqtt311.Message) {
			msgs <- mqttMsg{topic: m.Topic(), payload: string(m.Payload()), qos: m.Qos(), retain: m.Retained()}
		})
	c := mqtt311.NewClient(opts)
	if err := wait311(c.Connect()); err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { c.Disconnect(250) })
	return c, msgs, nil
}

// TestMQTTv31Clients: paho at level 3 connects, subscribes and exchanges
// messages at QoS 0 to 2 with a 3.1.1 and an MQTT 5 client (deliveries
// at the granted QoS, as for every level); a client id
// of 24 bytes is refused with return code 2.
func TestMQTTv31Clients(t *testing.T) {
	g := newGateway(t, withMQTT)
	sub, msgs, err := dial31(t, g, "v31-sub", true)
	if err != nil {
		t.Fatalf("MQTT 3.1 connect: %v", err)
	}
	tok := sub.Subscribe("v31/#", 2, nil)
	if err := wait311(tok); err != nil {
		t.Fatal(err)
	}
	if rc := tok.(*mqtt311.SubscribeToken).Result()["v31/#"]; rc != 2 {
		t.Fatalf("SUBACK %#x, want 2", rc)
	}
	p4, err := dialMQTT(t, g, 4, "tcp", "v31-p4", "")
	if err != nil {
		t.Fatal(err)
	}
	p5, err := dialMQTT(t, g, 5, "tcp", "v31-p5", "")
	if err != nil {
		t.Fatal(err)
	}
	for q := byte(0); q <= 2; q++ {
		p4.publish(t, "v31/a", q, "from 3.1.1")
		if m := <-recv(t, msgs); m.topic != "v31/a" || m.payload != "from 3.1.1" || m.qos != 2 {
			t.Fatalf("QoS %d: %+v", q, m)
		}
	}
	p5.publish(t, "v31/b", 1, "from 5")
	if m := <-recv(t, msgs); m.topic != "v31/b" || m.payload != "from 5" {
		t.Fatalf("from MQTT 5: %+v", m)
	}
	// And back: the 3.1 client publishes at each QoS.
	if rc := p5.subscribe(t, "v31/back", 2); rc != 2 {
		t.Fatalf("SUBACK %#x", rc)
	}
	for q := byte(0); q <= 2; q++ {
		if err := wait311(sub.Publish("v31/back", q, false, "from 3.1")); err != nil {
			t.Fatal(err)
		}
		if m := p5.next(t); m.payload != "from 3.1" || m.qos != 2 {
			t.Fatalf("QoS %d from 3.1: %+v", q, m)
		}
	}

	if _, _, err := dial31(t, g, strings.Repeat("x", 23), true); err != nil {
		t.Fatalf("a 23-byte client id: %v", err)
	}
	_, _, err = dial31(t, g, strings.Repeat("x", 24), true)
	if err == nil || !strings.Contains(err.Error(), "identifier rejected") {
		t.Fatalf("a 24-byte client id: %v, want identifier rejected", err)
	}
}

// recv hands the next message of msgs on a channel, failing the test
// after waitTimeout.
func recv(t *testing.T, msgs chan mqttMsg) <-chan mqttMsg {
	t.Helper()
	select {
	case m := <-msgs:
		c := make(chan mqttMsg, 1)
		c <- m
		return c
	case <-time.After(waitTimeout):
		t.Fatal("no MQTT 3.1 message")
		return nil
	}
}

// TestMQTTv31Packets: the CONNACK of a 3.1 session never sets the
// session-present bit (reserved in 3.1); an empty client id is refused
// (return code 2); "MQTT" at level 3 and "MQIsdp" at level 4 are refused
// with return code 1; a SUBSCRIBE with a refused filter closes the
// connection, since a 3.1 SUBACK has no failure code.
func TestMQTTv31Packets(t *testing.T) {
	g := newGateway(t, withMQTT)
	connect31 := func(id string, clean bool) packets.Packet {
		return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
			Connect: packets.ConnectParams{ProtocolName: []byte("MQIsdp"), ClientIdentifier: id, Clean: clean, Keepalive: 30}}
	}

	// A session that is not clean, then resumed (its subscription
	// delivers): session present stays 0.
	for i := range 2 {
		r := dialRaw(t, g, "tcp", 3)
		r.send(t, connect31("v31-keep", false))
		b := make([]byte, 4)
		_ = r.nc.SetReadDeadline(time.Now().Add(waitTimeout))
		if _, err := r.br.Read(b[:1]); err != nil {
			t.Fatal(err)
		}
		if _, err := r.br.Read(b[1:]); err != nil {
			t.Fatal(err)
		}
		if b[0] != 0x20 || b[1] != 2 || b[2] != 0 || b[3] != 0 {
			t.Fatalf("connect %d: CONNACK % x, want 20 02 00 00", i, b)
		}
		if i == 0 {
			if ack := r.subscribeQoS1(t, "keep/x"); len(ack.ReasonCodes) != 1 || ack.ReasonCodes[0] != 1 {
				t.Fatalf("SUBACK %v", ack.ReasonCodes)
			}
		} else {
			// The session was kept: its subscription delivers.
			httpPublish(t, g, "keep.x", 7)
			if pk := r.expect(t, packets.Publish); pk.TopicName != "keep/x" || string(pk.Payload) != "7" {
				t.Fatalf("resumed 3.1 session got %s %q", pk.TopicName, pk.Payload)
			}
		}
		r.write(t, []byte{packets.Disconnect << 4, 0})
		r.expectClosed(t)
	}

	refusals := []struct {
		name string
		v    byte
		pk   packets.Packet
		want byte
	}{
		{"empty client id", 3, connect31("", true), 2},
		{"MQTT at level 3", 3, func() packets.Packet { p := connect31("x", true); p.Connect.ProtocolName = []byte("MQTT"); return p }(), 1},
		{"MQIsdp at level 4", 4, connect31("x", true), 1},
	}
	for _, c := range refusals {
		t.Run(c.name, func(t *testing.T) {
			r := dialRaw(t, g, "tcp", c.v)
			r.send(t, c.pk)
			if ack := r.expect(t, packets.Connack); ack.ReasonCode != c.want {
				t.Fatalf("CONNACK %#x, want %#x", ack.ReasonCode, c.want)
			}
			r.expectClosed(t)
		})
	}

	t.Run("refused filter closes", func(t *testing.T) {
		r := dialRaw(t, g, "tcp", 3)
		r.send(t, connect31("v31-bad", true))
		r.expect(t, packets.Connack)
		r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
			Filters: packets.Subscriptions{{Filter: "ok/x", Qos: 1}, {Filter: "bad/#/x", Qos: 1}}})
		r.expectClosed(t)
	})
}
