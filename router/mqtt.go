package router

// MQTT 3.1.1 and 5.0, the third transport (docs/mqtt.md): its listeners,
// options, metrics and the index of client ids.
//
// Two listeners take MQTT connections: GET /mqtt on the gateway's own
// address (a WebSocket with subprotocol "mqtt", or "mqttv3.1" as MQTT 3.1
// clients offer, whose binary messages carry the packets, with the origin rules, limits and TLS of /v1/ws), and, when
// MQTTOptions.Addr is set, a TCP listener of its own (over TLS with
// MQTTOptions.TLS: mqtt_tls.go). Both hand a byte
// stream (for the WebSocket, session.Upgraded.NetConn) to serveMQTT
// (mqtt_conn.go), which reads CONNECT, admits the client through the
// session core's steps (the connect rate and connection limits, then the
// password as the credential), and runs the session like any other:
// newConn → addConn → runStart (the CONNACK is its welcome) → packets →
// runEnd. The session writes through session.NewOneWayConn and an
// mqttTransport (mqtt_idle.go; its writes are mqtt_write.go's), which
// turns the queue's batches back into packets back to back and gives each
// QoS 1 and 2 delivery its packet identifier, within the in-flight window.
//
// Concurrency: mqttState.mu guards the client-id index and the
// connections still before their CONNECT; it is a leaf (nothing is taken
// under it, a taken-over session is closed after it is let go).

import (
	"context"
	"crypto/tls"
	"errors"
	"iter"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/session"
)

// MQTTOptions configure the MQTT transport. The zero value of each field is
// its documented default.
type MQTTOptions struct {
	// Addr is the TCP address of the MQTT listener ("host:port"); ""
	// (the default) opens none. GET /mqtt is always served.
	Addr string
	// Listener, when set, is used instead of listening on Addr (tests,
	// embedding); the Router closes it at Shutdown.
	Listener net.Listener
	// MaxPacketBytes bounds a packet a client sends (and is the Maximum
	// Packet Size an MQTT 5 CONNACK announces): a larger one ends the
	// session (DISCONNECT 0x95 for MQTT 5). Default: MaxMessageBytes plus
	// 64 KiB for the topic and properties.
	MaxPacketBytes int
	// MaxInFlight bounds the QoS 1 and 2 deliveries a session has sent and not
	// had acknowledged; an MQTT 5 client's smaller Receive Maximum wins.
	// Default DefaultMQTTMaxInFlight.
	MaxInFlight int
	// MaxClientIDBytes bounds a client identifier (CONNACK 0x85, or 2 for
	// 3.1.1, past it). Default DefaultMQTTMaxClientIDBytes.
	MaxClientIDBytes int
	// ConnectTimeout bounds the wait for CONNECT after a connection opens;
	// default DefaultMQTTConnectTimeout.
	ConnectTimeout time.Duration
	// MaxHeldBytes bounds the bytes of the QoS 1 and 2 deliveries a
	// session holds while its in-flight window is full (copies of their
	// packets, the session's own; their count is bounded by the queue's
	// bound): past it the oldest is dropped, counted. One delivery is
	// always held. A persistent session's resume replay keeps its own
	// deliveries within the same bounds, paced by the client, and never
	// drops them (mqtt_session_replay.go). Default DefaultMQTTMaxHeldBytes.
	MaxHeldBytes int
	// MaxRetained bounds the retained messages of the whole store (every
	// node's, on JetStream): a retained PUBLISH for a topic without one
	// past it is refused (0x97). Default DefaultMQTTMaxRetained.
	MaxRetained int
	// MaxRetainedBytes bounds their bytes likewise. Default
	// DefaultMQTTMaxRetainedBytes.
	MaxRetainedBytes int64
	// MaxPendingWills bounds the will messages held for their will delay
	// (MQTT 5), over all client ids: past it a will is published at once.
	// Default DefaultMQTTMaxPendingWills.
	MaxPendingWills int
	// MaxSessions bounds the persistent sessions stored (every node's, on
	// JetStream): a CONNECT that would store one more is refused (0x97;
	// 3.1.1: return code 3). Default DefaultMQTTMaxSessions.
	MaxSessions int
	// MaxSessionBytes bounds one stored session (its filters and
	// positions, engine.MQTTSession.Size): a SUBSCRIBE past it gets 0x97
	// for the filter. Default DefaultMQTTMaxSessionBytes.
	MaxSessionBytes int64
	// MaxSessionExpiry bounds every session expiry: an MQTT 5 client's
	// longer interval is lowered to it (and said in the CONNACK), and a
	// 3.1.1 session that is not clean lasts this long once its connection
	// is gone. Default DefaultMQTTMaxSessionExpiry.
	MaxSessionExpiry time.Duration
	// MaxTopicAliases is the Topic Alias Maximum an MQTT 5 CONNACK
	// announces: the aliases a client may set (mqtt_alias.go). Negative:
	// none. Default DefaultMQTTMaxTopicAliases.
	MaxTopicAliases int
	// MaxSentTopicAliases bounds the topic aliases the gateway gives an
	// MQTT 5 connection (mqtt_alias.go), within the client's Topic Alias
	// Maximum. Negative: none. Default DefaultMQTTMaxSentTopicAliases.
	MaxSentTopicAliases int
	// MaxSentTopicAliasBytes bounds the bytes of the topic names those
	// aliases stand for, per connection. Default
	// DefaultMQTTMaxSentTopicAliasBytes.
	MaxSentTopicAliasBytes int
	// SessionSweep is how often expired sessions are removed from the
	// store. Default DefaultMQTTSessionSweep.
	SessionSweep time.Duration
	// TLS, when set, makes the TCP listener (Addr or Listener) serve MQTT
	// over TLS with it (mqtt_tls.go); nil: plain TCP.
	TLS *tls.Config
}

// Defaults of MQTTOptions.
const (
	DefaultMQTTMaxInFlight      = 64
	DefaultMQTTMaxClientIDBytes = 256
	DefaultMQTTConnectTimeout   = 10 * time.Second
	DefaultMQTTMaxHeldBytes     = 4 << 20
	mqttPacketOverhead          = 64 << 10
)

func (o MQTTOptions) withDefaults(maxMessage int) MQTTOptions {
	if o.MaxPacketBytes <= 0 {
		o.MaxPacketBytes = max(maxMessage, 0) + mqttPacketOverhead
	}
	o.MaxInFlight = positiveOr(o.MaxInFlight, DefaultMQTTMaxInFlight)
	o.MaxInFlight = min(o.MaxInFlight, 65535)
	o.MaxClientIDBytes = positiveOr(o.MaxClientIDBytes, DefaultMQTTMaxClientIDBytes)
	o.ConnectTimeout = positiveOr(o.ConnectTimeout, DefaultMQTTConnectTimeout)
	o.MaxHeldBytes = positiveOr(o.MaxHeldBytes, DefaultMQTTMaxHeldBytes)
	o.MaxRetained = positiveOr(o.MaxRetained, DefaultMQTTMaxRetained)
	o.MaxRetainedBytes = positiveOr(o.MaxRetainedBytes, DefaultMQTTMaxRetainedBytes)
	o.MaxPendingWills = positiveOr(o.MaxPendingWills, DefaultMQTTMaxPendingWills)
	o.MaxSessions = positiveOr(o.MaxSessions, DefaultMQTTMaxSessions)
	o.MaxSessionBytes = positiveOr(o.MaxSessionBytes, DefaultMQTTMaxSessionBytes)
	o.MaxSessionExpiry = positiveOr(o.MaxSessionExpiry, DefaultMQTTMaxSessionExpiry)
	o.MaxSessionExpiry = min(o.MaxSessionExpiry, time.Duration(0xfffffffe)*time.Second)
	if o.MaxTopicAliases == 0 {
		o.MaxTopicAliases = DefaultMQTTMaxTopicAliases
	}
	o.MaxTopicAliases = min(max(o.MaxTopicAliases, 0), 65535)
	if o.MaxSentTopicAliases == 0 {
		o.MaxSentTopicAliases = DefaultMQTTMaxSentTopicAliases
	}
	o.MaxSentTopicAliases = min(max(o.MaxSentTopicAliases, 0), 65535)
	o.MaxSentTopicAliasBytes = positiveOr(o.MaxSentTopicAliasBytes, DefaultMQTTMaxSentTopicAliasBytes)
	o.SessionSweep = positiveOr(o.SessionSweep, DefaultMQTTSessionSweep)
	return o
}

// maxPacketIDs is how many packet identifiers a session may have in
// flight at once: every nonzero 16-bit value.
const maxPacketIDs = 0xffff

// mqttState is the Router's MQTT transport: its listener, the client-id
// index and its metrics.
type mqttState struct {
	opts MQTTOptions
	ln   net.Listener
	wg   sync.WaitGroup // the accept loop and every connection, until its session has ended
	m    *mqttMetrics
	rm   *retainMetrics
	wm   *willMetrics
	sm   *sessionMetrics
	// sweepStop stops the sweeper of expired sessions (mqtt_session.go);
	// nil without one.
	sweepStop chan struct{}
	// unwatch removes the handler of the store's changes
	// (mqtt_takeover.go); nil without one.
	unwatch func()
	// beforeRun, when set (by tests), runs after a CONNECT was admitted
	// (its stored session claimed) and before its session runs.
	beforeRun atomic.Pointer[func(clientID string)]
	// writeTimeout bounds one write to a connection (the sessions' write
	// timeout).
	writeTimeout time.Duration

	mu      sync.Mutex // leaf; guards the fields below
	clients map[string]*mqttSession
	opening map[net.Conn]struct{}   // connections before their CONNECT was taken
	wills   map[string]*pendingWill // delayed wills by client id (mqtt_will.go)
	stopped bool
}

// mqttMetrics are the MQTT transport's own metrics; sessions, deliveries
// and publishes are also counted by the core's metrics with transport
// "mqtt".
type mqttMetrics struct {
	connects    *prometheus.CounterVec // by result: "accepted" or the refusal
	disconnects *prometheus.CounterVec // server-sent DISCONNECT or close, by reason
	refused     *prometheus.CounterVec // a negative reason code in a PUBACK, SUBACK or UNSUBACK, by reason
	skipped     *prometheus.CounterVec // deliveries not written, by why
	windowWaits prometheus.Counter
	takeovers   *prometheus.CounterVec // by where the earlier connection was: local, remote
	aliasesSet  prometheus.Counter     // topic aliases the gateway gave (mqtt_alias.go)
	aliasesFull prometheus.Counter     // connections whose sent-alias table filled
}

func newMQTTMetrics(reg prometheus.Registerer) *mqttMetrics {
	m := &mqttMetrics{
		connects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_mqtt_connects_total",
			Help: "MQTT CONNECTs answered, by result (accepted or the CONNACK's refusal)."}, []string{"result"}),
		disconnects: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_mqtt_disconnects_total",
			Help: "MQTT sessions the gateway ended, by reason (the MQTT 5 reason name; 3.1.1 sessions are closed)."}, []string{"reason"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_mqtt_refused_total",
			Help: "MQTT requests answered with a failure reason code (PUBACK, SUBACK, UNSUBACK), by reason."}, []string{"reason"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_mqtt_skipped_total",
			Help: "Deliveries not written to MQTT sessions, by why: no_mqtt_name (a native topic MQTT cannot name), too_large (over the client's maximum packet size), native_frame (a frame of the native protocol), window_full (the oldest held delivery, past the queue bound or, for a group delivery, its membership's window), ack_backlog (a group delivery the gateway settles itself, QoS 0 or not to be written, left to the ack timeout past its backlog), no_local (a publish of the session itself to its no-local subscription), expired (past its MQTT 5 message expiry interval)."}, []string{"why"}),
		windowWaits: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_mqtt_inflight_waits_total",
			Help: "Times an MQTT session's writer, or a shared-subscription delivery, waited for a PUBACK because its in-flight window was full."}),
		takeovers: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_mqtt_takeovers_total",
			Help: "MQTT sessions ended by a new connection with the same client identifier, by where that connection came: local (this gateway) or remote (another gateway of the cluster)."}, []string{"where"}),
		aliasesSet: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_mqtt_sent_topic_aliases_total",
			Help: "Topic aliases the gateway gave MQTT 5 connections (a PUBLISH with the topic name and a new alias)."}),
		aliasesFull: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_mqtt_sent_topic_aliases_full_total",
			Help: "MQTT 5 connections that got a topic without an alias because their aliases (the client's Topic Alias Maximum, --mqtt-max-sent-topic-aliases or --mqtt-max-sent-topic-alias-bytes) were all given; counted once per connection."}),
	}
	reg.MustRegister(m.connects, m.disconnects, m.refused, m.skipped, m.windowWaits, m.takeovers, m.aliasesSet, m.aliasesFull)
	// Every series whose label values are known exists from the start
	// (docs/metrics.md, "From start-up").
	for _, r := range []string{"accepted", "not_connect", "malformed_packet", "packet_too_large", "connect_timeout", "closed"} {
		m.connects.WithLabelValues(r)
	}
	for _, rc := range []byte{rcProtocolError, rcUnsupportedVersion, rcBadClientID, rcBadCredentials, rcNotAuthorized,
		rcServerBusy, rcShuttingDown, rcQuotaExceeded, rcConnectRate, rcBadTopic, rcRetainUnsupported, rcServerUnavailable, rcPayloadFormat} {
		m.connects.WithLabelValues(reasonName(rc))
	}
	for _, rc := range []byte{rcUnspecified, rcMalformed, rcProtocolError, rcNotAuthorized, rcShuttingDown, rcKeepAliveTimeout,
		rcTakenOver, rcBadTopic, rcReceiveMaxExceeded, rcTopicAliasInvalid, rcTooLarge, rcQuotaExceeded, rcAdministrative,
		rcRetainUnsupported, rcSubIDUnsupported} {
		m.disconnects.WithLabelValues(reasonName(rc))
	}
	for _, rc := range []byte{rcUnspecified, rcNotAuthorized, rcServerUnavailable, rcBadFilter, rcBadTopic, rcRateTooHigh,
		rcQuotaExceeded, rcPayloadFormat} {
		m.refused.WithLabelValues(reasonName(rc))
	}
	for _, w := range []string{"local", "remote"} {
		m.takeovers.WithLabelValues(w)
	}
	for _, w := range []string{"no_mqtt_name", "too_large", "native_frame", "window_full", "ack_backlog", "no_local", "expired"} {
		m.skipped.WithLabelValues(w)
	}
	return m
}

// startMQTT makes the MQTT transport's state and opens its TCP listener
// when one is configured.
func (rt *Router) startMQTT() error {
	o := rt.opts.MQTT.withDefaults(rt.opts.MaxMessageBytes)
	rt.mq = &mqttState{opts: o, m: newMQTTMetrics(rt.opts.Registry), rm: newRetainMetrics(rt.opts.Registry), wm: newWillMetrics(rt.opts.Registry), wills: make(map[string]*pendingWill),
		sm:      newSessionMetrics(rt.opts.Registry, rt.eng),
		clients: make(map[string]*mqttSession), opening: make(map[net.Conn]struct{}),
		writeTimeout: rt.opts.Session.WriteTimeout}
	if rt.mq.writeTimeout <= 0 {
		rt.mq.writeTimeout = session.DefaultWriteTimeout
	}
	ln := o.Listener
	if ln == nil && o.Addr != "" {
		var err error
		if ln, err = net.Listen("tcp", o.Addr); err != nil {
			return err
		}
	}
	rt.startSweeper() // mqtt_session.go
	rt.watchHolders() // mqtt_takeover.go
	if ln == nil {
		return nil
	}
	if o.TLS != nil {
		ln = tls.NewListener(ln, o.TLS)
	}
	rt.mq.ln = ln
	rt.mq.wg.Add(1)
	go rt.acceptMQTT(ln)
	return nil
}

// MQTTAddr returns the address of the MQTT TCP listener, nil without one.
func (rt *Router) MQTTAddr() net.Addr {
	if rt.mq.ln == nil {
		return nil
	}
	return rt.mq.ln.Addr()
}

// stopMQTT closes the TCP listener and the connections that have not sent
// their CONNECT yet: Shutdown's first step for MQTT (sessions close with
// the others).
func (rt *Router) stopMQTT() {
	mq := rt.mq
	mq.mu.Lock()
	if mq.sweepStop != nil && !mq.stopped {
		close(mq.sweepStop)
	}
	unwatch := mq.unwatch
	mq.unwatch = nil
	mq.stopped = true
	for nc := range mq.opening {
		_ = nc.Close()
	}
	mq.mu.Unlock()
	if unwatch != nil {
		unwatch()
	}
	if mq.ln != nil {
		_ = mq.ln.Close()
	}
	rt.flushWills() // mqtt_will.go
}

// waitMQTT waits for the accept loop and the readers: Shutdown's last step.
func (rt *Router) waitMQTT() { rt.mq.wg.Wait() }

// acceptMQTT accepts TCP connections until the listener is closed.
func (rt *Router) acceptMQTT(ln net.Listener) {
	defer rt.mq.wg.Done()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || rt.mq.isStopped() {
				return
			}
			// Out of file descriptors, a connection reset before it was
			// accepted, …: the listener goes on after a pause, as
			// net/http's does.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			rt.log.Warn("mqtt accept failed", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		if !rt.mq.track(nc) {
			_ = nc.Close()
			continue
		}
		go func() {
			c := rt.mqttContext(nc.RemoteAddr().String())
			release := rt.reserveMQTT(c.RealIP())
			if release == nil {
				rt.mq.untrack(nc)
				_ = nc.Close()
				rt.mq.wg.Done()
				return
			}
			rt.serveMQTT(nc, nil, c, release)
		}()
	}
}

// isStopped reports whether Shutdown began.
func (mq *mqttState) isStopped() bool {
	mq.mu.Lock()
	defer mq.mu.Unlock()
	return mq.stopped
}

// track lists a connection before its CONNECT (closed by stopMQTT) and
// counts its reader; false once Shutdown began.
func (mq *mqttState) track(nc net.Conn) bool {
	mq.mu.Lock()
	defer mq.mu.Unlock()
	if mq.stopped {
		return false
	}
	mq.opening[nc] = struct{}{}
	mq.wg.Add(1)
	return true
}

// untrack takes a connection off the list of those before their CONNECT.
func (mq *mqttState) untrack(nc net.Conn) {
	mq.mu.Lock()
	delete(mq.opening, nc)
	mq.mu.Unlock()
}

// claim lists s under its client id and returns the session it takes
// over, if any, which the caller ends.
func (mq *mqttState) claim(s *mqttSession) *mqttSession {
	mq.mu.Lock()
	defer mq.mu.Unlock()
	old := mq.clients[s.clientID]
	mq.clients[s.clientID] = s
	mq.cancelWill(s.clientID) // [MQTT-3.1.3-9]
	return old
}

// release takes s off the client-id index unless a newer session took
// its id.
func (mq *mqttState) release(s *mqttSession) {
	mq.mu.Lock()
	if mq.clients[s.clientID] == s {
		delete(mq.clients, s.clientID)
	}
	mq.mu.Unlock()
}

// mqttContext is the echo.Context a TCP connection is admitted with: the
// peer's address as its request's, no headers, and a response nobody
// reads (the session core reads the client's address and headers from
// it).
func (rt *Router) mqttContext(remote string) echo.Context {
	r := &http.Request{Method: http.MethodGet, RemoteAddr: remote, Header: http.Header{}}
	r = r.WithContext(context.Background())
	return rt.echo.NewContext(r, discardResponse{h: http.Header{}})
}

// discardResponse is the http.ResponseWriter of mqttContext.
type discardResponse struct{ h http.Header }

func (d discardResponse) Header() http.Header         { return d.h }
func (d discardResponse) Write(p []byte) (int, error) { return len(p), nil }
func (d discardResponse) WriteHeader(int)             {}

// serveMQTTWS is GET /mqtt: MQTT over a WebSocket whose binary messages
// carry the packets (subprotocol "mqtt", or "mqttv3.1" as MQTT 3.1 clients
// offer; the answer names the one offered), with /v1/ws's origin rules.
func (rt *Router) serveMQTTWS(c echo.Context) error {
	if rt.closing.Load() {
		return perr(codeShuttingDown, "server is shutting down")
	}
	r := c.Request()
	if o := r.Header.Get("Origin"); o != "" && !sameOrigin(r, o) && !originAllowed(rt.opts.OriginPatterns, o) {
		return perr(codeForbidden, "a page of origin %s may not open a WebSocket to this gateway: add its host to --allowed-origins", quoteInput(o))
	}
	sub := offeredMQTT(r.Header.Values("Sec-WebSocket-Protocol"))
	if sub == "" {
		return perr(codeBadRequest, `GET /mqtt is MQTT over WebSocket: offer the subprotocol "mqtt" (or "mqttv3.1" for MQTT 3.1)`)
	}
	// The connect rate and connection limits apply before the upgrade,
	// as for /v1/ws: a connection waiting for its CONNECT holds a slot.
	release := rt.reserveConn(c)
	if release == nil {
		return nil // reserveConn wrote the response and counted it
	}
	o := rt.acceptOptions()
	o.Subprotocols = []string{sub}
	// The upgrade goes through the session core's lazy buffers (as
	// serveWS's does): an idle connection keeps neither net/http's 4 KiB
	// bufio pair nor a read buffer.
	up, err := session.Upgrade(c.Response(), r, o)
	if err != nil {
		release()
		rt.log.Debug("mqtt websocket accept failed", "err", err)
		return nil // Accept wrote the response
	}
	up.Conn.SetReadLimit(int64(rt.mq.opts.MaxPacketBytes) + 16)
	nc := up.NetConn()
	if !rt.mq.track(nc) {
		release()
		_ = up.Conn.Close(websocket.StatusGoingAway, "server shutting down")
		return nil
	}
	// The session runs on a goroutine of its own and the handler returns,
	// so that net/http and echo drop what they hold for the request (as
	// serveWS does); admission needs only the client's address and
	// headers.
	ac := rt.mqttContext(net.JoinHostPort(c.RealIP(), "0"))
	ac.Request().Header = r.Header
	go rt.serveMQTT(nc, up, ac, release)
	return nil
}

// offeredMQTT returns the MQTT subprotocol the client offered: "mqtt",
// else "mqttv3.1" (what MQTT 3.1 clients offer), else "". Either carries
// any protocol level; the CONNECT names the one spoken.
func offeredMQTT(values []string) string {
	found := ""
	for _, v := range values {
		for _, p := range strings.Split(v, ",") {
			switch strings.TrimSpace(p) {
			case "mqtt":
				return "mqtt"
			case "mqttv3.1":
				found = "mqttv3.1"
			}
		}
	}
	return found
}

// The maps of an mqttSession are made on first use: an idle session that
// never subscribed, or never had a QoS 1 or 2 delivery or publish, holds
// none of them (BenchmarkMQTTIdleMemory). Reading, ranging over and
// deleting from a nil map need no such step. The filters and patterns are
// in mqttSubs, below.

// mqttSubEntry is what mqttSession.subs holds under one string: the
// SUBSCRIBE filter of that name, the native pattern of that name, or both
// (a filter and a pattern may be spelt alike: "a").
type mqttSubEntry struct {
	f *mqttFilter
	p *mqttPattern
}

// mqttFewSubs is how many entries mqttSubs keeps in its slice before it
// moves them into a map. A subscribed session mostly holds two (a filter
// "a/b" and its pattern "a.b"): a slice of two is 64 bytes where a map of
// them is 336, and a search of eight is as quick as a hash.
const mqttFewSubs = 8

// mqttNamedSub is one entry of mqttSubs.few.
type mqttNamedSub struct {
	name string
	e    mqttSubEntry
}

// mqttSubs are a session's SUBSCRIBE filters and native patterns by name,
// in one set: a slice while there are few, a map past mqttFewSubs.
// Neither is made before the first entry. Not safe for concurrent use
// (the reader goroutine's).
type mqttSubs struct {
	few  []mqttNamedSub          // nil once many is made
	many map[string]mqttSubEntry // nil while few holds them
}

// get returns the entry of name, zero when none.
func (m *mqttSubs) get(name string) mqttSubEntry {
	if m.many != nil {
		return m.many[name]
	}
	for i := range m.few {
		if m.few[i].name == name {
			return m.few[i].e
		}
	}
	return mqttSubEntry{}
}

// set stores e under name; a zero e takes name off.
func (m *mqttSubs) set(name string, e mqttSubEntry) {
	if m.many != nil {
		if e == (mqttSubEntry{}) {
			delete(m.many, name)
		} else {
			m.many[name] = e
		}
		return
	}
	for i := range m.few {
		if m.few[i].name != name {
			continue
		}
		if e != (mqttSubEntry{}) {
			m.few[i].e = e
			return
		}
		last := len(m.few) - 1
		m.few[i] = m.few[last]
		m.few[last] = mqttNamedSub{}
		if m.few = m.few[:last]; last == 0 {
			m.few = nil
		}
		return
	}
	if e == (mqttSubEntry{}) {
		return
	}
	if len(m.few) < mqttFewSubs {
		if m.few == nil {
			m.few = make([]mqttNamedSub, 0, 2)
		}
		m.few = append(m.few, mqttNamedSub{name, e})
		return
	}
	m.many = make(map[string]mqttSubEntry, 2*mqttFewSubs)
	for _, x := range m.few {
		m.many[x.name] = x.e
	}
	m.few = nil
	m.many[name] = e
}

// all yields every entry, in no set order; the body may not change m.
func (m *mqttSubs) all() iter.Seq2[string, mqttSubEntry] {
	return func(yield func(string, mqttSubEntry) bool) {
		if m.many != nil {
			for k, e := range m.many {
				if !yield(k, e) {
					return
				}
			}
			return
		}
		for _, x := range m.few {
			if !yield(x.name, x.e) {
				return
			}
		}
	}
}

// filter returns the SUBSCRIBE filter f, nil when the session has none
// (reader goroutine, as for the methods below).
func (s *mqttSession) filter(f string) *mqttFilter { return s.subs.get(f).f }

// pattern returns the native pattern p, nil when the session has none.
func (s *mqttSession) pattern(p string) *mqttPattern { return s.subs.get(p).p }

// addFilter lists a SUBSCRIBE filter.
func (s *mqttSession) addFilter(f string, mf *mqttFilter) {
	e := s.subs.get(f)
	e.f = mf
	s.subs.set(f, e)
}

// addPattern lists a native pattern of the session.
func (s *mqttSession) addPattern(p string, mp *mqttPattern) {
	e := s.subs.get(p)
	e.p = mp
	s.subs.set(p, e)
}

// dropFilter takes a SUBSCRIBE filter off the list.
func (s *mqttSession) dropFilter(f string) {
	e := s.subs.get(f)
	e.f = nil
	s.subs.set(f, e)
}

// dropPattern takes a native pattern off the list.
func (s *mqttSession) dropPattern(p string) {
	e := s.subs.get(p)
	e.p = nil
	s.subs.set(p, e)
}

// addInflight takes packet identifier id; the caller holds s.imu.
func (s *mqttSession) addInflight(id uint16) {
	if s.inflight == nil {
		s.inflight = make(map[uint16]struct{})
	}
	s.inflight[id] = struct{}{}
}

// addRx records a QoS 2 publish of the client until its PUBREL; the
// caller holds s.imu.
func (s *mqttSession) addRx(id uint16) {
	if s.rx == nil {
		s.rx = make(map[uint16]struct{})
	}
	s.rx[id] = struct{}{}
}
