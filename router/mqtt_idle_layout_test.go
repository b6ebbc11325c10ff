package router_test

// Tests of the idle MQTT session's smaller state, end to end: the
// pooled write buffer under concurrent sessions with different payloads
// (TCP, WebSocket, compressed WebSocket; topic aliases; the in-flight
// window's held deliveries), filters past and back under the slice's
// bound, and the client id the gateway assigns.

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/mqtt"
)

// layoutPayload is message j of subscriber i: its own bytes, of a length
// that varies from a few bytes to several KiB.
func layoutPayload(i, j int) []byte {
	n := 16 + (j*977+i*131)%5000
	b := make([]byte, n)
	copy(b, fmt.Sprintf("s%02d-m%04d|", i, j))
	for k := 12; k < n; k++ {
		b[k] = byte(i*37 + j*11 + k)
	}
	return b
}

// dialLayoutRaw opens a raw MQTT 5 connection over transport: "tcp",
// "ws", or "wsz" (WebSocket with permessage-deflate).
func dialLayoutRaw(t *testing.T, g *gateway, transport string) *rawMQTT {
	t.Helper()
	if transport != "wsz" {
		return dialRaw(t, g, transport, 5)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(g.srv.URL, "http")+"/mqtt",
		&websocket.DialOptions{Subprotocols: []string{"mqtt"}, CompressionMode: websocket.CompressionContextTakeover})
	if err != nil {
		t.Fatal(err)
	}
	if ext := resp.Header.Get("Sec-WebSocket-Extensions"); !strings.Contains(ext, "permessage-deflate") {
		t.Fatalf("compression not negotiated: %q", ext)
	}
	nc := websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
	t.Cleanup(func() { nc.Close() })
	return &rawMQTT{nc: nc, br: bufio.NewReader(nc), v: 5}
}

// TestMQTTPooledWriteBufferPayloadsIntact: sessions over TCP, WebSocket
// and compressed WebSocket, with a window of 2 (deliveries held) and
// topic aliases or not, each get their own payloads, byte for byte and in
// order, while all are written at once from the pooled write buffers.
func TestMQTTPooledWriteBufferPayloadsIntact(t *testing.T) {
	const subs, msgs = 9, 120
	g := newGateway(t, withMQTT, func(c *gwConfig) { c.router.Compression = true })
	transports := []string{"tcp", "ws", "wsz"}
	type sub struct {
		r     *rawMQTT
		topic string
		alias bool
	}
	ss := make([]sub, subs)
	for i := range ss {
		r := dialLayoutRaw(t, g, transports[i%3])
		pk := connectPacket(fmt.Sprintf("pool-sub-%d", i), 30)
		pk.Properties.ReceiveMaximum = 2
		alias := i%2 == 0
		if alias {
			pk.Properties.TopicAliasMaximum = 4
		}
		r.send(t, pk)
		if ack := r.expect(t, packets.Connack); ack.ReasonCode != 0 {
			t.Fatalf("CONNACK %#x", ack.ReasonCode)
		}
		topic := fmt.Sprintf("pool/%d", i)
		if sa := r.subscribeQoS1(t, topic); len(sa.ReasonCodes) != 1 || sa.ReasonCodes[0] != 1 {
			t.Fatalf("SUBACK %v", sa.ReasonCodes)
		}
		ss[i] = sub{r: r, topic: topic, alias: alias}
	}
	pubs := make([]*rawMQTT, subs)
	for i := range pubs {
		pubs[i] = dialLayoutRaw(t, g, "tcp")
		pubs[i].connect(t, fmt.Sprintf("pool-pub-%d", i), 30)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*subs)
	for i := range ss {
		wg.Add(2)
		go func() { // the publisher of subscriber i: batches of 8 QoS 1 publishes
			defer wg.Done()
			p := pubs[i]
			for j := 0; j < msgs; j += 8 {
				var b bytes.Buffer
				for k := j; k < min(j+8, msgs); k++ {
					pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, ProtocolVersion: 5,
						TopicName: ss[i].topic, PacketID: uint16(k + 1), Payload: layoutPayload(i, k)}
					if err := pk.PublishEncode(&b); err != nil {
						errs <- err
						return
					}
				}
				if _, err := p.nc.Write(b.Bytes()); err != nil {
					errs <- fmt.Errorf("publisher %d: %v", i, err)
					return
				}
				for k := j; k < min(j+8, msgs); k++ {
					pk, err := p.read(t)
					if err != nil || pk.FixedHeader.Type != packets.Puback {
						errs <- fmt.Errorf("publisher %d: PUBACK %d: %v %v", i, k, packets.PacketNames[pk.FixedHeader.Type], err)
						return
					}
				}
			}
		}()
		go func() { // subscriber i: every payload, in order, acked
			defer wg.Done()
			r := ss[i].r
			aliases := map[uint16]string{}
			for j := range msgs {
				pk, err := r.read(t)
				if err != nil {
					errs <- fmt.Errorf("subscriber %d: message %d: %v", i, j, err)
					return
				}
				if pk.FixedHeader.Type != packets.Publish {
					errs <- fmt.Errorf("subscriber %d: message %d is a %s", i, j, packets.PacketNames[pk.FixedHeader.Type])
					return
				}
				topic := pk.TopicName
				if a := pk.Properties.TopicAlias; a != 0 {
					if topic != "" {
						aliases[a] = topic
					}
					topic = aliases[a]
				}
				if want := layoutPayload(i, j); topic != ss[i].topic || !bytes.Equal(pk.Payload, want) {
					errs <- fmt.Errorf("subscriber %d (alias %v): message %d on %q is %d bytes %.24q, want %d bytes %.24q on %q",
						i, ss[i].alias, j, topic, len(pk.Payload), pk.Payload, len(want), want, ss[i].topic)
					return
				}
				var b bytes.Buffer
				ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, ProtocolVersion: 5, PacketID: pk.PacketID}
				if err := ack.PubackEncode(&b); err != nil {
					errs <- err
					return
				}
				if _, err := r.nc.Write(b.Bytes()); err != nil {
					errs <- fmt.Errorf("subscriber %d: PUBACK: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The test reached what it meant to: held deliveries and aliases.
	if n := metricValue(t, g.reg, "switchyard_mqtt_inflight_waits_total", nil); n == 0 {
		t.Error("no delivery waited for the window: the held path was not taken")
	}
	if n := metricValue(t, g.reg, "switchyard_mqtt_sent_topic_aliases_total", nil); n < subs/2 {
		t.Errorf("%v topic aliases given, want at least %d", n, subs/2)
	}
}

// TestMQTTFiltersPastTheSliceAndBack: a session subscribes to more
// filters than the slice holds, one at a time, among them a filter
// spelt as another's parent pattern ("x" beside "x/#"), then takes them
// off: each publish reaches it once per native pattern of its filters
// that matches (MQTT 5 allows a copy per subscription), before and after
// the crossing both ways, and a pattern two filters share outlives one.
func TestMQTTFiltersPastTheSliceAndBack(t *testing.T) {
	g := newGateway(t, withMQTT)
	r := dialRaw(t, g, "tcp", 5)
	r.connect(t, "cross-sub", 30)
	pub := dialRaw(t, g, "tcp", 5)
	pub.connect(t, "cross-pub", 30)
	held := map[string]bool{} // the filters the session holds
	subscribe := func(f string) {
		t.Helper()
		r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1,
			Filters: packets.Subscriptions{{Filter: f, Qos: 1}}})
		if sa := r.expect(t, packets.Suback); len(sa.ReasonCodes) != 1 || sa.ReasonCodes[0] != 1 {
			t.Fatalf("SUBACK %v for %s", sa.ReasonCodes, f)
		}
		held[f] = true
	}
	unsubscribe := func(f string) {
		t.Helper()
		var b bytes.Buffer
		un := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1}, ProtocolVersion: 5, PacketID: 2,
			Filters: packets.Subscriptions{{Filter: f}}}
		if err := un.UnsubscribeEncode(&b); err != nil {
			t.Fatal(err)
		}
		r.write(t, b.Bytes())
		if ua := r.expect(t, packets.Unsuback); len(ua.ReasonCodes) != 1 || ua.ReasonCodes[0] != 0 {
			t.Fatalf("UNSUBACK %v for %s", ua.ReasonCodes, f)
		}
		delete(held, f)
	}
	// copies is how many native patterns of the held filters match
	// topic: "x/#" holds "x.#" and "x", "x" holds "x", "x/N" holds "x.N".
	copies := func(topic string) int {
		n := 0
		if topic == "x" && (held["x"] || held["x/#"]) {
			n++
		}
		if topic != "x" && held["x/#"] {
			n++
		}
		if held[topic] && topic != "x" {
			n++
		}
		return n
	}
	subscribe("marker")
	n := 0
	publish := func(topic string) string {
		t.Helper()
		n++
		payload := fmt.Sprintf("p%d", n)
		pub.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: topic, PacketID: uint16(n), Payload: []byte(payload)})
		pub.expect(t, packets.Puback)
		return payload
	}
	// check publishes to topic, then to the marker, and counts the
	// copies that came before the marker's.
	check := func(topic string) {
		t.Helper()
		want := copies(topic)
		payload := publish(topic)
		mark := publish("marker")
		got := 0
		for {
			p := r.expect(t, packets.Publish)
			if p.FixedHeader.Qos > 0 {
				r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: p.PacketID})
			}
			if string(p.Payload) == mark {
				break
			}
			if string(p.Payload) != payload || p.TopicName != topic {
				t.Fatalf("got %q on %q, want %q on %q", p.Payload, p.TopicName, payload, topic)
			}
			got++
		}
		if got != want {
			t.Fatalf("%d copies of a publish to %q, want %d (filters %v)", got, topic, want, held)
		}
	}
	subscribe("x/#")
	subscribe("x") // "x" is also x/#'s parent pattern
	check("x")
	for i := range 10 {
		f := fmt.Sprintf("x/%d", i)
		subscribe(f)
		check(f)
		check("x")
	}
	unsubscribe("x/#") // pattern "x" stays, for filter "x"
	check("x")
	check("x/3")
	check("x/other")
	for i := range 10 {
		unsubscribe(fmt.Sprintf("x/%d", i))
		check(fmt.Sprintf("x/%d", i))
		check("x")
	}
	unsubscribe("x")
	check("x")
	subscribe("x/#")
	check("x")
	check("x/9")
}

// TestMQTTAssignedClientIDKeysTheSession: an MQTT 5 CONNECT without a
// client id and not clean gets an assigned id in its CONNACK; the session
// is stored and taken over under that id.
func TestMQTTAssignedClientIDKeysTheSession(t *testing.T) {
	g := newGateway(t, withMQTT)
	r1, ack := connectPersistent(t, g, "")
	id := ack.Properties.AssignedClientID
	if ack.ReasonCode != 0 || !strings.HasPrefix(id, "switchyard-") || ack.SessionPresent {
		t.Fatalf("CONNACK %#x assigned %q present %v", ack.ReasonCode, id, ack.SessionPresent)
	}
	r1.subscribeQoS1(t, "assigned/a")
	r2, ack2 := connectPersistent(t, g, id)
	if ack2.ReasonCode != 0 || !ack2.SessionPresent || ack2.Properties.AssignedClientID != "" {
		t.Fatalf("second CONNACK %#x present %v assigned %q", ack2.ReasonCode, ack2.SessionPresent, ack2.Properties.AssignedClientID)
	}
	if d := r1.expect(t, packets.Disconnect); d.ReasonCode != 0x8E {
		t.Fatalf("first connection: DISCONNECT %#x, want 0x8E", d.ReasonCode)
	}
	pub := dialRaw(t, g, "tcp", 5)
	pub.connect(t, "assigned-pub", 30)
	pub.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "assigned/a", PacketID: 1, Payload: []byte("m1")})
	pub.expect(t, packets.Puback)
	if p := r2.expect(t, packets.Publish); string(p.Payload) != "m1" {
		t.Fatalf("PUBLISH %q, want m1 through the restored subscription", p.Payload)
	}
}

// TestMQTTPersistentManyFiltersResume: a persistent session with more
// filters than the slice holds, each with its subscription identifier,
// one taken off again, is stored and restored whole: the QoS 1 messages
// published while it was away come back, each with its filter's
// identifier, the one taken off does not, and all deliver live after.
func TestMQTTPersistentManyFiltersResume(t *testing.T) {
	const filters, gone = 10, 3
	g := newGateway(t, withMQTT)
	id := "many-filters"
	r1, _ := connectPersistent(t, g, id)
	for i := range filters {
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: uint16(i + 1),
			Filters: packets.Subscriptions{{Filter: fmt.Sprintf("many/%d", i), Qos: 1}}}
		pk.Properties.SubscriptionIdentifier = []int{i + 1}
		r1.send(t, pk)
		if sa := r1.expect(t, packets.Suback); len(sa.ReasonCodes) != 1 || sa.ReasonCodes[0] != 1 {
			t.Fatalf("SUBACK %v", sa.ReasonCodes)
		}
	}
	var b bytes.Buffer
	un := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsubscribe, Qos: 1}, ProtocolVersion: 5, PacketID: 99,
		Filters: packets.Subscriptions{{Filter: fmt.Sprintf("many/%d", gone)}}}
	if err := un.UnsubscribeEncode(&b); err != nil {
		t.Fatal(err)
	}
	r1.write(t, b.Bytes())
	r1.expect(t, packets.Unsuback)
	r1.nc.Close()
	waitSaved(t, g, id)

	pub := dialRaw(t, g, "tcp", 5)
	pub.connect(t, "many-pub", 30)
	n := uint16(0)
	publish := func(payload string, i int) {
		t.Helper()
		n++
		pub.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: fmt.Sprintf("many/%d", i),
			PacketID: n, Payload: []byte(payload)})
		pub.expect(t, packets.Puback)
	}
	for i := range filters {
		publish(fmt.Sprintf("away-%d", i), i)
	}
	r2, ack := connectPersistent(t, g, id)
	if ack.ReasonCode != 0 || !ack.SessionPresent {
		t.Fatalf("CONNACK %#x present %v", ack.ReasonCode, ack.SessionPresent)
	}
	receive := func(prefix string) {
		t.Helper()
		got := map[string]bool{}
		for range filters - 1 {
			p := r2.expect(t, packets.Publish)
			var i int
			if _, err := fmt.Sscanf(p.TopicName, "many/%d", &i); err != nil {
				t.Fatalf("PUBLISH on %q", p.TopicName)
			}
			if want := fmt.Sprintf("%s-%d", prefix, i); string(p.Payload) != want || got[want] || i == gone {
				t.Fatalf("PUBLISH %q on %q, want %s once, none on many/%d", p.Payload, p.TopicName, want, gone)
			}
			if ids := p.Properties.SubscriptionIdentifier; len(ids) != 1 || ids[0] != i+1 {
				t.Fatalf("PUBLISH on %q has subscription identifiers %v, want [%d]", p.TopicName, ids, i+1)
			}
			got[string(p.Payload)] = true
			r2.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: p.PacketID})
		}
	}
	receive("away")
	for i := range filters {
		publish(fmt.Sprintf("live-%d", i), i)
	}
	receive("live")
	r2.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	r2.expect(t, packets.Pingresp) // and nothing else before it
}

// lockedLog is a log sink for a gateway's Logger.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestMQTTTakeoverRacingEndReleased: takeovers of a persistent session
// race its end (the client closes as a new connection comes) and each
// other (two new connections at once): every new connection gets its
// CONNACK with the session, and no takeover waits out its bound for a
// done channel nobody closes (logged "taken over before its last save").
func TestMQTTTakeoverRacingEndReleased(t *testing.T) {
	logs := &lockedLog{}
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.router.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	})
	connect := func(r *rawMQTT, id string) (packets.Packet, error) {
		pk := connectPacket(id, 30)
		pk.ProtocolVersion = 5
		pk.Connect.Clean = false
		pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = 600, true
		var b bytes.Buffer
		if err := pk.ConnectEncode(&b); err != nil {
			return packets.Packet{}, err
		}
		if _, err := r.nc.Write(b.Bytes()); err != nil {
			return packets.Packet{}, err
		}
		_ = r.nc.SetReadDeadline(time.Now().Add(waitTimeout))
		return mqtt.ReadPacket(r.br, 5, 1<<20)
	}
	for k := range 15 {
		id := fmt.Sprintf("race-end-%d", k)
		r1, _ := connectPersistent(t, g, id)
		r1.subscribeQoS1(t, "race/a")
		news := []*rawMQTT{dialRaw(t, g, "tcp", 5), dialRaw(t, g, "tcp", 5)}
		if k%2 == 0 {
			news = news[:1] // one new connection racing the old one's end
		}
		acks := make(chan error, len(news))
		start := make(chan struct{})
		for _, r := range news {
			go func() {
				<-start
				ack, err := connect(r, id)
				switch {
				case err != nil:
					acks <- err
				case ack.FixedHeader.Type != packets.Connack || ack.ReasonCode != 0 || !ack.SessionPresent:
					acks <- fmt.Errorf("%s %#x present %v", packets.PacketNames[ack.FixedHeader.Type], ack.ReasonCode, ack.SessionPresent)
				default:
					acks <- nil
				}
			}()
		}
		close(start)
		if k%2 == 0 {
			r1.nc.Close() // the end races the takeover
		}
		for range news {
			if err := <-acks; err != nil {
				t.Fatalf("round %d: a new connection: %v", k, err)
			}
		}
	}
	if l := logs.String(); strings.Contains(l, "before its last save") {
		t.Fatalf("a takeover waited out its bound:\n%s", l)
	}
}
