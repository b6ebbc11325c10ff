package router_test

// MQTT transport tests with real clients: paho.golang (MQTT 5) and
// paho.mqtt.golang (3.1.1), over TCP and WebSocket, and raw packets for
// what those clients never send.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/eclipse/paho.golang/paho"
	mqtt311 "github.com/eclipse/paho.mqtt.golang"
	"github.com/golang-jwt/jwt/v5"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/mqtt"
)

// withMQTT opens the MQTT TCP listener on a free loopback port.
func withMQTT(c *gwConfig) { c.router.MQTT.Addr = "127.0.0.1:0" }

type mqttMsg struct {
	topic   string
	payload string
	qos     byte
	retain  bool
	props   map[string]string
}

// mqttClient is a paho client of either protocol level that records what
// it receives.
type mqttClient struct {
	v5   *paho.Client
	v3   mqtt311.Client
	msgs chan mqttMsg
}

// dialMQTT connects a paho client of protocol level version (4 or 5) over
// transport ("tcp" or "ws") with client id id and password pw ("" none).
func dialMQTT(t *testing.T, g *gateway, version byte, transport, id, pw string) (*mqttClient, error) {
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
				m := mqttMsg{topic: pr.Packet.Topic, payload: string(pr.Packet.Payload), qos: pr.Packet.QoS, retain: pr.Packet.Retain, props: map[string]string{}}
				if pr.Packet.Properties != nil {
					for _, u := range pr.Packet.Properties.User {
						m.props[u.Key] = u.Value
					}
				}
				c.msgs <- m
				return true, nil
			}}})
		cp := &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30}
		if pw != "" {
			cp.PasswordFlag, cp.Password = true, []byte(pw)
		}
		if _, err := c.v5.Connect(ctx, cp); err != nil {
			nc.Close()
			return nil, err
		}
		t.Cleanup(func() {
			_ = c.v5.Disconnect(&paho.Disconnect{})
			select {
			case <-c.v5.Done():
			case <-time.After(waitTimeout):
				t.Error("paho client did not stop")
			}
		})
		return c, nil
	}
	broker := "tcp://" + g.rt.MQTTAddr().String()
	if transport == "ws" {
		broker = "ws" + strings.TrimPrefix(g.srv.URL, "http") + "/mqtt"
	}
	opts := mqtt311.NewClientOptions().AddBroker(broker).SetClientID(id).SetProtocolVersion(4).
		SetCleanSession(true).SetAutoReconnect(false).SetOrderMatters(true).SetKeepAlive(30 * time.Second).
		SetConnectTimeout(waitTimeout).
		SetDefaultPublishHandler(func(_ mqtt311.Client, m mqtt311.Message) {
			c.msgs <- mqttMsg{topic: m.Topic(), payload: string(m.Payload()), qos: m.Qos(), retain: m.Retained()}
		})
	if pw != "" {
		opts.SetUsername("u").SetPassword(pw)
	}
	c.v3 = mqtt311.NewClient(opts)
	if err := wait311(c.v3.Connect()); err != nil {
		return nil, err
	}
	t.Cleanup(func() { c.v3.Disconnect(250) })
	return c, nil
}

// dialMQTTConn opens a byte stream to the gateway's MQTT listener.
func dialMQTTConn(ctx context.Context, g *gateway, transport string) (net.Conn, error) {
	if transport == "tcp" {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", g.rt.MQTTAddr().String())
	}
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(g.srv.URL, "http")+"/mqtt",
		&websocket.DialOptions{Subprotocols: []string{"mqtt"}})
	if err != nil {
		return nil, err
	}
	return &packetConn{Conn: websocket.NetConn(context.Background(), ws, websocket.MessageBinary)}, nil
}

// packetConn is a WebSocket byte stream that paho.golang writes one packet
// at a time to. paho writes a packet as several buffers, in one vectored
// write on a TCP connection but in one Write (one WebSocket message) per
// buffer here, and its pinger writes from a goroutine of its own: without
// the lock, which paho takes around a packet's writes when the connection
// offers one, a PINGREQ lands inside a SUBSCRIBE and the gateway rightly
// answers "malformed packet" (the SUBACK timeouts once seen in about one
// -race run in ten).
type packetConn struct {
	net.Conn
	sync.Mutex
}

func wait311(tok mqtt311.Token) error {
	if !tok.WaitTimeout(waitTimeout) {
		return errors.New("token timed out")
	}
	return tok.Error()
}

func (c *mqttClient) subscribe(t *testing.T, filter string, qos byte) byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if c.v5 != nil {
		ack, err := c.v5.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}})
		if ack != nil && len(ack.Reasons) == 1 {
			return ack.Reasons[0]
		}
		t.Fatalf("subscribe %s: %v", filter, err)
	}
	tok := c.v3.Subscribe(filter, qos, nil)
	if err := wait311(tok); err != nil {
		t.Fatalf("subscribe %s: %v", filter, err)
	}
	key := filter
	if strings.HasPrefix(key, "$share/") { // paho keys a shared filter's result by its filter alone
		key = strings.Join(strings.Split(key, "/")[2:], "/")
	}
	return tok.(*mqtt311.SubscribeToken).Result()[key]
}

func (c *mqttClient) publish(t *testing.T, topic string, qos byte, payload string, props ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if c.v5 != nil {
		p := &paho.Publish{Topic: topic, QoS: qos, Payload: []byte(payload), Properties: &paho.PublishProperties{}}
		for i := 0; i+1 < len(props); i += 2 {
			p.Properties.User.Add(props[i], props[i+1])
		}
		if _, err := c.v5.Publish(ctx, p); err != nil {
			t.Fatalf("publish %s: %v", topic, err)
		}
		return
	}
	if err := wait311(c.v3.Publish(topic, qos, false, []byte(payload))); err != nil {
		t.Fatalf("publish %s: %v", topic, err)
	}
}

func (c *mqttClient) next(t *testing.T) mqttMsg {
	t.Helper()
	select {
	case m := <-c.msgs:
		return m
	case <-time.After(waitTimeout):
		t.Fatalf("no MQTT message within %v", waitTimeout)
		return mqttMsg{}
	}
}

// TestMQTTClientsRoundTrip: for each protocol level and transport, a
// subscriber gets what a publisher of the other level sends, with the
// topic as written, the exact payload and the granted QoS; "a/#" also
// matches "a"; topics with characters native names lack come back as they
// were published.
func TestMQTTClientsRoundTrip(t *testing.T) {
	g := newGateway(t, withMQTT)
	for _, tr := range []string{"tcp", "ws"} {
		for _, v := range []byte{4, 5} {
			t.Run(fmt.Sprintf("%s/v%d", tr, v), func(t *testing.T) {
				other := byte(9 - v)
				prefix := fmt.Sprintf("rt%s%d", tr, v)
				sub, err := dialMQTT(t, g, v, tr, prefix+"-sub", "")
				if err != nil {
					t.Fatal(err)
				}
				pub, err := dialMQTT(t, g, other, tr, prefix+"-pub", "")
				if err != nil {
					t.Fatal(err)
				}
				if got := sub.subscribe(t, prefix+"/+/temp", 1); got != 1 {
					t.Fatalf("SUBACK %d, want 1", got)
				}
				if got := sub.subscribe(t, prefix+"/tree/#", 0); got != 0 {
					t.Fatalf("SUBACK %d, want 0", got)
				}
				if got := sub.subscribe(t, prefix+"/two", 2); got != 2 {
					t.Fatalf("SUBACK %d, want 2", got)
				}
				pub.publish(t, prefix+"/room1/temp", 1, `{"c":21.5}`)
				pub.publish(t, prefix+"/living room/temp", 0, "raw bytes \x00\xff")
				pub.publish(t, prefix+"/tree", 1, "parent")
				pub.publish(t, prefix+"/tree/a/b", 1, "child")
				pub.publish(t, prefix+"/two", 2, "exactly once")
				want := []mqttMsg{
					{topic: prefix + "/room1/temp", payload: `{"c":21.5}`, qos: 1},
					{topic: prefix + "/living room/temp", payload: "raw bytes \x00\xff", qos: 1},
					{topic: prefix + "/tree", payload: "parent", qos: 0},
					{topic: prefix + "/tree/a/b", payload: "child", qos: 0},
					{topic: prefix + "/two", payload: "exactly once", qos: 2},
				}
				got := map[string]mqttMsg{}
				for range want {
					m := sub.next(t)
					t.Logf("got %+v", m)
					got[m.topic] = m
				}
				for _, w := range want {
					m := got[w.topic]
					if m.payload != w.payload || m.qos != w.qos {
						t.Errorf("%s: got %q at QoS %d, want %q at QoS %d", w.topic, m.payload, m.qos, w.payload, w.qos)
					}
				}
			})
		}
	}
}

// TestMQTTCrossProtocol: a native WebSocket subscriber sees an MQTT JSON
// payload as data unchanged and any other payload in the binary encoding,
// with user properties as headers and "key" as the key; an MQTT subscriber
// sees a native publish as its JSON text.
func TestMQTTCrossProtocol(t *testing.T) {
	g := newGateway(t, withMQTT)
	native := g.dial(t)
	native.subscribe(t, "cross.*.temp")
	m5, err := dialMQTT(t, g, 5, "tcp", "cross-5", "")
	if err != nil {
		t.Fatal(err)
	}
	m5.subscribe(t, "cross/+/temp", 1)

	m5.publish(t, "cross/room1/temp", 1, `{"c": 21.5}`, "unit", "celsius", "key", "k1")
	msg := native.nextOp(t, "message")
	if msg["topic"] != "cross.room1.temp" || fmt.Sprint(msg["data"]) != "map[c:21.5]" || msg["encoding"] != nil {
		t.Fatalf("native got %v, want the JSON data on cross.room1.temp", msg)
	}
	if h, _ := msg["headers"].(map[string]any); h["unit"] != "celsius" {
		t.Errorf("headers %v, want unit=celsius", msg["headers"])
	}
	if msg["key"] != "k1" {
		t.Errorf("key %v, want k1", msg["key"])
	}
	if got := m5.next(t); got.payload != `{"c": 21.5}` {
		t.Fatalf("MQTT subscriber got %q, want the bytes as published", got.payload)
	}

	m5.publish(t, "cross/room2/temp", 0, "\x01\x02 not json")
	msg = native.nextOp(t, "message")
	if msg["encoding"] != "base64" || msg["data"] != "AQIgbm90IGpzb24=" {
		t.Fatalf("native got %v, want the payload in base64", msg)
	}
	if got := m5.next(t); got.payload != "\x01\x02 not json" {
		t.Fatalf("MQTT subscriber got %q", got.payload)
	}

	native.publish(t, "cross.room3.temp", map[string]any{"c": 19})
	got := m5.next(t)
	if got.topic != "cross/room3/temp" || got.payload != `{"c":19}` || got.qos != 1 {
		t.Fatalf("MQTT subscriber got %+v, want the native JSON text on cross/room3/temp at QoS 1", got)
	}
	if msg := native.nextOp(t, "message"); msg["topic"] != "cross.room3.temp" {
		t.Fatalf("native got %v", msg)
	}
}

// rawMQTT is a connection that speaks packets by hand.
type rawMQTT struct {
	nc net.Conn
	br *bufio.Reader
	v  byte
}

func dialRaw(t *testing.T, g *gateway, transport string, v byte) *rawMQTT {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	nc, err := dialMQTTConn(ctx, g, transport)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawMQTT{nc: nc, br: bufio.NewReader(nc), v: v}
}

func (r *rawMQTT) send(t *testing.T, pk packets.Packet) {
	t.Helper()
	pk.ProtocolVersion = r.v
	var b bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectEncode(&b)
	case packets.Subscribe:
		err = pk.SubscribeEncode(&b)
	case packets.Publish:
		err = pk.PublishEncode(&b)
	case packets.Puback:
		err = pk.PubackEncode(&b)
	case packets.Pingreq:
		err = pk.PingreqEncode(&b)
	}
	if err != nil || b.Len() == 0 {
		t.Fatalf("encoding %s: %v", packets.PacketNames[pk.FixedHeader.Type], err)
	}
	r.write(t, b.Bytes())
}

func (r *rawMQTT) write(t *testing.T, b []byte) {
	t.Helper()
	_ = r.nc.SetWriteDeadline(time.Now().Add(waitTimeout))
	if _, err := r.nc.Write(b); err != nil {
		t.Fatal(err)
	}
}

// read returns the next packet, or the error that ended the connection.
func (r *rawMQTT) read(t *testing.T) (packets.Packet, error) {
	t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(waitTimeout))
	return mqtt.ReadPacket(r.br, r.v, 1<<20)
}

func (r *rawMQTT) expect(t *testing.T, typ byte) packets.Packet {
	t.Helper()
	pk, err := r.read(t)
	if err != nil {
		t.Fatalf("want %s, got %v", packets.PacketNames[typ], err)
	}
	if pk.FixedHeader.Type != typ {
		t.Fatalf("want %s, got %s (reason %#x)", packets.PacketNames[typ], packets.PacketNames[pk.FixedHeader.Type], pk.ReasonCode)
	}
	return pk
}

// expectClosed reads until the connection ends, failing on any packet.
func (r *rawMQTT) expectClosed(t *testing.T) {
	t.Helper()
	pk, err := r.read(t)
	if err == nil {
		t.Fatalf("want the connection closed, got %s", packets.PacketNames[pk.FixedHeader.Type])
	}
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		t.Fatalf("connection still open after %v", waitTimeout)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func connectPacket(id string, keepAlive uint16) packets.Packet {
	return packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect},
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), ClientIdentifier: id, Clean: true, Keepalive: keepAlive}}
}

func (r *rawMQTT) connect(t *testing.T, id string, keepAlive uint16) packets.Packet {
	t.Helper()
	r.send(t, connectPacket(id, keepAlive))
	ack := r.expect(t, packets.Connack)
	if ack.ReasonCode != 0 {
		t.Fatalf("CONNACK %#x, want success", ack.ReasonCode)
	}
	return ack
}

// subscribeQoS1 sends a SUBSCRIBE (packet id 1) to the filters at QoS 1
// and returns its SUBACK.
func (r *rawMQTT) subscribeQoS1(t *testing.T, filters ...string) packets.Packet {
	t.Helper()
	subs := make(packets.Subscriptions, 0, len(filters))
	for _, f := range filters {
		subs = append(subs, packets.Subscription{Filter: f, Qos: 1})
	}
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 1, Filters: subs})
	return r.expect(t, packets.Suback)
}

// silentPastKeepAlive connects an MQTT 5 client over transport with a
// keep alive of 1 s and sends nothing more: the gateway must end the
// session with DISCONNECT 0x8D, not before 1.5 times the keep alive.
func silentPastKeepAlive(t *testing.T, g *gateway, transport, id string) *rawMQTT {
	t.Helper()
	r := dialRaw(t, g, transport, 5)
	start := time.Now()
	r.connect(t, id, 1)
	d := r.expect(t, packets.Disconnect)
	if d.ReasonCode != 0x8D {
		t.Fatalf("DISCONNECT %#x, want 0x8D", d.ReasonCode)
	}
	if el := time.Since(start); el < 1500*time.Millisecond {
		t.Fatalf("closed after %v, before 1.5 times the keep alive", el)
	}
	return r
}

// TestMQTTConnectRefusals: each bad CONNECT gets the reason code MQTT
// prescribes (the 3.1.1 return code for 3.1.1) and is counted.
func TestMQTTConnectRefusals(t *testing.T) {
	g := newGateway(t, withMQTT, withAuth(t), func(c *gwConfig) { c.router.MQTT.MaxClientIDBytes = 16 })
	good := hs256(t, jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(time.Hour).Unix()})
	cases := []struct {
		name string
		v    byte
		mod  func(*packets.Packet)
		want byte
	}{
		{"v5 no password (no anonymous access)", 5, func(p *packets.Packet) {}, 0x87},
		{"v4 no password", 4, func(p *packets.Packet) {}, 5},
		{"v5 bad password", 5, func(p *packets.Packet) { p.Connect.PasswordFlag, p.Connect.Password = true, []byte("nope") }, 0x86},
		{"v4 bad password", 4, func(p *packets.Packet) {
			p.Connect.UsernameFlag, p.Connect.Username = true, []byte("u")
			p.Connect.PasswordFlag, p.Connect.Password = true, []byte("nope")
		}, 4},
		{"v5 client id too long", 5, func(p *packets.Packet) { p.Connect.ClientIdentifier = strings.Repeat("x", 17) }, 0x85},
		{"v4 client id too long", 4, func(p *packets.Packet) { p.Connect.ClientIdentifier = strings.Repeat("x", 17) }, 2},
		{"v4 empty id, not clean", 4, func(p *packets.Packet) { p.Connect.ClientIdentifier, p.Connect.Clean = "", false }, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := dialRaw(t, g, "tcp", c.v)
			pk := connectPacket("refused", 30)
			c.mod(&pk)
			r.send(t, pk)
			ack := r.expect(t, packets.Connack)
			if ack.ReasonCode != c.want {
				t.Fatalf("CONNACK %#x, want %#x", ack.ReasonCode, c.want)
			}
			r.expectClosed(t)
		})
	}
	t.Run("good password", func(t *testing.T) {
		c, err := dialMQTT(t, g, 5, "tcp", "alice-5", good)
		if err != nil {
			t.Fatal(err)
		}
		c.subscribe(t, "x/y", 1)
	})
	t.Run("unsupported protocol level", func(t *testing.T) {
		r := dialRaw(t, g, "tcp", 4)
		// MQTT, level 6: the CONNACK is 3.1.1's, return code 1.
		r.write(t, []byte{0x10, 12, 0, 4, 'M', 'Q', 'T', 'T', 6, 2, 0, 30, 0, 0})
		ack := r.expect(t, packets.Connack)
		if ack.ReasonCode != 1 {
			t.Fatalf("CONNACK %#x, want 1", ack.ReasonCode)
		}
		r.expectClosed(t)
	})
	t.Run("first packet not CONNECT", func(t *testing.T) {
		r := dialRaw(t, g, "tcp", 4)
		r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
		r.expectClosed(t)
	})
	if got := metricValue(t, g.reg, "switchyard_mqtt_connects_total", map[string]string{"result": "not_authorized"}); got != 2 {
		t.Errorf("connects_total{result=not_authorized} = %v, want 2", got)
	}
}

// TestMQTTProtocolErrors: after CONNECT, a second CONNECT, a malformed
// packet and a packet over the maximum size each end the session with
// their MQTT 5 reason code in a DISCONNECT (3.1.1: a close).
func TestMQTTProtocolErrors(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) { c.router.MQTT.MaxPacketBytes = 1024 })
	cases := []struct {
		name  string
		bytes func(r *rawMQTT) []byte
		want  byte
	}{
		{"second CONNECT", func(r *rawMQTT) []byte {
			var b bytes.Buffer
			pk := connectPacket("again", 30)
			pk.ProtocolVersion = r.v
			_ = pk.ConnectEncode(&b)
			return b.Bytes()
		}, 0x82},
		{"malformed SUBSCRIBE", func(r *rawMQTT) []byte {
			if r.v == 5 {
				return []byte{0x82, 4, 0, 1, 0, 0, 5}
			}
			return []byte{0x82, 4, 0, 1, 0, 5}
		}, 0x81},
		{"SUBSCRIBE without filters", func(r *rawMQTT) []byte {
			if r.v == 5 {
				return []byte{0x82, 3, 0, 1, 0}
			}
			return []byte{0x82, 2, 0, 1}
		}, 0x82},
		{"too large", func(*rawMQTT) []byte { return append([]byte{0x30, 0x80, 0x10}, make([]byte, 2048)...) }, 0x95},
		{"QoS 3", func(*rawMQTT) []byte { return []byte{0x36, 5, 0, 1, 'a', 0, 1} }, 0x81},
	}
	for _, c := range cases {
		for _, v := range []byte{4, 5} {
			t.Run(fmt.Sprintf("%s/v%d", c.name, v), func(t *testing.T) {
				r := dialRaw(t, g, "tcp", v)
				r.connect(t, fmt.Sprintf("perr-%d", v), 30)
				r.write(t, c.bytes(r))
				if v == 5 {
					d := r.expect(t, packets.Disconnect)
					if d.ReasonCode != c.want {
						t.Fatalf("DISCONNECT %#x, want %#x", d.ReasonCode, c.want)
					}
				}
				r.expectClosed(t)
			})
		}
	}
	if got := metricValue(t, g.reg, "switchyard_mqtt_disconnects_total", map[string]string{"reason": "protocol_error"}); got != 2*2 {
		t.Errorf("disconnects_total{reason=protocol_error} = %v, want 2", got)
	}
}

// TestMQTTSessionBasics: PINGREQ, an assigned client id, takeover of a
// client id, and the keep alive (closed once 1.5 times it passed in
// silence).
func TestMQTTSessionBasics(t *testing.T) {
	g := newGateway(t, withMQTT)
	t.Run("ping", func(t *testing.T) {
		r := dialRaw(t, g, "ws", 5)
		r.connect(t, "pinger", 30)
		r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
		r.expect(t, packets.Pingresp)
	})
	t.Run("assigned id", func(t *testing.T) {
		r := dialRaw(t, g, "tcp", 5)
		ack := r.connect(t, "", 30)
		if !strings.HasPrefix(ack.Properties.AssignedClientID, "switchyard-") {
			t.Fatalf("assigned client id %q", ack.Properties.AssignedClientID)
		}
		if ack.Properties.MaximumQosFlag || ack.Properties.RetainAvailable != 1 || !ack.Properties.RetainAvailableFlag {
			t.Fatalf("CONNACK properties %+v", ack.Properties)
		}
	})
	t.Run("takeover", func(t *testing.T) {
		first := dialRaw(t, g, "tcp", 5)
		first.connect(t, "same-id", 30)
		second := dialRaw(t, g, "ws", 4)
		second.connect(t, "same-id", 30)
		d := first.expect(t, packets.Disconnect)
		if d.ReasonCode != 0x8E {
			t.Fatalf("DISCONNECT %#x, want 0x8E", d.ReasonCode)
		}
		first.expectClosed(t)
		second.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
		second.expect(t, packets.Pingresp)
	})
	t.Run("keep alive", func(t *testing.T) {
		silentPastKeepAlive(t, g, "tcp", "silent")
	})
}

// TestMQTTInFlightWindow: a client with Receive Maximum 2 has at most two
// QoS 1 deliveries unacknowledged; each PUBACK lets the next one go, and a
// PINGREQ is answered while deliveries wait.
func TestMQTTInFlightWindow(t *testing.T) {
	g := newGateway(t, withMQTT)
	r := dialRaw(t, g, "tcp", 5)
	pk := connectPacket("window", 30)
	pk.Properties.ReceiveMaximum = 2
	r.send(t, pk)
	r.expect(t, packets.Connack)
	if ack := r.subscribeQoS1(t, "win/#"); !bytes.Equal(ack.ReasonCodes, []byte{1}) {
		t.Fatalf("SUBACK %v", ack.ReasonCodes)
	}
	native := g.dial(t)
	for i := range 5 {
		native.publish(t, "win.t", i)
	}
	var ids []uint16
	for range 2 {
		p := r.expect(t, packets.Publish)
		ids = append(ids, p.PacketID)
	}
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	r.expect(t, packets.Pingresp) // nothing else came first: the window is full
	next := 2
	for len(ids) > 0 {
		r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: ids[0]})
		ids = ids[1:]
		if next == 5 {
			continue
		}
		p := r.expect(t, packets.Publish)
		if string(p.Payload) != fmt.Sprint(next) {
			t.Fatalf("delivery %q, want %d", p.Payload, next)
		}
		ids = append(ids, p.PacketID)
		next++
	}
	if next != 5 {
		t.Fatalf("%d deliveries, want 5", next)
	}
}

// TestMQTTGrants: the password's token grants apply as they do to a native
// session: a filter outside the subscribe grants gets SUBACK 0x87 (0x80
// for 3.1.1), a QoS 1 publish outside the publish grants PUBACK 0x87 and
// is not appended, while what the grants allow goes through.
func TestMQTTGrants(t *testing.T) {
	g := newGateway(t, withMQTT, withAuth(t))
	tok := hs256(t, claims([]string{"ok.#"}, []string{"ok.#"}, nil))
	native := g.dialToken(t, hs256(t, claims(nil, []string{"#"}, nil)))
	native.subscribe(t, "#")
	for _, v := range []byte{4, 5} {
		c, err := dialMQTT(t, g, v, "tcp", fmt.Sprintf("grants-%d", v), tok)
		if err != nil {
			t.Fatal(err)
		}
		want := byte(0x87)
		if v == 4 {
			want = 0x80
		}
		if got := c.subscribe(t, "secret/#", 1); got != want {
			t.Errorf("v%d: SUBACK %#x for a filter outside the grants, want %#x", v, got, want)
		}
		if got := c.subscribe(t, "ok/#", 1); got != 1 {
			t.Errorf("v%d: SUBACK %#x, want 1", v, got)
		}
	}
	r := dialRaw(t, g, "tcp", 5)
	pk := connectPacket("grants-raw", 30)
	pk.Connect.PasswordFlag, pk.Connect.Password = true, []byte(tok)
	r.send(t, pk)
	r.expect(t, packets.Connack)
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "secret/x", PacketID: 7, Payload: []byte("1")})
	if ack := r.expect(t, packets.Puback); ack.PacketID != 7 || ack.ReasonCode != 0x87 {
		t.Fatalf("PUBACK %d %#x, want 7 0x87", ack.PacketID, ack.ReasonCode)
	}
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "ok/x", PacketID: 8, Payload: []byte("2")})
	if ack := r.expect(t, packets.Puback); ack.PacketID != 8 || ack.ReasonCode != 0 {
		t.Fatalf("PUBACK %d %#x, want 8 0", ack.PacketID, ack.ReasonCode)
	}
	if m := native.nextOp(t, "message"); m["topic"] != "ok.x" {
		t.Fatalf("native got %v, want only ok.x", m)
	}
}

// TestMQTTFiltersSharePatterns: "t/a" and "t/a/#" both need the native
// pattern "t.a"; a session holds both filters, gets one copy of a message
// on t/a at the higher QoS, and keeps "t/a" when "t/a/#" goes.
func TestMQTTFiltersSharePatterns(t *testing.T) {
	g := newGateway(t, withMQTT)
	for _, v := range []byte{4, 5} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			prefix := fmt.Sprintf("share%d", v)
			c, err := dialMQTT(t, g, v, "tcp", prefix, "")
			if err != nil {
				t.Fatal(err)
			}
			if got := c.subscribe(t, prefix+"/a", 0); got != 0 {
				t.Fatalf("SUBACK %#x", got)
			}
			if got := c.subscribe(t, prefix+"/a/#", 1); got != 1 {
				t.Fatalf("SUBACK %#x", got)
			}
			c.publish(t, prefix+"/a", 1, "one")
			c.publish(t, prefix+"/a/b", 1, "two")
			if m := c.next(t); m.payload != "one" || m.qos != 1 {
				t.Fatalf("got %+v, want one at QoS 1", m)
			}
			if m := c.next(t); m.payload != "two" {
				t.Fatalf("got %+v, want two (one copy of one)", m)
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
			defer cancel()
			if c.v5 != nil {
				if _, err := c.v5.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{prefix + "/a/#"}}); err != nil {
					t.Fatal(err)
				}
			} else if err := wait311(c.v3.Unsubscribe(prefix + "/a/#")); err != nil {
				t.Fatal(err)
			}
			c.publish(t, prefix+"/a/b", 1, "three")
			c.publish(t, prefix+"/a", 1, "four")
			if m := c.next(t); m.payload != "four" || m.qos != 0 {
				t.Fatalf("got %+v, want four at QoS 0", m)
			}
		})
	}
}

// TestMQTTQoS2Inbound: a QoS 2 PUBLISH is appended once, even when the
// client sends it again before PUBREL; each gets PUBREC, PUBREL gets
// PUBCOMP, and a PUBREL for an unknown identifier gets 0x92 (MQTT 5).
func TestMQTTQoS2Inbound(t *testing.T) {
	g := newGateway(t, withMQTT)
	native := g.dial(t)
	native.subscribe(t, "q2.#")
	r := dialRaw(t, g, "tcp", 5)
	r.connect(t, "q2", 30)
	pub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 2}, TopicName: "q2/x", PacketID: 9, Payload: []byte(`"once"`)}
	r.send(t, pub)
	if ack := r.expect(t, packets.Pubrec); ack.PacketID != 9 || ack.ReasonCode != 0 {
		t.Fatalf("PUBREC %d %#x", ack.PacketID, ack.ReasonCode)
	}
	pub.FixedHeader.Dup = true
	r.send(t, pub)
	if ack := r.expect(t, packets.Pubrec); ack.PacketID != 9 {
		t.Fatalf("PUBREC %d", ack.PacketID)
	}
	r.write(t, []byte{0x62, 2, 0, 9})
	if ack := r.expect(t, packets.Pubcomp); ack.PacketID != 9 || ack.ReasonCode != 0 {
		t.Fatalf("PUBCOMP %d %#x", ack.PacketID, ack.ReasonCode)
	}
	r.write(t, []byte{0x62, 2, 0, 9})
	if ack := r.expect(t, packets.Pubcomp); ack.ReasonCode != 0x92 {
		t.Fatalf("PUBCOMP %#x for an identifier released already, want 0x92", ack.ReasonCode)
	}
	// The same identifier again after PUBREL is a new publish.
	pub.FixedHeader.Dup, pub.Payload = false, []byte(`"twice"`)
	r.send(t, pub)
	r.expect(t, packets.Pubrec)
	if m := native.nextOp(t, "message"); m["data"] != "once" {
		t.Fatalf("native got %v, want once", m)
	}
	if m := native.nextOp(t, "message"); m["data"] != "twice" {
		t.Fatalf("native got %v, want twice (the resend was not appended)", m)
	}
}

// TestMQTTSharedSubscriptions: "$share/<name>/<filter>" is consumer group
// <name>: its MQTT members (3.1.1 and 5) and a native member share the
// records, each once; a QoS 1 delivery a raw member never acknowledges
// goes, when that member's connection ends, to another member with DUP.
func TestMQTTSharedSubscriptions(t *testing.T) {
	g := newGateway(t, withMQTT)
	a, err := dialMQTT(t, g, 5, "tcp", "shared-a", "")
	if err != nil {
		t.Fatal(err)
	}
	b, err := dialMQTT(t, g, 4, "ws", "shared-b", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := a.subscribe(t, "$share/workers/jobs/+", 1); got != 1 {
		t.Fatalf("SUBACK %#x", got)
	}
	if got := b.subscribe(t, "$share/workers/jobs/+", 1); got != 1 {
		t.Fatalf("SUBACK %#x", got)
	}
	native := g.dial(t)
	native.subscribe(t, "jobs.*", "group", "workers")
	pub := g.dial(t)
	const n = 30
	for i := range n {
		pub.publish(t, fmt.Sprintf("jobs.k%d", i%3), i)
	}
	seen := map[string]int{}
	deadline := time.After(waitTimeout)
	for len(seen) < n {
		select {
		case m := <-a.msgs:
			seen[m.payload]++
		case m := <-b.msgs:
			seen[m.payload]++
		case m := <-native.frames:
			if m["op"] != "message" {
				continue
			}
			seen[fmt.Sprint(m["data"])]++
			native.send(t, map[string]any{"op": "ack", "group": "workers", "topic": m["topic"], "partition": m["partition"], "offset": m["offset"]})
		case <-deadline:
			t.Fatalf("the group delivered %d of %d records", len(seen), n)
		}
	}
	for k, c := range seen {
		if c != 1 {
			t.Errorf("record %s delivered %d times", k, c)
		}
	}

	// A raw member that takes a delivery and never acks it.
	r := dialRaw(t, g, "tcp", 5)
	r.connect(t, "shared-raw", 30)
	r.subscribeQoS1(t, "$share/solo/solo/+")
	pub.publish(t, "solo.x", "once")
	p := r.expect(t, packets.Publish)
	if string(p.Payload) != `"once"` || p.FixedHeader.Dup {
		t.Fatalf("delivery %q dup=%v", p.Payload, p.FixedHeader.Dup)
	}
	r2 := dialRaw(t, g, "ws", 4)
	r2.connect(t, "shared-raw2", 30)
	r2.subscribeQoS1(t, "$share/solo/solo/+")
	r.nc.Close() // gone without acking: the record goes back to the group
	p = r2.expect(t, packets.Publish)
	if string(p.Payload) != `"once"` || !p.FixedHeader.Dup || p.FixedHeader.Qos != 1 {
		t.Fatalf("redelivery %q dup=%v qos=%d, want the record again with DUP", p.Payload, p.FixedHeader.Dup, p.FixedHeader.Qos)
	}
	// Acked, it is not delivered again (a later record comes next).
	r2.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: p.PacketID})
	pub.publish(t, "solo.x", "twice")
	p = r2.expect(t, packets.Publish)
	if string(p.Payload) != `"twice"` || p.FixedHeader.Dup {
		t.Fatalf("next delivery %q dup=%v", p.Payload, p.FixedHeader.Dup)
	}
	r2.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: p.PacketID})
	// What r2 acked stays acked when it goes: a third member gets only
	// what comes next.
	r3 := dialRaw(t, g, "tcp", 5)
	r3.connect(t, "shared-raw3", 30)
	r3.subscribeQoS1(t, "$share/solo/solo/+")
	r2.write(t, []byte{packets.Disconnect << 4, 0})
	r2.expectClosed(t)
	pub.publish(t, "solo.x", "thrice")
	// (r2's teardown may come after its close: then "thrice" went to r2
	// first and comes back with DUP, which is fine.)
	if p := r3.expect(t, packets.Publish); string(p.Payload) != `"thrice"` {
		t.Fatalf("third member got %q dup=%v first, want thrice (the acked records stay acked)", p.Payload, p.FixedHeader.Dup)
	}
}
