package router

// The writing side of an MQTT session: the session.Transport its queue
// writes to, the in-flight window of QoS 1 and 2 deliveries, and the PUBLISH
// packets fan-out shares between sessions.
//
// Fan-out (Router.fanOut) encodes a record's PUBLISH once per protocol
// level and QoS layout (mqttFrames), whatever the number of MQTT sessions
// and patterns it reaches, and queues those bytes like a native message
// frame: the same bounded queue, drop policy and counts. The queue joins a
// batch's frames with '\n'; the transport's write walks the batch by the
// packets' own lengths (mqtt.Span), drops the separators, and copies each
// packet into the session's write buffer, where a QoS 1 or 2 PUBLISH gets
// the session's packet identifier (mqtt.PatchPublish) and an MQTT 5
// PUBLISH its topic alias (mqtt_alias.go) in that same copy. A packet identifier is
// taken only within the window (MQTTOptions.MaxInFlight, or the client's
// smaller Receive Maximum): with the window full the writer sends what it
// has and holds the QoS 1 and 2 deliveries that do not fit, in order, until
// PUBACKs (PUBCOMPs for QoS 2) make room (shared with the held
// shared-subscription deliveries, the older first: mqtt_group.go), while every other packet (PINGRESP, PUBACK, SUBACK,
// QoS 0 deliveries) still goes out; the held deliveries are bounded by the
// queue's bound and past it the oldest is dropped, counted as a queue drop,
// but for a persistent session's replayed ones, which the replay paces
// instead (mqtt_session_replay.go).
//
// A frame of the native protocol (a JSON object, such as topic_deleted or
// refresh_required, which the session core sends to every session) has no
// MQTT form and is skipped, counted.

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/mqtt"
	"github.com/switchyard/switchyard/session"
)

// closeStatusMQTT is the close status of an MQTT session's ends that are
// MQTT's own (the reason code goes in disc).
const closeStatusMQTT = websocket.StatusNormalClosure

// maxKeptWriteBuf bounds a write buffer kept for the next batch.
const maxKeptWriteBuf = 64 << 10

// mqttWriteBufs hold the sessions' write buffers (*[]byte) between
// batches: a session takes one for a batch and gives it back after, so an
// idle session holds none and a busy one mostly finds its last.
var mqttWriteBufs = sync.Pool{New: func() any { return new([]byte) }}

// write implements session.Transport.Write: one batch of the queue, after
// the held QoS 1 and 2 deliveries the window now lets go.
func (s *mqttSession) write(_ context.Context, p []byte) error {
	buf := mqttWriteBufs.Get().(*[]byte)
	out := s.releaseHeld((*buf)[:0])
	for i := 0; i < len(p); {
		switch p[i] {
		case '\n':
			i++
			continue
		case '{':
			j := bytes.IndexByte(p[i:], '\n')
			if j < 0 {
				j = len(p) - i
			}
			i += j
			s.rt.mq.m.skipped.WithLabelValues("native_frame").Inc()
			continue
		case 0:
			// A persistent session's position line (mqtt_session_track.go).
			j := bytes.IndexByte(p[i:], '\n')
			if j < 0 {
				j = len(p) - i
			}
			if s.trk != nil {
				s.trk.cur, s.trk.curReplayed = parsePrefix(p[i+1 : i+j])
			}
			i += j
			continue
		}
		n, idAt, ok := mqtt.Span(p[i:])
		if !ok {
			return errors.New("mqtt: a queued frame is not a whole packet")
		}
		pkt := p[i : i+n]
		i += n
		var pos trackPos
		replayed := false // a replayed delivery (mqtt_session_replay.go)
		if s.trk != nil {
			pos, s.trk.cur = s.trk.cur, trackPos{}
			replayed, s.trk.curReplayed = s.trk.curReplayed, false
		}
		if s.maxOut > 0 && n > int(s.maxOut) {
			s.rt.mq.m.skipped.WithLabelValues("too_large").Inc() // [MQTT-3.1.2-25]
			if replayed {
				s.wroteReplayed(n)
			}
			continue
		}
		if idAt == 0 || pkt[idAt] != 0 || pkt[idAt+1] != 0 {
			// QoS 0, or a group delivery with its identifier (mqtt_group.go).
			out, _ = s.appendPacket(out, pkt, idAt) // with a topic alias (mqtt_alias.go)
			if replayed {
				s.wroteReplayed(n)
			}
			continue
		}
		if len(s.held) == 0 {
			if id, ok := s.takeID(pos); ok {
				at := len(out)
				var to int
				out, to = s.appendPacket(out, pkt, idAt)
				mqtt.PatchPublish(out[at:], to, pkt[0]&dupFlag != 0, id)
				if replayed {
					s.wroteReplayed(n)
				}
				continue
			}
		}
		s.hold(pkt, idAt, pos, replayed)
	}
	err := s.flush(out)
	s.writeDone() // the replay goes on (mqtt_session_replay.go)
	if cap(out) <= maxKeptWriteBuf {
		*buf = out[:0]
		mqttWriteBufs.Put(buf)
	}
	return err
}

// heldPacket is a QoS 1 or 2 delivery waiting for room in the window: a copy of
// its packet and the offset of its identifier.
type heldPacket struct {
	b    []byte
	idAt int
	pos  trackPos // a persistent session's (mqtt_session_track.go)
	// replayed: a delivery of a resume's replay, never dropped
	// (mqtt_session_replay.go).
	replayed bool
	// order is when it came, against the held group deliveries'
	// (groupHold.seq): a freed slot goes to the older.
	order uint64
}

// dupFlag is PUBLISH's DUP bit, set on a replayed delivery that was in
// flight (mqtt_session_track.go).
const dupFlag = 1 << 3

// hold keeps a QoS 1 or 2 delivery until the window has room, in order. The
// held deliveries are bounded by the session's queue bound: past it the
// oldest is dropped, counted as the queue's drops are.
//
// Their bytes are bounded too (MQTTOptions.MaxHeldBytes): they are copies,
// the session's own, where the queue's frames are shared between sessions.
//
// A replayed delivery (replayed) is never dropped, and the bounds are
// the live deliveries' alone: the replay keeps its own within the same
// bounds (mqtt_session_replay.go), so the held deliveries are at most
// twice the bounds, and a replay going on never pushes a live delivery
// out.
func (s *mqttSession) hold(pkt []byte, idAt int, pos trackPos, replayed bool) {
	maxN, maxBytes := s.rt.opts.Session.QueueMessages, s.rt.mq.opts.MaxHeldBytes
	if !replayed {
		for i := 0; s.heldLive() > 0 && (s.heldLive() >= maxN || s.heldLiveBytes()+len(pkt) > maxBytes); {
			for s.held[i].replayed {
				i++
			}
			s.dropHeldAt(i)
		}
	}
	s.held = append(s.held, heldPacket{b: bytes.Clone(pkt), idAt: idAt, pos: pos, replayed: replayed})
	s.heldBytes += len(pkt)
	if replayed {
		s.trk.heldReplayed++
		s.trk.heldReplayedBytes += len(pkt)
	}
	s.heldN.Store(int32(len(s.held)))
	s.imu.Lock()
	h := s.holdsLocked()
	h.seq++
	s.held[len(s.held)-1].order = h.seq
	h.plainFirst = s.held[0].order
	// A PUBACK read since takeID found the window full, while nothing was
	// held yet (heldN 0), freed a slot and woke no one (acked): the writer
	// wakes itself for it, or the delivery, and the group deliveries held
	// behind it (plainFirst), wait for whatever is queued next. Checked
	// under imu after heldN is stored: acked deletes under imu before it
	// reads heldN, so one of the two sees the other.
	room := len(s.inflight) < int(s.window)
	s.imu.Unlock()
	if room {
		s.cn.sess.Send(session.Item{})
	}
}

// heldLive returns how many of the held deliveries are live ones, which
// hold may drop.
func (s *mqttSession) heldLive() int {
	if s.trk == nil {
		return len(s.held)
	}
	return len(s.held) - s.trk.heldReplayed
}

// heldLiveBytes returns the bytes of the live held deliveries.
func (s *mqttSession) heldLiveBytes() int {
	if s.trk == nil {
		return s.heldBytes
	}
	return s.heldBytes - s.trk.heldReplayedBytes
}

// dropHeldAt drops the held delivery at i, a live one, counted.
func (s *mqttSession) dropHeldAt(i int) {
	s.heldBytes -= len(s.held[i].b)
	if i == 0 {
		s.held[0] = heldPacket{}
		s.held = s.held[1:]
	} else {
		s.held = slices.Delete(s.held, i, i+1)
	}
	s.countHeldDrop()
}

// countHeldDrop counts a live delivery dropped for the window, as the
// queue's drops are.
func (s *mqttSession) countHeldDrop() {
	s.rt.bm.drops[session.DropOld].Inc()
	s.rt.mq.m.skipped.WithLabelValues("window_full").Inc()
}

// releaseHeld appends to out the held deliveries the window has room for.
func (s *mqttSession) releaseHeld(out []byte) []byte {
	n := 0
	for n < len(s.held) {
		h := s.held[n]
		id, ok := s.takeID(h.pos)
		if !ok {
			break
		}
		at := len(out)
		var to int
		out, to = s.appendPacket(out, h.b, h.idAt)
		mqtt.PatchPublish(out[at:], to, h.b[0]&dupFlag != 0, id)
		s.heldBytes -= len(h.b)
		if h.replayed {
			s.trk.heldReplayed--
			s.trk.heldReplayedBytes -= len(h.b)
			s.wroteReplayed(len(h.b))
		}
		s.held[n] = heldPacket{}
		n++
	}
	if n > 0 {
		s.held = s.held[n:]
		if len(s.held) == 0 {
			s.held = nil
		}
		s.heldN.Store(int32(len(s.held)))
		s.plainReleased()
	}
	return out
}

// plainReleased notes that the writer let held deliveries go: a held group
// delivery older than the plain ones still held (or any, when none is)
// takes the room the window may have left.
func (s *mqttSession) plainReleased() {
	s.imu.Lock()
	var first uint64
	if len(s.held) > 0 {
		first = s.held[0].order
	}
	s.holdsLocked().plainFirst = first
	hg, id, release := s.nextHeldLocked()
	s.imu.Unlock()
	if release {
		s.releaseGroup(hg, id)
	}
}

// flush writes b to the connection within the write timeout.
func (s *mqttSession) flush(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	_ = s.nc.SetWriteDeadline(time.Now().Add(s.rt.mq.writeTimeout))
	if s.up == nil {
		_, err := s.nc.Write(b)
		return err
	}
	// One WebSocket frame in one write, b not copied
	// (session.Upgraded.WriteBinary). The deadline is the socket's (session.Upgraded.NetConn): it is
	// cleared after the batch, for the library's own writes (a pong).
	err := s.up.WriteBinary(b)
	_ = s.nc.SetWriteDeadline(time.Time{})
	return err
}

// takeID takes a free packet identifier if the window has room, for a
// delivery at pos (tracked for a persistent session).
func (s *mqttSession) takeID(pos trackPos) (uint16, bool) {
	s.imu.Lock()
	defer s.imu.Unlock()
	if len(s.inflight) >= int(s.window) {
		s.rt.mq.m.windowWaits.Inc()
		return 0, false
	}
	for {
		s.nextID++
		if _, used := s.inflight[s.nextID]; s.nextID != 0 && !used {
			break
		}
	}
	s.addInflight(s.nextID)
	s.trackSent(s.nextID, pos)
	return s.nextID, true
}

// acked settles a PUBACK (or PUBCOMP): its packet identifier is free
// again; a held group delivery takes it, and the writer is woken (by an
// empty control item) when deliveries wait for it.
func (s *mqttSession) acked(id uint16) {
	s.imu.Lock()
	_, ok := s.inflight[id]
	delete(s.inflight, id)
	if s.trk != nil {
		delete(s.trk.sent, id)
		delete(s.trk.rel, id)
	}
	ga, group := s.groupAcks[id]
	delete(s.groupAcks, id)
	// A held group delivery takes the free slot, unless the writer holds
	// a plain one held before it (mqtt_group.go).
	hg, hid, release := s.nextHeldLocked()
	s.imu.Unlock()
	if group {
		s.ackGroup(ga)
	}
	if release {
		s.releaseGroup(hg, hid)
	}
	if ok && s.heldN.Load() > 0 {
		s.cn.sess.Send(session.Item{})
	}
}

// received answers a PUBREC of a QoS 2 delivery with PUBREL; the
// identifier stays in flight until PUBCOMP. An MQTT 5 PUBREC with a
// failure reason ends the delivery there.
func (s *mqttSession) received(pk *packets.Packet) {
	s.imu.Lock()
	_, ok := s.inflight[pk.PacketID]
	if s.trk != nil {
		delete(s.trk.sent, pk.PacketID) // the client has it (mqtt_session_track.go)
		if ok && pk.ReasonCode < 0x80 {
			s.trackReleased(pk.PacketID)
		}
	}
	s.imu.Unlock()
	if pk.ReasonCode >= 0x80 {
		s.acked(pk.PacketID)
		return
	}
	rc := rcSuccess
	if !ok && s.version == mqtt.Version5 {
		rc = rcPacketIDNotFound
	}
	s.cn.sess.Send(session.Item{Frame: s.ackPacket(packets.Pubrel, pk.PacketID, rc)})
}

// inFlight returns the QoS 1 deliveries not acknowledged yet.
func (s *mqttSession) inFlight() int {
	s.imu.Lock()
	defer s.imu.Unlock()
	return len(s.inflight)
}

// close implements session.Transport.Close: an MQTT 5 client is told why
// with a DISCONNECT (a 3.1.1 client's connection just closes).
func (s *mqttSession) close(code websocket.StatusCode, reason string) error {
	d := s.disc.Load()
	if d&discNone == 0 {
		rc := byte(d)
		if rc == 0 {
			rc = closeReason(code, reason)
			s.disc.CompareAndSwap(0, uint32(rc)) // the end (endWill) reads why
		}
		s.rt.mq.m.disconnects.WithLabelValues(reasonName(rc)).Inc()
		if s.version == mqtt.Version5 {
			pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Disconnect}, ProtocolVersion: mqtt.Version5, ReasonCode: rc}
			var b bytes.Buffer
			_ = pk.DisconnectEncode(&b)
			_ = s.nc.SetWriteDeadline(time.Now().Add(time.Second))
			_, _ = s.nc.Write(b.Bytes())
		}
	}
	return s.closeNow()
}

// closeReason is the reason code of a close the session core made.
func closeReason(code websocket.StatusCode, reason string) byte {
	switch code {
	case websocket.StatusGoingAway:
		return rcShuttingDown
	case websocket.StatusTryAgainLater: // a slow consumer
		return rcQuotaExceeded
	case websocket.StatusPolicyViolation:
		if reason == "token expired" || reason == CloseCredentialRefusedReason {
			return rcNotAuthorized
		}
		return rcQuotaExceeded
	case 4001:
		return rcAdministrative
	}
	return rcUnspecified
}

// closeNow implements session.Transport.CloseNow.
func (s *mqttSession) closeNow() error {
	var err error
	s.closeOnce.Do(func() {
		err = s.nc.Close()
	})
	return err
}

// encodeGap implements session.Options.EncodeGap: MQTT has no gap packet;
// what the queue dropped is counted by onDrop.
func (s *mqttSession) encodeGap(dst []byte, _ session.Stream, _, _ int64) []byte {
	s.rt.m.gaps.WithLabelValues("queue_full").Inc()
	return dst
}

// mqttFrames are one record's PUBLISH packets for MQTT sessions, made on
// first use during its fan-out: per protocol level (3.1.1, 5) and QoS,
// and with RETAIN for subscriptions with retain as published.
type mqttFrames struct {
	topic  string          // the MQTT name; "" before the first use
	noName bool            // the native topic has no MQTT name
	frames [2][2][3][]byte // by RETAIN (retain as published), level, QoS
	props  mqttRecProps    // the record's MQTT 5 properties (mqtt_props.go)
}

// sharedFrame returns the packet for a subscription of an MQTT session,
// shared by every session, nil when the record has no MQTT form (counted).
func (f *mqttFrames) sharedFrame(rec *engine.Record, s *subscription) []byte {
	if f.noName {
		return nil
	}
	if f.topic == "" {
		t, err := mqtt.TopicFromNative(rec.Topic)
		if err != nil {
			f.noName = true
			s.c.rt.mq.m.skipped.WithLabelValues("no_mqtt_name").Inc()
			return nil
		}
		f.topic = t
	}
	opts := s.mqttQoS.Load()
	v, q, r := 0, int(opts&mqttQoSMask), 0
	if opts&(mqttNoLocal|mqttRetainPub) != 0 { // MQTT 5 options (mqtt_retain.go)
		if opts&mqttNoLocal != 0 && fromSelf(rec, s) {
			s.c.rt.mq.m.skipped.WithLabelValues("no_local").Inc()
			return nil
		}
		if _, ok := rec.Headers[mqttRetainHeader]; ok && opts&mqttRetainPub != 0 {
			r = 1
		}
	}
	if s.c.mqtt.version == mqtt.Version5 {
		v = 1
	}
	if b := f.frames[r][v][q]; b != nil {
		return b
	}
	pk := packets.Packet{TopicName: f.topic, Payload: rec.Data, FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: byte(q)}}
	if v == 1 {
		pk.Properties = *f.props.of(rec)
	}
	b, err := mqtt.EncodePublishFrame(pk, s.c.mqtt.version)
	if err != nil {
		s.c.rt.mq.m.skipped.WithLabelValues("too_large").Inc()
		f.noName = true
		return nil
	}
	b[0] |= byte(r) // RETAIN, for retain as published
	f.frames[r][v][q] = b
	return b
}
