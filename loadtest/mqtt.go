package main

// This file is the MQTT side of --target mqtt (mqtt_compare.go runs the
// phases): subscribers and publishers that speak MQTT over WebSocket (the
// gateway's GET /mqtt, subprotocol "mqtt", binary frames) or over TCP (a
// Mosquitto broker), with packets written by hand and cut from a reused
// buffer by the project's codec (mqtt.Span), so that, as on the native
// and NATS targets, the generator's side of a delivery costs next to
// nothing and allocates nothing: a delivery is a PUBLISH whose bytes are
// searched for the send time, as a NATS MSG's are.
//
//   - A subscriber is one connection: CONNECT (clean, keep alive 0) and
//     one SUBSCRIBE of its topic at QoS 0 in one write; the SUBACK stands
//     for the gateway's "subscribed" reply.
//   - A publisher sends QoS 1 PUBLISHes with at most --window unanswered
//     (less if an MQTT 5 CONNACK's Receive Maximum is smaller); a PUBACK
//     confirms the oldest, as a "published" reply does on the native
//     target. The payload is the same JSON string ("T" and 19 digits of
//     send time) the native publishers send, so latency is measured the
//     same way and a native publish reaches an MQTT subscriber unchanged.
//
// MQTT has no offsets: duplicates and gaps are not detected; a run reports
// what arrived against what was confirmed sent.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/mqtt"
)

// mqttConn is one MQTT connection of the generator, over WebSocket or TCP.
// Its reader state is owned by one goroutine; write may be called
// concurrently with it.
type mqttConn struct {
	ws      *websocket.Conn // or
	tcp     net.Conn
	version byte
	buf     []byte // unparsed bytes
	chunk   []byte // TCP reads
	tmp     bytes.Buffer
	closing atomic.Bool
}

// mqttHandler is called for every whole packet; pkt is valid only during
// the call. Returning false stops the reader.
type mqttHandler func(pkt []byte) bool

func (c *mqttConn) write(ctx context.Context, b []byte) error {
	if c.ws != nil {
		return c.ws.Write(ctx, websocket.MessageBinary, b)
	}
	if d, ok := ctx.Deadline(); ok {
		_ = c.tcp.SetWriteDeadline(d)
		defer c.tcp.SetWriteDeadline(time.Time{})
	}
	_, err := c.tcp.Write(b)
	return err
}

// fill appends what the connection has next to buf.
func (c *mqttConn) fill(ctx context.Context) error {
	if c.ws != nil {
		_, r, err := c.ws.Reader(ctx)
		if err != nil {
			return err
		}
		c.tmp.Reset()
		if _, err := c.tmp.ReadFrom(r); err != nil {
			return err
		}
		c.buf = append(c.buf, c.tmp.Bytes()...)
		return nil
	}
	if c.chunk == nil {
		c.chunk = make([]byte, 64<<10)
	}
	if d, ok := ctx.Deadline(); ok {
		_ = c.tcp.SetReadDeadline(d)
		defer c.tcp.SetReadDeadline(time.Time{})
	}
	n, err := c.tcp.Read(c.chunk)
	c.buf = append(c.buf, c.chunk[:n]...)
	if n > 0 {
		return nil
	}
	return err
}

// parse hands the whole packets in buf to h and keeps the rest.
func (c *mqttConn) parse(h mqttHandler) bool {
	b := c.buf
	defer func() {
		n := copy(c.buf, b)
		c.buf = c.buf[:n]
	}()
	for {
		n, _, ok := mqtt.Span(b)
		if !ok {
			return true
		}
		if !h(b[:n]) {
			b = b[n:]
			return false
		}
		b = b[n:]
	}
}

// run reads until the connection fails or h returns false.
func (c *mqttConn) run(ctx context.Context, h mqttHandler) error {
	for {
		if !c.parse(h) {
			return nil
		}
		if err := c.fill(ctx); err != nil {
			return err
		}
	}
}

// close ends the connection with a DISCONNECT.
func (c *mqttConn) close() {
	c.closing.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = c.write(ctx, mqttDisconnect(c.version))
	if c.ws != nil {
		_ = c.ws.Close(websocket.StatusNormalClosure, "")
		return
	}
	_ = c.tcp.Close()
}

// cleanEnd reports whether err ended a connection we were closing, or
// closed normally.
func (c *mqttConn) cleanEnd(err error) bool {
	return c.closing.Load() || websocket.CloseStatus(err) == websocket.StatusNormalClosure
}

// mqttSession says what dialMQTT sends after CONNECT.
type mqttSession struct {
	clientID string
	filter   string // "": no SUBSCRIBE
}

// dialMQTT connects (to a ws:// URL or a host:port), sends CONNECT and,
// with a filter, SUBSCRIBE at QoS 0, and returns once the CONNACK (and
// SUBACK) arrived, with the Receive Maximum the CONNACK announced (0: none)
// and with early deliveries handed to h.
func dialMQTT(ctx context.Context, target string, version byte, s mqttSession, h mqttHandler) (*mqttConn, int, time.Duration, error) {
	start := time.Now()
	c := &mqttConn{version: version}
	if strings.HasPrefix(target, "ws://") || strings.HasPrefix(target, "wss://") {
		ws, _, err := websocket.Dial(ctx, target, &websocket.DialOptions{Subprotocols: []string{"mqtt"}})
		if err != nil {
			return nil, 0, 0, err
		}
		ws.SetReadLimit(-1)
		c.ws = ws
	} else {
		var d net.Dialer
		tcp, err := d.DialContext(ctx, "tcp", target)
		if err != nil {
			return nil, 0, 0, err
		}
		c.tcp = tcp
	}
	hello := mqttConnect(version, s.clientID)
	if s.filter != "" {
		hello = append(hello, mqttSubscribe(version, s.filter)...)
	}
	fail := func(err error) (*mqttConn, int, time.Duration, error) {
		if c.ws != nil {
			c.ws.CloseNow()
		} else {
			c.tcp.Close()
		}
		return nil, 0, 0, err
	}
	if err := c.write(ctx, hello); err != nil {
		return fail(err)
	}
	var (
		perr       error
		connacked  bool
		subacked   = s.filter == ""
		receiveMax int
	)
	step := func(pkt []byte) bool {
		switch pkt[0] >> 4 {
		case packets.Connack:
			pk, err := decodeMQTT(pkt, version)
			switch {
			case err != nil:
				perr = err
			case pk.ReasonCode != 0:
				perr = fmt.Errorf("mqtt: CONNACK %#x", pk.ReasonCode)
			default:
				connacked = true
				receiveMax = int(pk.Properties.ReceiveMaximum)
			}
		case packets.Suback:
			pk, err := decodeMQTT(pkt, version)
			switch {
			case err != nil:
				perr = err
			case len(pk.ReasonCodes) != 1 || pk.ReasonCodes[0] >= 0x80:
				perr = fmt.Errorf("mqtt: SUBACK %v for %q", pk.ReasonCodes, s.filter)
			default:
				subacked = true
			}
		case packets.Disconnect:
			perr = fmt.Errorf("mqtt: DISCONNECT % x", pkt)
		default:
			if h != nil && !h(pkt) {
				perr = errors.New("mqtt: handler stopped")
			}
		}
		return perr == nil && !(connacked && subacked)
	}
	for perr == nil && !(connacked && subacked) {
		if err := c.fill(ctx); err != nil {
			return fail(err)
		}
		c.parse(step)
	}
	if perr != nil {
		return fail(perr)
	}
	return c, receiveMax, time.Since(start), nil
}

// decodeMQTT decodes a CONNACK or SUBACK.
func decodeMQTT(pkt []byte, version byte) (packets.Packet, error) {
	n, _, _ := mqtt.Span(pkt)
	i := 1
	for pkt[i]&0x80 != 0 {
		i++
	}
	body := pkt[i+1 : n]
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: pkt[0] >> 4, Remaining: len(body)}, ProtocolVersion: version}
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connack:
		err = pk.ConnackDecode(body)
	case packets.Suback:
		err = pk.SubackDecode(body)
	default:
		err = fmt.Errorf("mqtt: unexpected packet type %d", pk.FixedHeader.Type)
	}
	return pk, err
}

// mqttConnect is a CONNECT: clean, keep alive 0 (no pings during a run).
func mqttConnect(version byte, clientID string) []byte {
	var b bytes.Buffer
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: version,
		Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), ClientIdentifier: clientID, Clean: true}}
	_ = pk.ConnectEncode(&b)
	return b.Bytes()
}

// mqttSubscribe is a SUBSCRIBE of filter at QoS 0 (packet id 1).
func mqttSubscribe(version byte, filter string) []byte {
	var b bytes.Buffer
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, ProtocolVersion: version,
		PacketID: 1, Filters: packets.Subscriptions{{Filter: filter}}}
	_ = pk.SubscribeEncode(&b)
	return b.Bytes()
}

func mqttDisconnect(version byte) []byte {
	if version == 5 {
		return []byte{packets.Disconnect << 4, 1, 0}
	}
	return []byte{packets.Disconnect << 4, 0}
}

// appendMQTTPublish appends a QoS 1 PUBLISH of packet id to topic whose
// payload is the JSON string appendPublish puts in "data" (size bytes).
func appendMQTTPublish(dst []byte, version byte, topic string, id uint16, size int, now time.Time) []byte {
	rem := 2 + len(topic) + 2 + size
	if version == 5 {
		rem++ // property length 0
	}
	dst = append(dst, packets.Publish<<4|1<<1)
	for {
		b := byte(rem & 0x7f)
		rem >>= 7
		if rem > 0 {
			b |= 0x80
		}
		dst = append(dst, b)
		if rem == 0 {
			break
		}
	}
	dst = append(dst, byte(len(topic)>>8), byte(len(topic)))
	dst = append(dst, topic...)
	dst = append(dst, byte(id>>8), byte(id))
	if version == 5 {
		dst = append(dst, 0)
	}
	dst = append(dst, `"`+payloadMark...)
	dst = fmt.Appendf(dst, "%019d", now.UnixNano())
	for range max(0, size-minPayload) {
		dst = append(dst, 'x')
	}
	return append(dst, '"')
}

// mqttTopic is the MQTT name of one of the generator's native topic names
// (their segments are name characters, so '.' becomes '/').
func mqttTopic(native string) string {
	return strings.ReplaceAll(native, ".", "/")
}

// startMQTT dials and subscribes s over MQTT; its reader goroutine returns
// when the connection closes.
func (s *subscriber) startMQTT(ctx context.Context) error {
	r := s.r
	id := "lt-" + r.prefix + "-s" + strconv.Itoa(s.idx)
	conn, _, took, err := dialMQTT(ctx, r.cfg.mqttTarget, r.cfg.mqttVersion, mqttSession{clientID: id, filter: mqttTopic(s.pattern)}, s.mqttPacket)
	if err != nil {
		return err
	}
	s.mq = conn
	s.serve(took, func() bool { return conn.cleanEnd(conn.run(context.Background(), s.mqttPacket)) })
	return nil
}

// mqttPacket handles one packet of a subscriber.
func (s *subscriber) mqttPacket(pkt []byte) bool {
	r := s.r
	switch pkt[0] >> 4 {
	case packets.Publish:
		if t, ok := intAfter(pkt, natsMark); ok {
			r.lat.record(s.idx, time.Duration(time.Now().UnixNano()-t))
		}
		r.c.delivered.Add(1)
		s.delivered.Add(1)
	case packets.Disconnect:
		fmt.Fprintf(r.log, "mqtt subscriber %d: DISCONNECT % x\n", s.idx, pkt)
	}
	return true
}

// publishMQTT is publish over MQTT (QoS 1, PUBACK confirms; see the file
// comment).
func (r *runner) publishMQTT(ctx context.Context, topics []int) ([]*subscriber, error) {
	cfg := r.cfg
	pubs := make([]*subscriber, cfg.publishers)
	inflight := make([]chan int, cfg.publishers)
	for i := range pubs {
		pubs[i] = &subscriber{r: r, idx: 1_000_000 + i}
		id := "lt-" + r.prefix + "-p" + strconv.Itoa(i)
		conn, receiveMax, took, err := dialMQTT(ctx, r.cfg.mqttTarget, cfg.mqttVersion, mqttSession{clientID: id}, nil)
		if err != nil {
			r.closeAll(pubs)
			return nil, fmt.Errorf("publisher: %w", err)
		}
		window := cfg.window
		if receiveMax > 0 && receiveMax < window {
			window = receiveMax
			if i == 0 {
				fmt.Fprintf(r.log, "mqtt publishers: window %d (the CONNACK's Receive Maximum)\n", window)
			}
		}
		inflight[i] = make(chan int, window)
		r.connect.record(pubs[i].idx, took)
		r.c.conns.Add(1)
		pubs[i].mq = conn
		fifo := inflight[i]
		r.wg.Add(1)
		go func() { // the PUBACK reader; exits when the connection closes
			defer r.wg.Done()
			defer r.c.conns.Add(-1)
			_ = conn.run(context.Background(), func(pkt []byte) bool {
				switch pkt[0] >> 4 {
				case packets.Puback:
					ti := <-fifo
					// MQTT 5: a reason code >= 0x80 after the packet id.
					if cfg.mqttVersion == 5 && len(pkt) > 4 && pkt[4] >= 0x80 {
						if r.c.publishErrors.Add(1) <= 5 {
							fmt.Fprintf(r.log, "publish error: PUBACK %#x\n", pkt[4])
						}
						return true
					}
					r.sentTo[ti].Add(1)
					r.c.sent.Add(1)
				case packets.Disconnect:
					fmt.Fprintf(r.log, "mqtt publisher: DISCONNECT % x\n", pkt)
				}
				return true
			})
		}()
	}
	names := make([]string, len(r.topics))
	for i, t := range r.topics {
		names[i] = mqttTopic(t)
	}
	deadline, rate, quota := publisherShare(cfg)
	done := make(chan struct{}, cfg.publishers)
	for i, p := range pubs {
		go func() { // exits at the deadline, the quota or a write error
			defer func() { done <- struct{}{} }()
			buf := make([]byte, 0, 128+cfg.size)
			write := func(ctx context.Context, ti int, n int64) error {
				buf = appendMQTTPublish(buf[:0], cfg.mqttVersion, names[ti], uint16(n%65535+1), cfg.size, time.Now())
				return p.mq.write(ctx, buf)
			}
			r.pace(ctx, write, inflight[i], topics, i, rate, quota, deadline)
		}()
	}
	for range pubs {
		<-done
	}
	until := time.Now().Add(10 * time.Second)
	for _, f := range inflight {
		for len(f) > 0 && time.Now().Before(until) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return pubs, nil
}
