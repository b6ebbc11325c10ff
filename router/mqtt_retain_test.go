package router_test

// Retained messages and the MQTT 5 subscription options about them, with
// paho clients of both protocol levels (mqtt_retain.go).

import (
	"context"
	"fmt"
	"testing"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"
)

// publishRetained publishes with RETAIN set.
func (c *mqttClient) publishRetained(t *testing.T, topic string, qos byte, payload string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if c.v5 != nil {
		if _, err := c.v5.Publish(ctx, &paho.Publish{Topic: topic, QoS: qos, Retain: true, Payload: []byte(payload)}); err != nil {
			t.Fatalf("publish %s: %v", topic, err)
		}
		return
	}
	if err := wait311(c.v3.Publish(topic, qos, true, []byte(payload))); err != nil {
		t.Fatalf("publish %s: %v", topic, err)
	}
}

// subscribeWith subscribes an MQTT 5 client with subscription options.
func (c *mqttClient) subscribeWith(t *testing.T, o paho.SubscribeOptions) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	ack, err := c.v5.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{o}})
	if err != nil || len(ack.Reasons) != 1 || ack.Reasons[0] != o.QoS {
		t.Fatalf("subscribe %+v: %v, %+v", o, err, ack)
	}
}

// expectMsgs reads len(want) messages and compares them, in order.
func (c *mqttClient) expectMsgs(t *testing.T, want ...mqttMsg) {
	t.Helper()
	for i, w := range want {
		m := c.next(t)
		if m.topic != w.topic || m.payload != w.payload || m.qos != w.qos || m.retain != w.retain {
			t.Fatalf("message %d: got %s %q QoS %d retain %v, want %s %q QoS %d retain %v",
				i, m.topic, m.payload, m.qos, m.retain, w.topic, w.payload, w.qos, w.retain)
		}
	}
}

// expectMsgsAnyOrder reads len(want) messages and checks that they are
// want's, in any order.
func (c *mqttClient) expectMsgsAnyOrder(t *testing.T, want ...mqttMsg) {
	t.Helper()
	left := append([]mqttMsg(nil), want...)
	for i := range want {
		m := c.next(t)
		found := false
		for j, w := range left {
			if m.topic == w.topic && m.payload == w.payload && m.qos == w.qos && m.retain == w.retain {
				left = append(left[:j], left[j+1:]...)
				found = true
				break
			}
		}
		if !found {
			t.Fatalf("message %d: got %s %q QoS %d retain %v, want one of %+v", i, m.topic, m.payload, m.qos, m.retain, left)
		}
	}
}

// TestMQTTRetained: for each protocol level, a retained PUBLISH stores the
// topic's message, a new subscription gets the retained message of every
// topic it matches first, with RETAIN, at the lower of the two QoS; a live
// delivery has RETAIN 0; an empty retained payload clears the topic (and
// is delivered live as it is); a publish without RETAIN leaves the
// retained message alone.
func TestMQTTRetained(t *testing.T) {
	g := newGateway(t, withMQTT)
	for _, v := range []byte{4, 5} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			p := fmt.Sprintf("ret%d", v)
			pub, err := dialMQTT(t, g, v, "tcp", p+"-pub", "")
			if err != nil {
				t.Fatal(err)
			}
			pub.publishRetained(t, p+"/a", 1, "a1")
			pub.publishRetained(t, p+"/a", 2, "a2") // replaces a1
			pub.publishRetained(t, p+"/b/c", 0, "bc")
			pub.publish(t, p+"/d", 1, "not retained")
			pub.publish(t, p+"/a", 1, "a live") // leaves a2 retained

			sub, err := dialMQTT(t, g, v, "ws", p+"-sub", "")
			if err != nil {
				t.Fatal(err)
			}
			if rc := sub.subscribe(t, p+"/a", 1); rc != 1 {
				t.Fatalf("SUBACK %d", rc)
			}
			sub.expectMsgs(t, mqttMsg{topic: p + "/a", payload: "a2", qos: 1, retain: true})
			if rc := sub.subscribe(t, p+"/+/c", 2); rc != 2 {
				t.Fatalf("SUBACK %d", rc)
			}
			sub.expectMsgs(t, mqttMsg{topic: p + "/b/c", payload: "bc", qos: 0, retain: true})

			pub.publishRetained(t, p+"/a", 1, "a3")
			pub.publishRetained(t, p+"/a", 1, "") // clears
			sub.expectMsgs(t,
				mqttMsg{topic: p + "/a", payload: "a3", qos: 1},
				mqttMsg{topic: p + "/a", payload: "", qos: 1})

			late, err := dialMQTT(t, g, v, "tcp", p+"-late", "")
			if err != nil {
				t.Fatal(err)
			}
			late.subscribe(t, p+"/#", 2)
			pub.publish(t, p+"/marker", 1, "marker")
			// The retained message and a live one of another topic come in
			// either order (the retained messages are read after the
			// subscription went live; MQTT orders messages per topic).
			late.expectMsgsAnyOrder(t,
				mqttMsg{topic: p + "/b/c", payload: "bc", qos: 0, retain: true},
				mqttMsg{topic: p + "/marker", payload: "marker", qos: 2})
		})
	}
	if got := metricValue(t, g.reg, "switchyard_mqtt_retained_total", map[string]string{"result": "cleared"}); got != 2 {
		t.Errorf("switchyard_mqtt_retained_total{result=cleared} = %v, want 2", got)
	}
	if got := metricValue(t, g.reg, "switchyard_mqtt_retained_messages", nil); got != 2 {
		t.Errorf("switchyard_mqtt_retained_messages = %v, want 2 (one b/c per level)", got)
	}
}

// TestMQTTRetainOptions: MQTT 5's retain handling (0 on every subscribe,
// 1 only on a new subscription, 2 never), retain as published, and no
// local; the headers that carry those flags on records are no user
// properties of deliveries.
func TestMQTTRetainOptions(t *testing.T) {
	g := newGateway(t, withMQTT)
	dial := func(t *testing.T, id string) *mqttClient {
		t.Helper()
		c, err := dialMQTT(t, g, 5, "tcp", id, "")
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	pub := dial(t, "opt-pub")
	// subscribed subscribes c with o and checks the retained messages that
	// SUBSCRIBE sent: another SUBSCRIBE's SUBACK follows them (the gateway
	// answers a session's SUBSCRIBEs in order, each after queuing its
	// retained messages), so the count is exact; they may arrive after
	// later live messages of other subscriptions, which the session's queue
	// does not order against them.
	sent := func() float64 { return metricValue(t, g.reg, "switchyard_mqtt_retained_sent_total", nil) }
	subscribed := func(t *testing.T, c *mqttClient, o paho.SubscribeOptions, want ...mqttMsg) {
		t.Helper()
		before := sent()
		c.subscribeWith(t, o)
		c.subscribe(t, "optm", 0)
		if got := sent() - before; got != float64(len(want)) {
			t.Fatalf("SUBSCRIBE %+v sent %v retained messages, want %d", o, got, len(want))
		}
		c.expectMsgsAnyOrder(t, want...)
	}

	t.Run("retain handling", func(t *testing.T) {
		pub.publishRetained(t, "optr/x", 1, "kept")
		retained := mqttMsg{topic: "optr/x", payload: "kept", qos: 1, retain: true}
		sub := dial(t, "opt-rh")
		subscribed(t, sub, paho.SubscribeOptions{Topic: "optr/+", QoS: 1, RetainHandling: 2})
		subscribed(t, sub, paho.SubscribeOptions{Topic: "optr/#", QoS: 1, RetainHandling: 1}, retained)
		subscribed(t, sub, paho.SubscribeOptions{Topic: "optr/#", QoS: 1, RetainHandling: 1})
		subscribed(t, sub, paho.SubscribeOptions{Topic: "optr/#", QoS: 1, RetainHandling: 0}, retained)
	})

	t.Run("retain as published", func(t *testing.T) {
		rap, plain := dial(t, "opt-rap"), dial(t, "opt-plain")
		rap.subscribeWith(t, paho.SubscribeOptions{Topic: "rap/#", QoS: 1, RetainAsPublished: true})
		plain.subscribeWith(t, paho.SubscribeOptions{Topic: "rap/#", QoS: 1})
		pub.publishRetained(t, "rap/x", 1, "r")
		pub.publish(t, "rap/x", 1, "n")
		rap.expectMsgs(t, mqttMsg{topic: "rap/x", payload: "r", qos: 1, retain: true}, mqttMsg{topic: "rap/x", payload: "n", qos: 1})
		plain.expectMsgs(t, mqttMsg{topic: "rap/x", payload: "r", qos: 1}, mqttMsg{topic: "rap/x", payload: "n", qos: 1})
		pub.publishRetained(t, "rap/x", 1, "")
		rap.expectMsgs(t, mqttMsg{topic: "rap/x", payload: "", qos: 1, retain: true})
	})

	t.Run("no local", func(t *testing.T) {
		self, watch := dial(t, "opt-nl"), dial(t, "opt-watch")
		self.subscribeWith(t, paho.SubscribeOptions{Topic: "nl/#", QoS: 1, NoLocal: true})
		watch.subscribe(t, "nl/#", 1)
		self.publish(t, "nl/self", 1, "mine")
		pub.publish(t, "nl/other", 1, "theirs")
		self.expectMsgs(t, mqttMsg{topic: "nl/other", payload: "theirs", qos: 1})
		for _, want := range []string{"mine", "theirs"} {
			m := watch.next(t)
			if m.payload != want || len(m.props) != 0 {
				t.Fatalf("watcher got %q with properties %v, want %q without", m.payload, m.props, want)
			}
		}
		if got := metricValue(t, g.reg, "switchyard_mqtt_skipped_total", map[string]string{"why": "no_local"}); got != 1 {
			t.Errorf("switchyard_mqtt_skipped_total{why=no_local} = %v, want 1", got)
		}
	})

	t.Run("no local on a shared subscription", func(t *testing.T) {
		r := dialRaw(t, g, "tcp", 5)
		r.connect(t, "opt-share-nl", 30)
		r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
			Filters: packets.Subscriptions{{Filter: "$share/g/nl/x", Qos: 1, NoLocal: true}}})
		if d := r.expect(t, packets.Disconnect); d.ReasonCode != 0x82 {
			t.Fatalf("DISCONNECT %#x, want 0x82", d.ReasonCode)
		}
	})
}

// TestMQTTRetainedBounds: past --mqtt-max-retained a retained PUBLISH for
// a new topic is refused with 0x97 and not appended; replacing a topic's
// message still works, and clearing one makes room; past
// --mqtt-max-retained-bytes likewise; counted.
func TestMQTTRetainedBounds(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.router.MQTT.MaxRetained = 2
		c.router.MQTT.MaxRetainedBytes = 100
	})
	r := dialRaw(t, g, "tcp", 5)
	r.connect(t, "bounds", 30)
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
		Filters: packets.Subscriptions{{Filter: "bound/#", Qos: 0, RetainHandling: 2}}})
	r.expect(t, packets.Suback)
	id := uint16(1)
	delivered := map[string]bool{}
	// publish sends a PUBLISH and reads up to its PUBACK, noting the
	// payloads delivered meanwhile.
	publish := func(topic, payload string, retain bool, want byte) {
		t.Helper()
		id++
		r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: retain}, PacketID: id,
			TopicName: topic, Payload: []byte(payload)})
		for {
			pk, err := r.read(t)
			if err != nil {
				t.Fatal(err)
			}
			if pk.FixedHeader.Type == packets.Publish {
				delivered[string(pk.Payload)] = true
				continue
			}
			if pk.FixedHeader.Type != packets.Puback || pk.PacketID != id || pk.ReasonCode != want {
				t.Fatalf("%s: got %s %d reason %#x, want PUBACK %d reason %#x", topic,
					packets.PacketNames[pk.FixedHeader.Type], pk.PacketID, pk.ReasonCode, id, want)
			}
			return
		}
	}
	big := string(make([]byte, 90))
	publish("bound/a", "a", true, 0)
	publish("bound/b", "b", true, 0)
	publish("bound/c", "refused c", true, 0x97) // a third topic
	publish("bound/a", "aa", true, 0)           // replacing
	publish("bound/a", "", true, 0)             // clearing
	publish("bound/c", "c", true, 0)
	publish("bound/a", big, true, 0x97) // past the bytes
	publish("bound/end", "end", false, 0)
	for !delivered["end"] {
		pk := r.expect(t, packets.Publish)
		delivered[string(pk.Payload)] = true
	}
	if delivered["refused c"] || delivered[big] || !delivered["c"] {
		t.Errorf("delivered %v: want c and none of the refused publishes", delivered)
	}
	if got := metricValue(t, g.reg, "switchyard_mqtt_retained_total", map[string]string{"result": "refused"}); got != 2 {
		t.Errorf("switchyard_mqtt_retained_total{result=refused} = %v, want 2", got)
	}
	if got := metricValue(t, g.reg, "switchyard_mqtt_retained_messages", nil); got != 2 {
		t.Errorf("switchyard_mqtt_retained_messages = %v, want 2", got)
	}
}
