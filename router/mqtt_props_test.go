package router_test

// MQTT 5 properties (mqtt_props.go, mqtt_alias.go): topic aliases,
// subscription identifiers, the request/response and message properties
// carried through the log, and the small defects of the DISCONNECT,
// Receive Maximum and packet identifiers of group deliveries.

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/mqtt"
)

// TestMQTTDisconnectReasonOnly: an MQTT 5 DISCONNECT of remaining length
// 1 (a reason code, no properties) is read with its reason: 0x04
// (disconnect with will message) publishes the will.
func TestMQTTDisconnectReasonOnly(t *testing.T) {
	g := newGateway(t, withMQTT)
	watch, err := dialMQTT(t, g, 5, "tcp", "dro-watch", "")
	if err != nil {
		t.Fatal(err)
	}
	watch.subscribe(t, "dro/#", 1)
	r := dialRaw(t, g, "tcp", 5)
	if rc := willConnect(t, r, "dro-will", "dro/will", "gone", false, 0, 0); rc != 0 {
		t.Fatalf("CONNACK %#x", rc)
	}
	r.write(t, []byte{packets.Disconnect << 4, 1, 0x04})
	r.expectClosed(t)
	if m := watch.next(t); m.payload != "gone" {
		t.Fatalf("watcher got %s %q, want the will", m.topic, m.payload)
	}
}

// subscribeID sends a SUBSCRIBE of filter at QoS 1 with subscription
// identifier id (0: none) and packet identifier pid, and returns its
// SUBACK's reason.
func (r *rawMQTT) subscribeID(t *testing.T, pid uint16, filter string, id int) byte {
	t.Helper()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: pid,
		Filters: packets.Subscriptions{{Filter: filter, Qos: 1}}}
	if id > 0 {
		pk.Properties.SubscriptionIdentifier = []int{id}
	}
	r.send(t, pk)
	ack := r.expect(t, packets.Suback)
	if len(ack.ReasonCodes) != 1 {
		t.Fatalf("SUBACK %v", ack.ReasonCodes)
	}
	return ack.ReasonCodes[0]
}

// nextPublish reads the next PUBLISH, acknowledging it (QoS 1).
func (r *rawMQTT) nextPublish(t *testing.T) packets.Packet {
	t.Helper()
	pk := r.expect(t, packets.Publish)
	if pk.FixedHeader.Qos == 1 {
		r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID})
	}
	return pk
}

// unsubscribe sends an UNSUBSCRIBE of filter and reads its UNSUBACK.
func (r *rawMQTT) unsubscribe(t *testing.T, pid uint16, filter string) {
	t.Helper()
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1}, PacketID: pid,
		ProtocolVersion: r.v, Filters: packets.Subscriptions{{Filter: filter}}}
	var b bytes.Buffer
	if err := pk.UnsubscribeEncode(&b); err != nil {
		t.Fatal(err)
	}
	r.write(t, b.Bytes())
	r.expect(t, packets.Unsuback)
}

// publishRaw sends a QoS 1 PUBLISH with packet identifier pid and the
// properties given, and returns its PUBACK's reason code.
func (r *rawMQTT) publishRaw(t *testing.T, pid uint16, topic, payload string, p packets.Properties) byte {
	t.Helper()
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, PacketID: pid,
		TopicName: topic, Payload: []byte(payload), Properties: p})
	return r.expect(t, packets.Puback).ReasonCode
}

// expectDisconnect reads the gateway's DISCONNECT with reason rc and the
// close after it.
func (r *rawMQTT) expectDisconnect(t *testing.T, rc byte) {
	t.Helper()
	if d := r.expect(t, packets.Disconnect); d.ReasonCode != rc {
		t.Fatalf("DISCONNECT %#x, want %#x", d.ReasonCode, rc)
	}
	r.expectClosed(t)
}

// TestMQTTTopicAliases: the CONNACK announces Topic Alias Maximum
// (--mqtt-max-topic-aliases, default 16) and Subscription Identifiers
// Available; a PUBLISH with a topic and an alias sets it, one with the
// alias alone uses it (also after the alias is set again to another
// topic); an alias of 0 or over the maximum, or an unknown alias with an
// empty topic, ends the session with DISCONNECT 0x94, counted.
func TestMQTTTopicAliases(t *testing.T) {
	g := newGateway(t, withMQTT)
	watch, err := dialMQTT(t, g, 5, "tcp", "alias-watch", "")
	if err != nil {
		t.Fatal(err)
	}
	watch.subscribe(t, "alias/#", 1)
	for _, transport := range []string{"tcp", "ws"} {
		t.Run(transport, func(t *testing.T) {
			r := dialRaw(t, g, transport, 5)
			ack := r.connect(t, "alias-pub-"+transport, 30)
			if ack.Properties.TopicAliasMaximum != 16 || !ack.Properties.SubIDAvailableFlag || ack.Properties.SubIDAvailable != 1 {
				t.Fatalf("CONNACK Topic Alias Maximum %d, Subscription Identifiers Available %v/%d; want 16 and 1",
					ack.Properties.TopicAliasMaximum, ack.Properties.SubIDAvailableFlag, ack.Properties.SubIDAvailable)
			}
			steps := []struct{ topic, payload string }{
				{"alias/one", "set"}, {"", "used"}, {"alias/two", "set again"}, {"", "used again"},
			}
			for i, st := range steps {
				p := packets.Properties{TopicAlias: 16, TopicAliasFlag: true}
				if rc := r.publishRaw(t, uint16(i+1), st.topic, st.payload, p); rc != 0 {
					t.Fatalf("PUBACK %#x for %q", rc, st.payload)
				}
				want := "alias/one"
				if i >= 2 {
					want = "alias/two"
				}
				if m := watch.next(t); m.topic != want || m.payload != st.payload {
					t.Fatalf("watcher got %s %q, want %s %q", m.topic, m.payload, want, st.payload)
				}
			}
		})
	}
	for _, tc := range []struct {
		name  string
		topic string
		alias uint16
	}{
		{"over the maximum", "alias/x", 17},
		{"zero", "alias/x", 0},
		{"unknown with an empty topic", "", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := metricValue(t, g.reg, "switchyard_mqtt_disconnects_total", map[string]string{"reason": "topic_alias_invalid"})
			r := dialRaw(t, g, "tcp", 5)
			r.connect(t, "alias-bad", 30)
			// By hand: the codec leaves out a Topic Alias of 0.
			b := append([]byte{0, byte(len(tc.topic))}, tc.topic...)
			b = append(b, 3, packets.PropTopicAlias, byte(tc.alias>>8), byte(tc.alias), 'x')
			r.write(t, append([]byte{packets.Publish << 4, byte(len(b))}, b...))
			r.expectDisconnect(t, 0x94)
			if got := metricValue(t, g.reg, "switchyard_mqtt_disconnects_total", map[string]string{"reason": "topic_alias_invalid"}); got != before+1 {
				t.Fatalf("disconnects topic_alias_invalid %v, want %v", got, before+1)
			}
		})
	}
}

// TestMQTTSubscriptionIdentifiers: a PUBLISH carries the subscription
// identifiers of the subscriptions it is delivered for: both of two
// filters sharing one pattern ("si/a" and "si/a/#" deliver "si/a" once),
// the one of an overlapping filter in its own PUBLISH, none for a filter
// subscribed without; a shared subscription's too; an unsubscribed
// filter's identifier goes; another session that uses none gets the
// PUBLISH without any.
func TestMQTTSubscriptionIdentifiers(t *testing.T) {
	g := newGateway(t, withMQTT)
	plain := dialRaw(t, g, "tcp", 5)
	plain.connect(t, "si-plain", 30)
	plain.subscribeID(t, 1, "si/#", 0)
	r := dialRaw(t, g, "ws", 5)
	r.connect(t, "si-ids", 30)
	for i, f := range []struct {
		filter string
		id     int
	}{{"si/a", 7}, {"si/a/#", 9}, {"si/+", 268435455}, {"si/b", 0}, {"$share/sig/si/c", 5}} {
		if rc := r.subscribeID(t, uint16(i+1), f.filter, f.id); rc != 1 {
			t.Fatalf("SUBACK %#x for %s", rc, f.filter)
		}
	}
	pub, err := dialMQTT(t, g, 5, "tcp", "si-pub", "")
	if err != nil {
		t.Fatal(err)
	}
	// ids reads n PUBLISHes and returns their identifiers, each sorted,
	// in sorted order.
	ids := func(t *testing.T, n int) [][]int {
		t.Helper()
		var got [][]int
		for range n {
			pk := r.nextPublish(t)
			got = append(got, slices.Sorted(slices.Values(pk.Properties.SubscriptionIdentifier)))
		}
		slices.SortFunc(got, slices.Compare)
		return got
	}
	check := func(t *testing.T, got [][]int, want ...[]int) {
		t.Helper()
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("subscription identifiers %v, want %v", got, want)
		}
	}
	noIDs := func(t *testing.T) {
		t.Helper()
		if pk := plain.nextPublish(t); len(pk.Properties.SubscriptionIdentifier) != 0 {
			t.Fatalf("a session without identifiers got %v", pk.Properties.SubscriptionIdentifier)
		}
	}
	pub.publish(t, "si/a", 1, "a")
	check(t, ids(t, 2), []int{7, 9}, []int{268435455})
	noIDs(t)
	pub.publish(t, "si/b", 1, "b")
	check(t, ids(t, 2), nil, []int{268435455})
	noIDs(t)
	pub.publish(t, "si/c", 1, "c")
	check(t, ids(t, 2), []int{5}, []int{268435455})
	noIDs(t)

	r.unsubscribe(t, 9, "si/a/#")
	pub.publish(t, "si/a", 1, "a again")
	check(t, ids(t, 2), []int{7}, []int{268435455})
	noIDs(t)
}

// pastClock is the system clock set back by off: the engine's records
// look off old to the gateway that delivers them.
type pastClock struct {
	engine.SystemClock
	off time.Duration
}

func (c pastClock) Now() time.Time { return time.Now().Add(-c.off) }

// TestMQTTMessageProperties: a PUBLISH's response topic, correlation
// data, content type, payload format and message expiry reach MQTT 5
// subscribers (over paho and raw) as properties and native subscribers as
// the documented headers, not as user properties; a native publish's
// headers reach MQTT 5 the same way; payload format 1 with a payload that
// is not UTF-8 is refused (0x99, counted); a response topic with a
// wildcard is a protocol error.
func TestMQTTMessageProperties(t *testing.T) {
	g := newGateway(t, withMQTT)
	native := g.dial(t)
	native.subscribe(t, "mp.#")
	r := dialRaw(t, g, "tcp", 5)
	r.connect(t, "mp-sub", 30)
	r.subscribeID(t, 1, "mp/#", 0)
	pub, err := dialMQTT(t, g, 5, "ws", "mp-pub", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	one, expiry := byte(1), uint32(3600)
	if _, err := pub.v5.Publish(ctx, &paho.Publish{Topic: "mp/req", QoS: 1, Payload: []byte("héllo"),
		Properties: &paho.PublishProperties{ResponseTopic: "mp/reply/1", CorrelationData: []byte{0, 1, 0xff},
			ContentType: "text/plain", PayloadFormat: &one, MessageExpiry: &expiry}}); err != nil {
		t.Fatal(err)
	}
	pk := r.nextPublish(t)
	p := pk.Properties
	if p.ResponseTopic != "mp/reply/1" || !bytes.Equal(p.CorrelationData, []byte{0, 1, 0xff}) || p.ContentType != "text/plain" ||
		!p.PayloadFormatFlag || p.PayloadFormat != 1 || p.MessageExpiryInterval == 0 || p.MessageExpiryInterval > expiry || len(p.User) != 0 {
		t.Fatalf("MQTT subscriber got properties %+v", p)
	}
	msg := native.nextOp(t, "message")
	h, _ := msg["headers"].(map[string]any)
	want := map[string]any{"mqtt-response-topic": "mp/reply/1", "mqtt-correlation-data": "AAH/",
		"mqtt-content-type": "text/plain", "mqtt-payload-format": "1", "mqtt-message-expiry": "3600"}
	if fmt.Sprint(h) != fmt.Sprint(want) {
		t.Fatalf("native headers %v, want %v", h, want)
	}

	native.publish(t, "mp.native", map[string]any{"q": 1}, "headers", map[string]any{
		"mqtt-response-topic": "mp/answer", "mqtt-content-type": "application/json", "mqtt-correlation-data": "not base64!"})
	p = r.nextPublish(t).Properties
	if p.ResponseTopic != "mp/answer" || p.ContentType != "application/json" || p.CorrelationData != nil || len(p.User) != 0 {
		t.Fatalf("MQTT subscriber of a native publish got properties %+v", p)
	}
	native.nextOp(t, "message")

	before := metricValue(t, g.reg, "switchyard_mqtt_refused_total", map[string]string{"reason": "payload_format_invalid"})
	if rc := r.publishRaw(t, 2, "mp/bad", "\xff\xfe", packets.Properties{PayloadFormat: 1, PayloadFormatFlag: true}); rc != 0x99 {
		t.Fatalf("PUBACK %#x for a payload that is not UTF-8, want 0x99", rc)
	}
	if got := metricValue(t, g.reg, "switchyard_mqtt_refused_total", map[string]string{"reason": "payload_format_invalid"}); got != before+1 {
		t.Fatalf("refused payload_format_invalid %v, want %v", got, before+1)
	}
	if rc := r.publishRaw(t, 3, "mp/marker", "\xff\xfe", packets.Properties{}); rc != 0 {
		t.Fatalf("PUBACK %#x", rc)
	}
	if pk := r.nextPublish(t); pk.TopicName != "mp/marker" {
		t.Fatalf("got %s after the refused publish, want the marker", pk.TopicName)
	}

	// By hand: the codec leaves out a response topic with a wildcard.
	r.write(t, []byte{packets.Publish << 4, 15, 0, 4, 'm', 'p', '/', 'x', 7, packets.PropResponseTopic, 0, 4, 'm', 'p', '/', '+', 'x'})
	r.expectDisconnect(t, 0x82)
}

// TestMQTTMessageExpiry: a record whose message expiry interval has
// passed since its append is not sent to MQTT subscribers of either
// level (counted), one that has not is sent with the interval it has
// left; native subscribers get both. The engine's clock runs 30 s behind,
// so every record is 30 s old when it is delivered.
func TestMQTTMessageExpiry(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) { c.engine.Clock = pastClock{off: 30 * time.Second} })
	r5 := dialRaw(t, g, "tcp", 5)
	r5.connect(t, "me-5", 30)
	r5.subscribeID(t, 1, "me/#", 0)
	r4 := dialRaw(t, g, "ws", 4)
	r4.connect(t, "me-4", 30)
	r4.subscribeID(t, 1, "me/#", 0)
	pub := dialRaw(t, g, "tcp", 5)
	pub.connect(t, "me-pub", 30)
	for i, tc := range []struct {
		topic  string
		expiry uint32
	}{{"me/gone", 10}, {"me/kept", 100}} {
		if rc := pub.publishRaw(t, uint16(i+1), tc.topic, "x", packets.Properties{MessageExpiryInterval: tc.expiry}); rc != 0 {
			t.Fatalf("PUBACK %#x", rc)
		}
	}
	pk := r5.nextPublish(t)
	if pk.TopicName != "me/kept" || pk.Properties.MessageExpiryInterval < 60 || pk.Properties.MessageExpiryInterval > 70 {
		t.Fatalf("MQTT 5 got %s with expiry %d, want me/kept with 100 less the 30 s it waited", pk.TopicName, pk.Properties.MessageExpiryInterval)
	}
	if pk := r4.nextPublish(t); pk.TopicName != "me/kept" {
		t.Fatalf("MQTT 3.1.1 got %s, want me/kept", pk.TopicName)
	}
	if got := metricValue(t, g.reg, "switchyard_mqtt_skipped_total", map[string]string{"why": "expired"}); got != 2 {
		t.Fatalf("skipped expired %v, want 2", got)
	}
}

// TestMQTTReceiveMaximumGroup: a group ($share) delivery does not exceed
// the client's Receive Maximum when plain deliveries fill it: with
// Receive Maximum 1 and one plain QoS 1 delivery unacknowledged, a
// group delivery is held (counted in inflight_waits) and written once the
// plain one is acknowledged (mqtt_group.go).
func TestMQTTReceiveMaximumGroup(t *testing.T) {
	g := newGateway(t, withMQTT)
	r := dialRaw(t, g, "tcp", 5)
	pk := connectPacket("rmg-sub", 30)
	pk.Properties.ReceiveMaximum = 1
	r.send(t, pk)
	r.expect(t, packets.Connack)
	r.subscribeID(t, 1, "rmg/plain", 0)
	r.subscribeID(t, 2, "$share/rmg/rmg/group", 0)
	pub, err := dialMQTT(t, g, 5, "tcp", "rmg-pub", "")
	if err != nil {
		t.Fatal(err)
	}
	pub.publish(t, "rmg/plain", 1, "fills the window")
	plain := r.expect(t, packets.Publish)
	if plain.TopicName != "rmg/plain" {
		t.Fatalf("got %s", plain.TopicName)
	}
	waits := func() float64 {
		return metricValue(t, g.reg, "switchyard_mqtt_inflight_waits_total", nil)
	}
	before := waits()
	pub.publish(t, "rmg/group", 1, "over the window")
	// Until the gateway counts the delivery it held back, no PUBLISH may
	// come: one would be the second unacknowledged of a Receive Maximum
	// of 1.
	deadline := time.Now().Add(waitTimeout)
	for waits() == before {
		if time.Now().After(deadline) {
			t.Fatal("the group delivery was neither written nor held")
		}
		_ = r.nc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if got, err := mqtt.ReadPacket(r.br, 5, 1<<20); err == nil {
			t.Fatalf("got %s %s while the Receive Maximum of 1 was in use", packets.PacketNames[got.FixedHeader.Type], got.TopicName)
		} else if !isTimeout(err) {
			t.Fatal(err)
		}
	}
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: plain.PacketID})
	if got := r.expect(t, packets.Publish); got.TopicName != "rmg/group" || got.FixedHeader.Dup {
		t.Fatalf("got %s dup=%v, want the held group delivery", got.TopicName, got.FixedHeader.Dup)
	}
}

// TestMQTTPahoProperties: the same with paho.golang at both ends, over
// WebSocket and TCP: the publisher sets a topic alias and then publishes
// by the alias alone, with response topic and correlation data; the
// subscriber, subscribed with identifier 42, gets both on the topic with
// its identifier and the properties.
func TestMQTTPahoProperties(t *testing.T) {
	g := newGateway(t, withMQTT)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	got := make(chan *paho.Publish, 16)
	nc, err := dialMQTTConn(ctx, g, "ws")
	if err != nil {
		t.Fatal(err)
	}
	sub := paho.NewClient(paho.ClientConfig{Conn: nc,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			got <- pr.Packet
			return true, nil
		}}})
	if _, err := sub.Connect(ctx, &paho.Connect{ClientID: "pp-sub", CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Disconnect(&paho.Disconnect{}); <-sub.Done() })
	id := 42
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "pp/#", QoS: 1}},
		Properties: &paho.SubscribeProperties{SubscriptionIdentifier: &id}}); err != nil {
		t.Fatal(err)
	}
	pub, err := dialMQTT(t, g, 5, "tcp", "pp-pub", "")
	if err != nil {
		t.Fatal(err)
	}
	alias := uint16(3)
	for _, topic := range []string{"pp/req", ""} {
		if _, err := pub.v5.Publish(ctx, &paho.Publish{Topic: topic, QoS: 1, Payload: []byte("q"),
			Properties: &paho.PublishProperties{TopicAlias: &alias, ResponseTopic: "pp/resp", CorrelationData: []byte("c1")}}); err != nil {
			t.Fatalf("publish %q: %v", topic, err)
		}
		select {
		case p := <-got:
			if p.Topic != "pp/req" || p.Properties == nil || p.Properties.SubscriptionIdentifier == nil ||
				*p.Properties.SubscriptionIdentifier != 42 || p.Properties.ResponseTopic != "pp/resp" ||
				string(p.Properties.CorrelationData) != "c1" {
				t.Fatalf("subscriber got %s %+v", p.Topic, p.Properties)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("nothing delivered for the publish to %q", topic)
		}
	}
}
