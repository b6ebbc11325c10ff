package router

// An MQTT session (docs/mqtt.md): CONNECT and its admission, the packet
// reader, keepalive, client-id takeover, PINGREQ and DISCONNECT. CONNECT
// is read and admitted on the goroutine that serves the connection
// (serveMQTT), which then exits; the reader runs on the session's own
// goroutine (session.Transport.Read) and handles packets in order. Idle,
// it parks its connection in the session package's idle poller as the
// native reader does (TCP and WebSocket; over TLS it waits on one
// goroutine on the smallest stack), holding no goroutine and no buffer,
// and reads each burst of input on a goroutine that exits once nothing
// more is at hand; its writer is started on demand by the session core. SUBSCRIBE and UNSUBSCRIBE are in
// mqtt_subscribe.go, PUBLISH and PUBACK in mqtt_publish.go, the writing
// side in mqtt_write.go.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/mqtt"
	"github.com/switchyard/switchyard/session"
)

// MQTT 5 reason codes the transport sends; 3.1.1 CONNACK return codes are
// mapped from them by connackCode.
const (
	rcSuccess            byte = 0x00
	rcNoSubscription     byte = 0x11
	rcPacketIDNotFound   byte = 0x92
	rcReceiveMaxExceeded byte = 0x93
	rcUnspecified        byte = 0x80
	rcMalformed          byte = 0x81
	rcProtocolError      byte = 0x82
	rcUnsupportedVersion byte = 0x84
	rcBadClientID        byte = 0x85
	rcBadCredentials     byte = 0x86
	rcNotAuthorized      byte = 0x87
	rcServerUnavailable  byte = 0x88
	rcServerBusy         byte = 0x89
	rcShuttingDown       byte = 0x8B
	rcKeepAliveTimeout   byte = 0x8D
	rcTakenOver          byte = 0x8E
	rcBadFilter          byte = 0x8F
	rcBadTopic           byte = 0x90
	rcTopicAliasInvalid  byte = 0x94
	rcTooLarge           byte = 0x95
	rcRateTooHigh        byte = 0x96
	rcQuotaExceeded      byte = 0x97
	rcAdministrative     byte = 0x98
	rcRetainUnsupported  byte = 0x9A
	rcPayloadFormat      byte = 0x99
	rcConnectRate        byte = 0x9F
	rcSubIDUnsupported   byte = 0xA1
)

// reasonName names a reason code in metrics.
func reasonName(rc byte) string {
	switch rc {
	case rcSuccess:
		return "success"
	case rcNoSubscription:
		return "no_subscription_existed"
	case rcPacketIDNotFound:
		return "packet_identifier_not_found"
	case rcReceiveMaxExceeded:
		return "receive_maximum_exceeded"
	case rcMalformed:
		return "malformed_packet"
	case rcProtocolError:
		return "protocol_error"
	case rcUnsupportedVersion:
		return "unsupported_protocol_version"
	case rcBadClientID:
		return "client_identifier_not_valid"
	case rcBadCredentials:
		return "bad_user_name_or_password"
	case rcNotAuthorized:
		return "not_authorized"
	case rcServerUnavailable:
		return "server_unavailable"
	case rcServerBusy:
		return "server_busy"
	case rcShuttingDown:
		return "server_shutting_down"
	case rcKeepAliveTimeout:
		return "keep_alive_timeout"
	case rcTakenOver:
		return "session_taken_over"
	case rcBadFilter:
		return "topic_filter_invalid"
	case rcBadTopic:
		return "topic_name_invalid"
	case rcTopicAliasInvalid:
		return "topic_alias_invalid"
	case rcTooLarge:
		return "packet_too_large"
	case rcRateTooHigh:
		return "message_rate_too_high"
	case rcQuotaExceeded:
		return "quota_exceeded"
	case rcAdministrative:
		return "administrative_action"
	case rcRetainUnsupported:
		return "retain_not_supported"
	case rcPayloadFormat:
		return "payload_format_invalid"
	case rcConnectRate:
		return "connection_rate_exceeded"
	case rcSubIDUnsupported:
		return "subscription_identifiers_not_supported"
	}
	return "unspecified_error"
}

// mqtt31MaxClientID is MQTT 3.1's longest client identifier, in bytes.
const mqtt31MaxClientID = 23

// connackCode maps a CONNACK reason code to the 3.1.1 (and 3.1) return
// code.
func connackCode(rc byte) byte {
	switch rc {
	case rcSuccess:
		return 0
	case rcUnsupportedVersion:
		return 1
	case rcBadClientID:
		return 2
	case rcBadCredentials:
		return 4
	case rcNotAuthorized:
		return 5
	}
	return 3 // server unavailable
}

// mqttSession is one MQTT connection's protocol state beside its conn.
type mqttSession struct {
	rt *Router
	cn *conn
	nc net.Conn
	// br is the packet reader: with idle set, held only while it holds
	// input (mqttReaders), nil between bursts.
	br *bufio.Reader
	// up is GET /mqtt's WebSocket (nil over TCP): its lazy buffers and
	// cork (mqtt_write.go).
	up *session.Upgraded
	// idle is the connection's socket in the session package's idle
	// poller, in the session's own park state (TCP and GET /mqtt, not
	// TLS: nothing tells whether a tls.Conn holds plaintext it has
	// decrypted already; nil then): the reader parks there while the
	// connection is idle (not with --idle-park off), or waits for input
	// without reading it (waitInput). parked (below): the reader parked
	// once, and ends the session itself (session.Session.ReadDone); the
	// reader's.
	idle *session.IdleSocket
	// ka ends the session when no packet starts within keepAlive (the
	// reader's).
	ka *time.Timer
	// slot gives back the connection slot (reserveMQTT, reserveConn)
	// once the session has ended (runEnded).
	slot     func()
	clientID string
	expiry   uint32 // MQTT 5's session expiry interval, seconds (reader goroutine)
	maxOut   int32  // the client's Maximum Packet Size (at most MaxInt32); 0: MQTT's
	window   int32  // the in-flight bound of QoS 1 and 2 deliveries (at most 65,535)
	// noLocal counts the filters with no local (reader goroutine only):
	// while there are any, the session's publishes carry its id
	// (mqtt_retain.go).
	noLocal   int32
	keepAlive uint16 // the CONNECT's keep alive, seconds; 0: none (keepAliveFor)
	version   byte
	parked    bool
	// askPresence: the SUBSCRIBE being handled, or the stored filter being
	// restored, asks presence for its filters that name a topic
	// (mqtt_presence.go; reader goroutine only).
	askPresence presenceAsk
	assigned    bool // the gateway chose clientID: the CONNACK names it

	// The stored session (mqtt_session.go); the reader goroutine's.
	owner        string              // this connection's name as the stored session's owner
	persist      bool                // the session outlives the connection
	claimed      bool                // the store holds it under owner
	holding      bool                // the store holds a hold of the id under owner (mqtt_takeover.go)
	watched      bool                // claimed or hold at connect: other nodes' claims end it; set before run
	present      bool                // CONNACK's Session Present
	expiryCapped bool                // expiry was lowered to --mqtt-max-session-expiry
	resume       *engine.MQTTSession // the stored session to restore, until it is
	done         chan struct{}       // closed once the end has saved the session; made on first wait, under imu (mqtt_session.go)
	trk          *mqttTrack          // positions of a persistent session, under imu; set before run
	// *mqttStored is what only a session with a stored record uses; nil
	// for the others (mqtt_takeover.go).
	*mqttStored

	// will is the session's will message, nil when none or discarded
	// (mqtt_will.go).
	will atomic.Pointer[mqttWill]

	aliases mqttAliases // reader goroutine only (mqtt_alias.go)
	// subs are the SUBSCRIBE filters and the native patterns, one set
	// (mqtt.go); reader goroutine only.
	subs mqttSubs
	// retainSeq numbers the retained messages queued (reader goroutine
	// only), the offsets of their stream.
	retainSeq int64

	closeOnce sync.Once // the connection is closed once

	// The writer goroutine's (mqtt_write.go).
	heldN     atomic.Int32 // len(held), for the reader
	held      []heldPacket // QoS 1 and 2 deliveries waiting for room in the window
	heldBytes int          // the bytes of held

	// disc is the reason code of the DISCONNECT the transport sends when
	// the session closes (0: derived from the close status).
	disc atomic.Uint32

	imu      sync.Mutex // leaf; guards the fields below
	nextID   uint16
	inflight map[uint16]struct{}
	// rx are the QoS 2 publishes of the client appended (or being
	// appended) and not yet released by PUBREL, by packet identifier.
	rx map[uint16]struct{}
	// groupAcks are the shared-subscription deliveries in flight, by
	// packet identifier (mqtt_group.go).
	groupAcks map[uint16]groupAck
	// groupHeld are the group deliveries waiting for room in the window, nil
	// until the first (mqtt_group.go).
	groupHeld *groupHold

	acks chan groupAck // to the acker goroutine; nil until a shared subscription (reader goroutine)
}

// mqttFilter is one SUBSCRIBE filter of a session: its granted QoS and its
// native patterns (mqttPattern).
type mqttFilter struct {
	qos      byte
	noLocal  bool // MQTT 5's no local
	rap      bool // MQTT 5's retain as published
	subID    int  // MQTT 5's subscription identifier; 0: none
	presence bool // it asked presence (mqtt_presence.go)
	// presenceRetry: a restored filter that asked presence and whose join
	// failed (not refused): stored as asking, so the next restore joins.
	presenceRetry bool
	patterns      []string
}

// serveMQTT runs one MQTT connection: CONNECT, admission, then the
// session, which runs on goroutines of its own. The connection's count in
// mqttState.wg is done once it is closed and its session torn down. up is
// GET /mqtt's WebSocket, nil for TCP.
//
// release gives back the connection slot the connection holds from before
// its CONNECT (reserveMQTT, or reserveConn for GET /mqtt): a connection
// waiting for its CONNECT holds a socket, a goroutine and a read buffer of
// up to MaxPacketBytes, so it counts against the connection limits as a
// session does.
func (rt *Router) serveMQTT(nc net.Conn, up *session.Upgraded, c echo.Context, release func()) {
	mq := rt.mq
	if !rt.mqttHandshake(nc) { // mqtt_tls.go
		release()
		mq.untrack(nc)
		_ = nc.Close()
		mq.wg.Done()
		return
	}
	br := mqttReaders.Get().(*bufio.Reader)
	br.Reset(nc)
	_ = nc.SetReadDeadline(time.Now().Add(mq.opts.ConnectTimeout))
	pk, err := mqtt.ReadPacket(br, 0, mq.opts.MaxPacketBytes)
	if err != nil || pk.FixedHeader.Type != packets.Connect {
		// Not an MQTT client (or a silent one): closed without a word,
		// as MQTT prescribes for a first packet that is not CONNECT.
		mq.m.connects.WithLabelValues(connectErrName(err)).Inc()
		release()
		mq.untrack(nc)
		_ = nc.Close()
		putMQTTReader(br)
		mq.wg.Done()
		return
	}
	s := rt.admitMQTT(nc, c, &pk, release)
	if s == nil {
		mq.untrack(nc)
		_ = nc.Close()
		putMQTTReader(br)
		mq.wg.Done()
		return
	}
	s.br, s.up, s.slot = br, up, release
	mq.untrack(nc)
	if f := mq.beforeRun.Load(); f != nil {
		(*f)(s.clientID)
	}
	s.run()
}

// connectErrName names what came instead of a CONNECT.
func connectErrName(err error) string {
	switch {
	case err == nil:
		return "not_connect"
	case errors.Is(err, mqtt.ErrTooLarge):
		return "packet_too_large"
	case errors.Is(err, mqtt.ErrMalformed):
		return "malformed_packet"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "connect_timeout"
	}
	return "closed"
}

// reserveMQTT applies the connect rate and the connection limits to a TCP
// connection before its CONNECT is read, and returns its slot's release,
// or nil (counted) when it is to be closed without a word.
func (rt *Router) reserveMQTT(ip string) func() {
	if !rt.settings().connect.Allow(ip, time.Now()) {
		rt.lim.limited.WithLabelValues(limitConnectRate).Inc()
		rt.mq.m.connects.WithLabelValues(reasonName(rcConnectRate)).Inc()
		return nil
	}
	release, refused := rt.limits.acquireConn(ip)
	if release == nil {
		rt.lim.limited.WithLabelValues(refused).Inc()
		rt.mq.m.connects.WithLabelValues(reasonName(rcQuotaExceeded)).Inc()
	}
	return release
}

// admitMQTT checks a CONNECT, then the credential (the password), and
// returns the session's state, which owns release, or nil once it has
// answered the refusal and called release.
func (rt *Router) admitMQTT(nc net.Conn, c echo.Context, pk *packets.Packet, release func()) *mqttSession {
	mq := rt.mq
	v := pk.ProtocolVersion
	refuse := func(rc byte) *mqttSession {
		release()
		mq.m.connects.WithLabelValues(reasonName(rc)).Inc()
		ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connack}, ProtocolVersion: v, ReasonCode: rc}
		if v != mqtt.Version5 {
			ack.ProtocolVersion, ack.ReasonCode = mqtt.Version311, connackCode(rc)
		}
		var b bytes.Buffer
		_ = ack.ConnackEncode(&b)
		_ = nc.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = nc.Write(b.Bytes())
		return nil
	}
	if v != mqtt.Version31 && v != mqtt.Version311 && v != mqtt.Version5 {
		return refuse(rcUnsupportedVersion)
	}
	if code := pk.ConnectValidate(); code != packets.CodeSuccess {
		switch code {
		case packets.ErrClientIdentifierNotValid:
			return refuse(rcBadClientID)
		case packets.ErrProtocolViolationProtocolVersion, packets.ErrProtocolViolationProtocolName:
			// "MQTT" at level 3, "MQIsdp" at 4 or 5, another name: the
			// level and name the gateway speaks do not match.
			return refuse(rcUnsupportedVersion)
		}
		return refuse(rcProtocolError)
	}
	if rt.closing.Load() {
		return refuse(rcShuttingDown)
	}
	id := pk.Connect.ClientIdentifier
	if len(id) > mq.opts.MaxClientIDBytes {
		return refuse(rcBadClientID)
	}
	if v == mqtt.Version31 && (id == "" || len(id) > mqtt31MaxClientID) {
		return refuse(rcBadClientID) // MQTT 3.1: 1 to 23 bytes
	}
	assigned := false
	if id == "" {
		if v == mqtt.Version311 && !pk.Connect.Clean {
			return refuse(rcBadClientID) // [MQTT-3.1.3-8]
		}
		id, assigned = "switchyard-"+newID(), true
	} else {
		id = strings.Clone(id)
	}
	who, rc := rt.authMQTT(c, pk)
	if rc != rcSuccess {
		return refuse(rc)
	}
	will, rc := rt.admitWill(pk, who) // mqtt_will.go
	if rc != rcSuccess {
		return refuse(rc)
	}
	s := &mqttSession{rt: rt, nc: nc, version: v, clientID: id,
		window: int32(mq.opts.MaxInFlight)} // its maps and done are made on first use (mqtt.go, mqtt_session.go)
	s.keepAlive = pk.Connect.Keepalive
	if v == mqtt.Version31 && !pk.Connect.Clean {
		// A 3.1 session that is not clean is kept as a 3.1.1 one is, for
		// --mqtt-max-session-expiry: the session store (openSession)
		// reads that from its expiry, as it does for MQTT 5.
		s.expiry = uint32(mq.opts.MaxSessionExpiry / time.Second)
	}
	if v == mqtt.Version5 {
		if rm := int(pk.Properties.ReceiveMaximum); rm > 0 {
			s.window = min(s.window, int32(rm))
		}
		// Past MaxInt32 no packet can reach it (MQTT's own limit is
		// 268,435,455 bytes): it bounds nothing.
		s.maxOut = int32(min(pk.Properties.MaximumPacketSize, math.MaxInt32))
		s.expiry = pk.Properties.SessionExpiryInterval
	}
	s.assigned = assigned
	if !pk.Connect.Clean || s.expiry > 0 {
		// A session that may resume a stored one or keep its own
		// (mqtt_takeover.go).
		s.mqttStored = new(mqttStored)
	}
	if rc := rt.openSession(s, pk, will); rc != rcSuccess { // mqtt_session.go
		return refuse(rc)
	}
	if s.persist || s.resume != nil {
		// A resumed session replays its stored subscriptions from their
		// positions (startResumed), kept or not at its end.
		s.trk = &mqttTrack{next: map[trackKey]int64{}, sent: map[uint16]trackPos{}}
	}
	s.will.Store(will)
	s.cn = rt.newConn(c, transportMQTT, who, false)
	// The connection's session id is its owner name in the stored
	// session: the connection that resumes the session knows from the
	// record which presence member it replaces (mqtt_presence.go).
	s.cn.id = s.owner
	s.cn.mqtt = s
	return s
}

// authMQTT authenticates a CONNECT: its password is the credential, as a
// WebSocket's bearer token is; without one the anonymous rules (or the
// connect hook) apply.
func (rt *Router) authMQTT(c echo.Context, pk *packets.Packet) (*principal, byte) {
	hook := rt.hooks.enabled(hookConnect)
	cred := string(pk.Connect.Password)
	a := rt.authSettings(c).auth // the session's settings (recheck.go)
	if !a.enabled || cred == "" && hook {
		if !hook {
			return openPrincipal, rcSuccess
		}
		p, err := rt.hookConnect(c)
		if err != nil {
			if pe := toProto(err); pe.Code == codeRateLimited {
				return nil, rcServerBusy
			}
			return nil, rcNotAuthorized
		}
		return p, rcSuccess
	}
	p, ae := a.authenticate(cred)
	if ae != nil {
		rt.lim.authFailures.WithLabelValues(ae.Reason).Inc()
		if cred == "" {
			return nil, rcNotAuthorized
		}
		return nil, rcBadCredentials
	}
	return p, rcSuccess
}

// connack encodes the accepting CONNACK: for MQTT 5 with what the gateway
// supports and its bounds.
func (s *mqttSession) connack() []byte {
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connack}, ProtocolVersion: s.version,
		SessionPresent: s.present && s.version != mqtt.Version31} // 3.1's first byte is reserved
	if s.version == mqtt.Version5 {
		p := &ack.Properties
		if s.expiryCapped {
			p.SessionExpiryInterval, p.SessionExpiryIntervalFlag = s.expiry, true
		}
		if s.assigned {
			p.AssignedClientID = s.clientID
		}
		p.ReceiveMaximum = uint16(min(s.rt.opts.PublishPipeline, 65535))
		p.MaximumPacketSize = uint32(s.rt.mq.opts.MaxPacketBytes)
		p.RetainAvailable, p.RetainAvailableFlag = 0, true
		if s.rt.retainer() != nil {
			p.RetainAvailable = 1
		}
		p.SubIDAvailable, p.SubIDAvailableFlag = 0, true
		p.WildcardSubAvailable, p.WildcardSubAvailableFlag = 1, true
		s.connackProps(p) // mqtt_props.go
	}
	var b bytes.Buffer
	_ = ack.ConnackEncode(&b)
	return b.Bytes()
}

// run runs an admitted session through the session core until it ends.
func (s *mqttSession) run() {
	rt, cn := s.rt, s.cn
	sopts := cn.sessionOptions()
	sopts.EncodeGap = s.encodeGap
	if s.trk != nil {
		sopts.FramePrefix = s.framePrefix // mqtt_session_track.go
	}
	cn.sess = session.NewOneWayConn(cn.id, sopts, (*mqttTransport)(s)) // mqtt_idle.go
	// In the session's own park state (a one-way session has it unused),
	// before addConn shows it to the metrics; parked only with
	// --idle-park on (parkIdle).
	if s.up != nil {
		s.idle = s.up.IdleSocketIn(cn.sess, s.resumeRead)
	} else {
		s.idle = session.NewIdleSocketIn(cn.sess, s.nc, s.resumeRead)
	}
	if !rt.addConn(cn) {
		s.slot()
		s.disc.Store(uint32(rcShuttingDown))
		_ = s.close(0, "")
		rt.mq.m.connects.WithLabelValues(reasonName(rcShuttingDown)).Inc()
		s.endSession()
		rt.mq.wg.Done()
		return
	}
	// The CONNACK is queued before the session can be taken over: a
	// takeover's close flushes what is queued, and MQTT's first packet
	// from the server is always the CONNACK, never a DISCONNECT.
	rt.mq.m.connects.WithLabelValues("accepted").Inc()
	cn.runStart(s.connack())
	// The stored subscriptions are in the trie before the CONNACK is
	// written (the writer starts with Start): a publish made once another
	// client saw it reaches them; their deliveries queue after it.
	s.restoreSession() // mqtt_session_track.go
	if old := rt.mq.claim(s); old != nil {
		rt.mq.m.takeovers.WithLabelValues("local").Inc()
		old.end(rcTakenOver, "session taken over")
		if s.claimed || s.holding {
			s.reclaimSession() // old may have claimed the store after s (mqtt_session.go)
		}
	}
	rt.checkHolder(s) // another node's connection may have claimed the id meanwhile (mqtt_takeover.go)
	// The reader (readLoop) runs on the session's goroutine; the end runs
	// there too, once the reader and the writer are done.
	// As for /v1/ws (conn.go), Shutdown closes every session itself: a
	// context that is never done spares each session an AfterFunc and a
	// children map in cn.ctx.
	if err := cn.sess.Start(context.WithoutCancel(cn.ctx), nil, s.runEnded); err != nil {
		cn.runEnd(err, s.slot) // not started before: cannot happen
		rt.mq.release(s)
		s.endSession()
		rt.mq.wg.Done()
	}
}

// runEnded is the end of a session that ran (Start's ended): a method
// value rather than a closure, which every idle session would keep.
func (s *mqttSession) runEnded(err error) {
	s.cn.runEnd(err, s.slot)
	s.rt.mq.release(s)
	s.endWill()
	s.endSession() // mqtt_session.go
	s.rt.mq.wg.Done()
}

// end closes the session with an MQTT 5 reason code (3.1.1: a close).
func (s *mqttSession) end(rc byte, why string) {
	s.disc.CompareAndSwap(0, uint32(rc))
	s.cn.sess.Close(closeStatusMQTT, why)
}

// readLoop reads and handles packets until the connection fails or the
// session ends it (mqttTransport.Read).
//
// With nothing buffered it parks the connection in the session package's
// idle poller (s.idle): the goroutine returns, and resumeRead reads on on
// a fresh one once input comes, the connection ends or the session closes
// it (closeUnpark). Where it cannot park it waits for the connection's
// input (waitInput) on this goroutine, which runs nothing else, and reads
// each burst on a goroutine of its own (readBurst): the deep stack of a
// read through the WebSocket library is held only while input is at
// hand. Bursts never overlap; the reader's fields pass between them
// through the channel, or through the poller.
//
// Keep alive is a timer rather than a read deadline: a WebSocket's
// connection (websocket.NetConn) closes itself when its read deadline
// passes, before the DISCONNECT 0x8D could be written. It runs on while
// the reader is parked, and its close resumes it.
func (s *mqttSession) readLoop() {
	_ = s.nc.SetReadDeadline(time.Time{}) // the CONNECT's is over
	if s.keepAlive > 0 {
		s.ka = time.AfterFunc(s.keepAliveFor(), func() { s.end(rcKeepAliveTimeout, "keep alive timeout") })
	}
	if !s.canWait() {
		for s.readNext() {
		}
		s.readEnded()
		return
	}
	burst := make(chan bool, 1)
	for {
		if !s.buffered() {
			if s.parkIdle() {
				return
			}
			s.waitInput()
		}
		s.takeReader()
		go func() { burst <- s.readBurst() }()
		if !<-burst {
			s.readEnded()
			return
		}
	}
}

// keepAliveFor is how long the session waits for a packet: 1.5 times the
// client's keep alive [MQTT-3.1.2-24].
func (s *mqttSession) keepAliveFor() time.Duration {
	return time.Duration(s.keepAlive) * 1500 * time.Millisecond
}

// canWait reports whether the reader can wait for the connection's input
// without reading it (waitInput): not over TLS.
func (s *mqttSession) canWait() bool { return s.idle != nil }

// waitInput waits for the connection's input, holding no buffer; for a
// session that canWait.
func (s *mqttSession) waitInput() {
	if s.up != nil {
		s.up.Wait()
		return
	}
	s.idle.Wait()
}

// readBurst reads and handles packets while input is at hand, reporting
// whether to read on. A packet whose start is at hand is read whole, its
// rest waited for here.
func (s *mqttSession) readBurst() bool {
	for {
		if !s.readNext() {
			return false
		}
		if !s.buffered() {
			return true
		}
	}
}

// buffered reports whether input already read waits in the packet reader
// or the WebSocket's buffers, or a WebSocket message is not read to its
// end (the inflater of a compressed one may hold its rest): the reader
// then reads on rather than park or wait for the socket.
func (s *mqttSession) buffered() bool {
	return s.br != nil && s.br.Buffered() > 0 || s.up != nil && (s.up.Reading() || s.up.Buffered())
}

// readNext reads and handles one packet, reporting whether to read on.
func (s *mqttSession) readNext() bool {
	if !s.canWait() && s.br.Buffered() == 0 {
		s.cn.flushDeferred() // before waiting for the socket (deferral.go)
	}
	if s.up != nil && s.br.Buffered() == 0 {
		s.up.AtPacketStart()
	}
	pk, err := mqtt.ReadPacket(s.br, s.version, s.rt.mq.opts.MaxPacketBytes)
	if errors.Is(err, session.ErrNoMessage) {
		// The message ended with the last packet, or a wake brought a
		// WebSocket ping only: no MQTT packet, so the keep alive runs on
		// (it counts MQTT control packets, [MQTT-3.1.2-22]).
		return true
	}
	if err != nil {
		s.readFailed(err)
		return false
	}
	if s.ka != nil {
		s.ka.Reset(s.keepAliveFor())
	}
	return s.handle(&pk)
}

// readFailed ends the session after a read error.
func (s *mqttSession) readFailed(err error) {
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		s.end(rcKeepAliveTimeout, "keep alive timeout")
	case errors.Is(err, mqtt.ErrTooLarge):
		s.end(rcTooLarge, "packet too large")
	case errors.Is(err, mqtt.ErrMalformed):
		s.end(rcMalformed, "malformed packet")
	default:
		// The client went away (EOF), or the session closed the
		// connection: no DISCONNECT to send, and none counted unless the
		// gateway chose a reason before.
		s.disc.CompareAndSwap(0, discNone)
		s.closeNow()
		s.cn.sess.Close(closeStatusMQTT, "connection closed")
	}
}

// handle handles one packet, reporting whether to read on.
func (s *mqttSession) handle(pk *packets.Packet) bool {
	switch pk.FixedHeader.Type {
	case packets.Publish:
		return s.publish(pk)
	case packets.Puback, packets.Pubcomp:
		s.acked(pk.PacketID)
	case packets.Pubrec:
		s.received(pk)
	case packets.Pubrel:
		s.released(pk.PacketID)
	case packets.Subscribe:
		return s.subscribe(pk)
	case packets.Unsubscribe:
		return s.unsubscribe(pk)
	case packets.Pingreq:
		s.cn.sess.Send(session.Item{Frame: pingresp})
	case packets.Disconnect:
		// A normal end: no DISCONNECT goes back.
		if !s.disconnected(pk) { // mqtt_will.go
			s.end(rcProtocolError, "session expiry set by DISCONNECT after 0 in CONNECT")
			return false
		}
		s.disc.Store(uint32(rcSuccess) | discNone)
		s.cn.sess.Close(closeStatusMQTT, "client disconnected")
		return false
	case packets.Connect:
		s.end(rcProtocolError, "second CONNECT") // [MQTT-3.1.0-2]
		return false
	default:
		// AUTH, and packets only a server sends.
		s.end(rcProtocolError, fmt.Sprintf("unexpected %s", packets.PacketNames[pk.FixedHeader.Type]))
		return false
	}
	return true
}

// mqttReadBuffer is the size of a connection's packet reader: small,
// since ReadPacket reads a packet's body straight into a buffer of its
// own. An idle session holds none (readLoop), except on a connection
// without an input wait (TLS).
const mqttReadBuffer = 512

// mqttReaders are the packet readers of the sessions reading a burst.
var mqttReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, mqttReadBuffer) }}

// putMQTTReader gives a packet reader back to mqttReaders, holding
// nothing of its connection.
func putMQTTReader(br *bufio.Reader) {
	br.Reset(nil)
	mqttReaders.Put(br)
}

// pingresp is the PINGRESP packet.
var pingresp = []byte{packets.Pingresp << 4, 0}

// discNone marks disc as "send no DISCONNECT" (a client's DISCONNECT).
const discNone = 1 << 8
