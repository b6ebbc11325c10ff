package router_test

// Topic aliases from the gateway to MQTT 5 clients (mqtt_alias.go).

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestMQTTSentTopicAliasesPaho: a Paho MQTT 5 client allowing 4 aliases,
// over TCP and WebSocket, gets publishes on three topics, each several
// times and interleaved, each on the handler of its own topic (Paho's
// router resolves the aliases) with its payload; after a topic's first
// delivery the PUBLISH carries the alias and no topic name.
func TestMQTTSentTopicAliasesPaho(t *testing.T) {
	g := newGateway(t, withMQTT)
	for _, tr := range []string{"tcp", "ws"} {
		t.Run(tr, func(t *testing.T) {
			type got struct {
				handler, topic, payload string
				alias                   bool
			}
			recv := make(chan got, 64)
			router := paho.NewStandardRouter()
			for _, h := range []string{"al/a", "al/b", "al/c"} {
				router.RegisterHandler(h, func(p *paho.Publish) {
					recv <- got{handler: h, topic: p.Topic, payload: string(p.Payload),
						alias: p.Properties != nil && p.Properties.TopicAlias != nil}
				})
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			nc, err := dialMQTTConn(ctx, g, tr)
			if err != nil {
				t.Fatal(err)
			}
			c := paho.NewClient(paho.ClientConfig{Conn: nc, Router: router})
			max := uint16(4)
			if _, err := c.Connect(ctx, &paho.Connect{ClientID: "alias-paho-" + tr, CleanStart: true, KeepAlive: 30,
				Properties: &paho.ConnectProperties{TopicAliasMaximum: &max}}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = c.Disconnect(&paho.Disconnect{})
				select {
				case <-c.Done():
				case <-time.After(waitTimeout):
					t.Error("paho client did not stop")
				}
			})
			if _, err := c.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "al/+", QoS: 1}}}); err != nil {
				t.Fatal(err)
			}
			seen := map[string]int{}
			for i, topic := range []string{"a", "b", "a", "c", "b", "a", "c", "c", "a"} {
				httpPublish(t, g, "al."+topic, i)
				var m got
				select {
				case m = <-recv:
				case <-time.After(waitTimeout):
					t.Fatalf("publish %d on al/%s: nothing received", i, topic)
				}
				if m.handler != "al/"+topic || m.payload != fmt.Sprint(i) {
					t.Fatalf("publish %d on al/%s reached handler %s with %q", i, topic, m.handler, m.payload)
				}
				if !m.alias {
					t.Fatalf("publish %d on al/%s: no topic alias", i, topic)
				}
				if first := seen[topic] == 0; first != (m.topic != "") {
					t.Fatalf("publish %d on al/%s (delivery %d of the topic): topic name %q", i, topic, seen[topic]+1, m.topic)
				}
				seen[topic]++
			}
		})
	}
}

// rawAliasClient connects a raw MQTT 5 client allowing max topic
// aliases (0: none said) and subscribes it to filter at QoS 1.
func rawAliasClient(t *testing.T, g *gateway, id string, max uint16, filter string) *rawMQTT {
	t.Helper()
	r := dialRaw(t, g, "tcp", 5)
	pk := connectPacket(id, 30)
	pk.Properties.TopicAliasMaximum = max
	r.send(t, pk)
	if ack := r.expect(t, packets.Connack); ack.ReasonCode != 0 {
		t.Fatalf("CONNACK %#x", ack.ReasonCode)
	}
	if rc := r.subscribeID(t, 1, filter, 0); rc != 1 {
		t.Fatalf("SUBACK %#x", rc)
	}
	return r
}

// TestMQTTSentTopicAliasesPackets: on the wire, a client allowing 2
// aliases gets a topic's first PUBLISH with its name and alias 1, the
// second with an empty name and alias 1 (QoS 1, its packet identifier
// intact and acknowledged); a second topic gets alias 2; a third, past
// the client's maximum, goes with its name and no alias, counted once;
// a client whose CONNECT allows none, and one on a gateway with
// MaxSentTopicAliases -1, never get an alias; MaxSentTopicAliases 1
// bounds a client allowing more.
func TestMQTTSentTopicAliasesPackets(t *testing.T) {
	type want struct {
		native, topic string
		alias         uint16
	}
	expect := func(t *testing.T, g *gateway, r *rawMQTT, steps []want) {
		t.Helper()
		for i, w := range steps {
			httpPublish(t, g, w.native, i)
			pk := r.nextPublish(t)
			if pk.TopicName != w.topic || pk.Properties.TopicAlias != w.alias || string(pk.Payload) != fmt.Sprint(i) {
				t.Fatalf("step %d (%s): topic %q alias %d payload %q, want topic %q alias %d", i, w.native,
					pk.TopicName, pk.Properties.TopicAlias, pk.Payload, w.topic, w.alias)
			}
			if pk.PacketID == 0 {
				t.Fatalf("step %d: QoS 1 PUBLISH without a packet identifier", i)
			}
		}
	}

	t.Run("client allows 2", func(t *testing.T) {
		g := newGateway(t, withMQTT)
		r := rawAliasClient(t, g, "alias-raw", 2, "ra/#")
		expect(t, g, r, []want{
			{"ra.x", "ra/x", 1}, {"ra.x", "", 1}, {"ra.y", "ra/y", 2}, {"ra.x", "", 1},
			{"ra.z", "ra/z", 0}, {"ra.y", "", 2}, {"ra.z", "ra/z", 0},
		})
		if v := metricValue(t, g.reg, "switchyard_mqtt_sent_topic_aliases_total", nil); v != 2 {
			t.Errorf("switchyard_mqtt_sent_topic_aliases_total %v, want 2", v)
		}
		if v := metricValue(t, g.reg, "switchyard_mqtt_sent_topic_aliases_full_total", nil); v != 1 {
			t.Errorf("switchyard_mqtt_sent_topic_aliases_full_total %v, want 1", v)
		}
	})

	t.Run("client allows none", func(t *testing.T) {
		g := newGateway(t, withMQTT)
		r := rawAliasClient(t, g, "alias-none", 0, "rn/#")
		expect(t, g, r, []want{{"rn.x", "rn/x", 0}, {"rn.x", "rn/x", 0}, {"rn.y", "rn/y", 0}, {"rn.x", "rn/x", 0}})
		if v := metricValue(t, g.reg, "switchyard_mqtt_sent_topic_aliases_total", nil); v != 0 {
			t.Errorf("switchyard_mqtt_sent_topic_aliases_total %v, want 0", v)
		}
	})

	t.Run("gateway gives none", func(t *testing.T) {
		g := newGateway(t, withMQTT, func(c *gwConfig) { c.router.MQTT.MaxSentTopicAliases = -1 })
		r := rawAliasClient(t, g, "alias-off", 10, "ro/#")
		expect(t, g, r, []want{{"ro.x", "ro/x", 0}, {"ro.x", "ro/x", 0}})
	})

	t.Run("gateway gives 1", func(t *testing.T) {
		g := newGateway(t, withMQTT, func(c *gwConfig) { c.router.MQTT.MaxSentTopicAliases = 1 })
		r := rawAliasClient(t, g, "alias-one", 10, "r1/#")
		expect(t, g, r, []want{{"r1.x", "r1/x", 1}, {"r1.y", "r1/y", 0}, {"r1.x", "", 1}, {"r1.y", "r1/y", 0}})
	})

	t.Run("gateway bytes bound", func(t *testing.T) {
		g := newGateway(t, withMQTT, func(c *gwConfig) { c.router.MQTT.MaxSentTopicAliasBytes = 8 })
		r := rawAliasClient(t, g, "alias-bytes", 10, "rb/#")
		// "rb/x" and "rb/y" are 8 bytes: "rb/z" has no room.
		expect(t, g, r, []want{{"rb.x", "rb/x", 1}, {"rb.y", "rb/y", 2}, {"rb.z", "rb/z", 0}, {"rb.y", "", 2}})
	})
}

// TestMQTTSentTopicAliasesHeldDelivery: a QoS 1 delivery held while the
// in-flight window (Receive Maximum 1) is full is aliased when it is
// sent, not when it was queued: the QoS 0 copy of the same message (a
// second filter), sent first, names the topic and sets the alias, and
// the held copy, sent after the PUBACK, uses it. Every PUBLISH received
// resolves with the aliases set before it.
func TestMQTTSentTopicAliasesHeldDelivery(t *testing.T) {
	g := newGateway(t, withMQTT)
	r := dialRaw(t, g, "tcp", 5)
	pk := connectPacket("alias-held", 30)
	pk.Properties.TopicAliasMaximum, pk.Properties.ReceiveMaximum = 4, 1
	r.send(t, pk)
	if ack := r.expect(t, packets.Connack); ack.ReasonCode != 0 {
		t.Fatalf("CONNACK %#x", ack.ReasonCode)
	}
	if rc := r.subscribeID(t, 1, "hq/#", 0); rc != 1 {
		t.Fatalf("SUBACK %#x", rc)
	}
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 2,
		Filters: packets.Subscriptions{{Filter: "hq/+", Qos: 0}}})
	if ack := r.expect(t, packets.Suback); len(ack.ReasonCodes) != 1 || ack.ReasonCodes[0] != 0 {
		t.Fatalf("SUBACK %v", ack.ReasonCodes)
	}
	table := map[uint16]string{}
	// next reads a PUBLISH and resolves its topic as a client does.
	next := func(step string) packets.Packet {
		t.Helper()
		pk := r.expect(t, packets.Publish)
		a := pk.Properties.TopicAlias
		switch {
		case pk.TopicName != "" && a != 0:
			table[a] = pk.TopicName
		case pk.TopicName == "":
			name, ok := table[a]
			if !ok {
				t.Fatalf("%s: empty topic name with alias %d, never set", step, a)
			}
			pk.TopicName = name
		}
		return pk
	}
	httpPublish(t, g, "hq.w", 1)
	var inflight uint16
	for range 2 {
		if p := next("hq/w"); p.TopicName != "hq/w" {
			t.Fatalf("hq/w: got %s", p.TopicName)
		} else if p.FixedHeader.Qos == 1 {
			inflight = p.PacketID // not acknowledged: the window is full
		}
	}
	if inflight == 0 {
		t.Fatal("no QoS 1 delivery of hq/w")
	}
	httpPublish(t, g, "hq.n", 2)
	p := next("hq/n QoS 0")
	if p.FixedHeader.Qos != 0 || p.TopicName != "hq/n" || p.Properties.TopicAlias == 0 {
		t.Fatalf("while the window is full: QoS %d %s alias %d, want the QoS 0 copy of hq/n setting an alias",
			p.FixedHeader.Qos, p.TopicName, p.Properties.TopicAlias)
	}
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: inflight})
	held := r.expect(t, packets.Publish)
	if held.FixedHeader.Qos != 1 || held.TopicName != "" || held.Properties.TopicAlias != p.Properties.TopicAlias {
		t.Fatalf("held delivery: QoS %d topic %q alias %d, want QoS 1 with alias %d and no topic name",
			held.FixedHeader.Qos, held.TopicName, held.Properties.TopicAlias, p.Properties.TopicAlias)
	}
}
