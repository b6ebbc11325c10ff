package mqtttest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt311 "github.com/eclipse/paho.mqtt.golang"
)

// Recording is what every client of a script received in one run.
type Recording struct {
	// Clients holds, per client of the script, one Connection per connect
	// step, in script order.
	Clients [][]Connection
}

// Connection is what one client received during one connection.
type Connection struct {
	Step           int    // index of the connect step
	SessionPresent bool   // from the CONNACK
	Granted        []byte // per subscribe step, the SUBACK's QoS or reason code
	Messages       []Message
}

// Message is one PUBLISH a client received, its topic relative to the
// run's prefix.
type Message struct {
	Topic   string
	Payload string
	QoS     byte
	Retain  bool
}

func (m Message) String() string {
	r := ""
	if m.Retain {
		r = " retained"
	}
	return fmt.Sprintf("%s %q qos%d%s", m.Topic, m.Payload, m.QoS, r)
}

// Options of Run. The zero value is usable.
type Options struct {
	// Prefix is put before every topic and client id of the run; default
	// "sy-diff-" and 8 random hex digits, so that runs never meet.
	Prefix string
	// StepTimeout bounds each broker round trip and each wait for a
	// client's marker; default 5 s.
	StepTimeout time.Duration
}

// Run executes s against the MQTT broker at addr (host:port, TCP) and
// returns what each client received. It returns an error if a client
// cannot connect, an action fails or a marker does not come back within
// the step timeout. Before it returns, whatever happened, it disconnects
// every client, clears the retained messages the script set and ends the
// persistent sessions it made.
func Run(ctx context.Context, addr string, s Script, opt Options) (*Recording, error) {
	if opt.Prefix == "" {
		var b [4]byte
		_, _ = rand.Read(b[:])
		opt.Prefix = "sy-diff-" + hex.EncodeToString(b[:])
	}
	if opt.StepTimeout <= 0 {
		opt.StepTimeout = 5 * time.Second
	}
	r := &runner{ctx: ctx, addr: addr, s: s, opt: opt,
		conns:   make([][]*Connection, len(s.Clients)),
		clients: make([]*client, len(s.Clients)), retained: map[string]bool{}}
	err := r.run()
	r.cleanup()
	rec := &Recording{Clients: make([][]Connection, len(s.Clients))}
	for i, cs := range r.conns {
		for _, c := range cs {
			rec.Clients[i] = append(rec.Clients[i], *c)
		}
	}
	return rec, err
}

func (r *runner) run() error {
	for i, st := range r.s.Steps {
		if err := r.do(i, st); err != nil {
			return fmt.Errorf("mqtttest: step %d (%s): %w", i, st, err)
		}
		if err := r.barrier(st.Client); err != nil {
			return fmt.Errorf("mqtttest: after step %d (%s): %w", i, st, err)
		}
	}
	return nil
}

type runner struct {
	ctx      context.Context
	addr     string
	s        Script
	opt      Options
	conns    [][]*Connection // per client, its connections so far
	clients  []*client       // nil while disconnected
	persist  []int           // clients whose last session was persistent
	retained map[string]bool // topics that got a retained publish
	markers  int
}

func (r *runner) topic(rel string) string { return r.opt.Prefix + "/" + rel }

func (r *runner) filter(rel string) string {
	if rest, ok := strings.CutPrefix(rel, "$share/"); ok {
		group, f, _ := strings.Cut(rest, "/")
		return "$share/" + group + "/" + r.topic(f)
	}
	return r.topic(rel)
}

func (r *runner) clientID(i int) string { return r.opt.Prefix + "-" + r.s.Clients[i].Name }

func (r *runner) do(i int, st Step) error {
	ctx, cancel := context.WithTimeout(r.ctx, r.opt.StepTimeout)
	defer cancel()
	c := r.clients[st.Client]
	switch st.Op {
	case OpConnect:
		// The record exists before the CONNECT: a resumed session's queued
		// messages may follow the CONNACK at once.
		conn := &Connection{Step: i}
		r.conns[st.Client] = append(r.conns[st.Client], conn)
		c, err := r.connect(ctx, st.Client, st.Clean, conn)
		if err != nil {
			return err
		}
		r.clients[st.Client] = c
		c.mu.Lock()
		conn.SessionPresent = c.present
		c.mu.Unlock()
		if !st.Clean {
			r.persist = append(r.persist, st.Client)
		}
		// The marker subscription; not recorded.
		_, err = c.subscribe(ctx, r.markerTopic(st.Client), 1)
		return err
	case OpDisconnect:
		r.clients[st.Client] = nil
		return c.disconnect()
	case OpSubscribe:
		code, err := c.subscribe(ctx, r.filter(st.Filter), st.QoS)
		c.mu.Lock()
		c.conn.Granted = append(c.conn.Granted, code)
		c.mu.Unlock()
		return err
	case OpUnsubscribe:
		return c.unsubscribe(ctx, r.filter(st.Filter))
	case OpPublish:
		if st.Retain {
			r.retained[st.Topic] = true
		}
		return c.publish(ctx, r.topic(st.Topic), st.QoS, st.Retain, []byte(st.Payload))
	}
	return fmt.Errorf("unknown op %d", st.Op)
}

func (r *runner) markerTopic(i int) string { return r.opt.Prefix + "/marker/" + r.s.Clients[i].Name }

// barrier makes every connected client, first the one that acted,
// publish a marker to its own topic and wait until it receives it.
func (r *runner) barrier(first int) error {
	order := []int{first}
	for i := range r.clients {
		if i != first {
			order = append(order, i)
		}
	}
	for _, i := range order {
		if r.clients[i] == nil {
			continue
		}
		if err := r.marker(i); err != nil {
			return err
		}
	}
	return nil
}

// marker makes client i publish a new marker and waits, within the step
// timeout, until the client receives it.
func (r *runner) marker(i int) error {
	c := r.clients[i]
	r.markers++
	want := fmt.Sprintf("marker-%d", r.markers)
	ctx, cancel := context.WithTimeout(r.ctx, r.opt.StepTimeout)
	defer cancel()
	if err := c.publish(ctx, r.markerTopic(i), 1, false, []byte(want)); err != nil {
		return err
	}
	for {
		select {
		case got := <-c.markers:
			if got == want {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("client %s: marker %s not received: %w", r.s.Clients[i].Name, want, ctx.Err())
		}
	}
}

// cleanup disconnects the clients, clears the retained messages and ends
// the persistent sessions of the run.
func (r *runner) cleanup() {
	for i, c := range r.clients {
		if c != nil {
			_ = c.disconnect()
			r.clients[i] = nil
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*r.opt.StepTimeout)
	defer cancel()
	for _, i := range r.persist { // a clean connect ends the stored session
		if c, err := r.connect(ctx, i, true, nil); err == nil {
			_ = c.disconnect()
		}
	}
	if len(r.retained) == 0 {
		return
	}
	c, err := r.dial(ctx, r.opt.Prefix+"-cleanup", 5, true, nil)
	if err != nil {
		return
	}
	for t := range r.retained {
		_ = c.publish(ctx, r.topic(t), 1, true, nil)
	}
	_ = c.disconnect()
}

func (r *runner) connect(ctx context.Context, i int, clean bool, conn *Connection) (*client, error) {
	return r.dial(ctx, r.clientID(i), r.s.Clients[i].Version, clean, conn)
}

// client is one connection of one script client, over either Paho.
type client struct {
	markers chan string // payloads of marker messages, in arrival order
	marker  string      // the marker topic prefix, to tell markers apart
	prefix  string      // the run's topic prefix and "/"
	present bool

	mu   sync.Mutex  // guards following
	conn *Connection // where received messages go; nil: nowhere

	v5 *paho.Client
	v3 mqtt311.Client
}

// received records one incoming PUBLISH; the Paho clients call it in
// arrival order from one goroutine.
func (c *client) received(topic string, payload []byte, qos byte, retain bool) {
	if strings.HasPrefix(topic, c.marker) {
		select {
		case c.markers <- string(payload):
		default: // the waiter drains; a full buffer means markers nobody waits for
		}
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil {
		c.conn.Messages = append(c.conn.Messages, Message{
			Topic: strings.TrimPrefix(topic, c.prefix), Payload: string(payload), QoS: qos, Retain: retain})
	}
}

// sessionExpiry is the MQTT 5 session expiry of a persistent session:
// long enough for any run, short enough that a crashed run's sessions go.
const sessionExpiry = 300

// dial connects a client that records what it receives into conn (nil:
// nowhere).
func (r *runner) dial(ctx context.Context, id string, version byte, clean bool, conn *Connection) (*client, error) {
	c := &client{markers: make(chan string, 64), marker: r.opt.Prefix + "/marker/", prefix: r.opt.Prefix + "/",
		conn: conn}
	if version == 5 {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", r.addr)
		if err != nil {
			return nil, err
		}
		c.v5 = paho.NewClient(paho.ClientConfig{
			Conn: nc,
			OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
				c.received(pr.Packet.Topic, pr.Packet.Payload, pr.Packet.QoS, pr.Packet.Retain)
				return true, nil
			}},
		})
		exp := uint32(0)
		if !clean {
			exp = sessionExpiry
		}
		ack, err := c.v5.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: clean, KeepAlive: 30,
			Properties: &paho.ConnectProperties{SessionExpiryInterval: &exp}})
		if err != nil {
			nc.Close()
			return nil, err
		}
		c.present = ack.SessionPresent
		return c, nil
	}
	opts := mqtt311.NewClientOptions().AddBroker("tcp://" + r.addr).SetClientID(id).
		SetProtocolVersion(4).SetCleanSession(clean).SetAutoReconnect(false).
		SetOrderMatters(true).SetKeepAlive(30 * time.Second).SetConnectTimeout(r.opt.StepTimeout).
		SetDefaultPublishHandler(func(_ mqtt311.Client, m mqtt311.Message) {
			c.received(m.Topic(), m.Payload(), m.Qos(), m.Retained())
		})
	c.v3 = mqtt311.NewClient(opts)
	tok := c.v3.Connect()
	if err := wait(ctx, tok); err != nil {
		return nil, err
	}
	c.present = tok.(*mqtt311.ConnectToken).SessionPresent()
	return c, nil
}

// wait waits for a 3.1.1 token within ctx.
func wait(ctx context.Context, tok mqtt311.Token) error {
	select {
	case <-tok.Done():
		return tok.Error()
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *client) subscribe(ctx context.Context, filter string, qos byte) (byte, error) {
	if c.v5 != nil {
		ack, err := c.v5.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}})
		if ack != nil && len(ack.Reasons) == 1 {
			return ack.Reasons[0], err
		}
		return 0x80, err
	}
	tok := c.v3.Subscribe(filter, qos, nil)
	if err := wait(ctx, tok); err != nil {
		return 0x80, err
	}
	return tok.(*mqtt311.SubscribeToken).Result()[filter], nil
}

func (c *client) unsubscribe(ctx context.Context, filter string) error {
	if c.v5 != nil {
		_, err := c.v5.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{filter}})
		return err
	}
	return wait(ctx, c.v3.Unsubscribe(filter))
}

func (c *client) publish(ctx context.Context, topic string, qos byte, retain bool, payload []byte) error {
	if c.v5 != nil {
		_, err := c.v5.Publish(ctx, &paho.Publish{Topic: topic, QoS: qos, Retain: retain, Payload: payload})
		return err
	}
	return wait(ctx, c.v3.Publish(topic, qos, retain, payload))
}

// disconnect sends DISCONNECT and waits until the client's goroutines
// have stopped.
func (c *client) disconnect() error {
	if c.v5 != nil {
		err := c.v5.Disconnect(&paho.Disconnect{ReasonCode: 0})
		select {
		case <-c.v5.Done():
		case <-time.After(10 * time.Second):
			return errors.Join(err, errors.New("paho client did not stop"))
		}
		return err
	}
	c.v3.Disconnect(250)
	return nil
}
