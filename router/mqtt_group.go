package router

// Shared subscriptions (docs/mqtt.md): "$share/<name>/<filter>" joins the
// consumer group the share name maps to (mqtt.ParseFilter), the group
// native WebSocket and HTTP pull members use, as a member of its own.
// The group delivers to it through the session core like to any member
// (subscription.Deliver, held to the group's window); each delivery is
// encoded per delivery (mqttSession.groupFrame) with a packet identifier
// taken when it is delivered and remembered with the record's position:
// the client's PUBACK (PUBCOMP for QoS 2) acks the record in the group; a
// delivery that finds the session's window full is held until a PUBACK
// or PUBCOMP makes room (groupHold); a redelivery carries DUP; a session that ends hands what it has not
// acknowledged back to the group (dropSub leaves), and max attempts and
// dead letters apply as for any member. A QoS 0 shared subscription has no
// acknowledgement: its deliveries are acked once queued, by the session's
// acker goroutine, so at most once.
//
// A shared filter maps to one pattern: a filter ending in "/#" uses its
// descendant pattern only (a group has one pattern), so "$share/g/a/#"
// does not match "a" itself.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/mqtt"
	"github.com/switchyard/switchyard/session"
)

// groupAck is a shared-subscription delivery awaiting the client's
// acknowledgement, or one the acker settles: acked, or nacked when nack
// is set (its reason). The acker settles it as sub.memberID(), the
// member it was delivered to, not as sub.member: a delivery the engine's
// Join makes comes before the join sets that (on the reader goroutine,
// which reads it for a PUBACK or PUBCOMP: ackGroup).
type groupAck struct {
	sub  *subscription
	pos  engine.Position
	nack string
}

// nackTooLarge is the error a group delivery over the client's Maximum
// Packet Size is nacked with, which its dead letter keeps.
const nackTooLarge = "the record's PUBLISH is larger than the MQTT client's Maximum Packet Size"

// subscribeShared registers and joins a shared filter; it returns the
// SUBACK reason code and the subscription to release once the SUBACK is
// queued.
func (s *mqttSession) subscribeShared(f *packets.Subscription, pf mqtt.Filter, qos byte, subID int) (byte, *subscription) {
	cn := s.cn
	p := pf.Patterns[len(pf.Patterns)-1]
	if pe := validPattern(&s.rt.opts.Bounds, p); pe != nil {
		return rcBadFilter, nil
	}
	if pe := validGroup(pf.Group); pe != nil {
		return rcBadFilter, nil
	}
	viaHook, pe := cn.authorizeSubscribe(p, pf.Group)
	if pe != nil {
		return hookReason(pe), nil
	}
	if old := s.filter(f.Filter); old != nil {
		s.dropFilter(f.Filter)
		s.release(old)
	}
	sub, pe := cn.register(&subscribeSpec{pattern: p, group: pf.Group, policy: session.DropOld,
		maxInFlight: min(int(s.window), engine.MaxGroupInFlight), hookAllowed: viaHook})
	if pe != nil {
		if pe.Code == codeTooManySubs {
			return rcQuotaExceeded, nil
		}
		return rcUnspecified, nil
	}
	sub.mqttQoS.Store(uint32(qos))
	if subID > 0 {
		sub.mqttSubIDs.Store(subIDProps([]int{subID}))
	}
	// Every shared subscription may need the acker: QoS 0 deliveries, and
	// records MQTT cannot name at any QoS. Started before the join, so
	// that no delivery reads s.acks while it is set.
	s.startAcker()
	pe = cn.joinGroup(sub, fromSpec{}, false)
	if pe != nil && pe.Code == codeGroupConflict && sub.maxInFlight != 0 {
		// The group exists with another max_in_flight (a native member
		// made it): a shared subscription takes the group's.
		sub.maxInFlight = 0
		pe = cn.joinGroup(sub, fromSpec{}, false)
	}
	if pe != nil {
		cn.forget(sub)
		if pe.Code == codeTooManySubs {
			return rcQuotaExceeded, nil
		}
		return rcUnspecified, nil
	}
	s.rt.m.subscriptions.WithLabelValues("group").Inc()
	key := pf.Group + "\x00" + p
	mf := &mqttFilter{qos: qos, patterns: []string{key}, subID: subID}
	mp := &mqttPattern{sub: sub}
	s.addPattern(key, mp)
	mp.add(mf, 1)
	s.addFilter(strings.Clone(f.Filter), mf) // f.Filter is a view into the packet
	return qos, sub
}

// groupFrame encodes a group delivery to an MQTT member: its PUBLISH with
// a packet identifier of its own (QoS 1 and 2) remembered with the
// record's position, DUP on a redelivery. A record MQTT cannot name is
// acked at once and delivered as nothing. A QoS 1 or 2 delivery that
// finds the window full, or group deliveries held before it, is held
// (holdGroup) and delivered as nothing now: a PUBACK or PUBCOMP writes it
// later (releaseGroup).
func (s *mqttSession) groupFrame(sub *subscription, d engine.Delivery) []byte {
	qos := byte(sub.mqttQoS.Load())
	b, ok := s.groupPacket(sub, d, qos)
	if !ok {
		return []byte{}
	}
	if qos == 0 {
		s.autoAck(groupAck{sub: sub, pos: deliveryPos(d)})
		return b
	}
	bound := holdBounds{n: -1} // read only when the delivery is to be held
	for {
		s.imu.Lock()
		if !s.mustHoldLocked() {
			id := s.takeGroupIDLocked(sub, deliveryPos(d))
			s.imu.Unlock()
			_, idAt, _ := mqtt.Span(b)
			mqtt.PatchPublish(b, idAt, d.Attempt > 1, id)
			return b
		}
		if bound.n >= 0 {
			s.holdGroupLocked(sub, d, qos, bound)
			s.imu.Unlock()
			if bound.n > 0 && s.holdBound(sub).n == 0 {
				// The membership ended meanwhile, maybe after its
				// dropSub dropped what it held (dropHeldOf).
				s.dropHeldOf(sub)
			}
			return []byte{}
		}
		s.imu.Unlock()
		bound = s.holdBound(sub) // under conn.mu, a leaf: not under imu
	}
}

// deliveryPos is the position of a delivery's record.
func deliveryPos(d engine.Delivery) engine.Position {
	return engine.Position{Topic: d.Record.Topic, Partition: d.Record.Partition, Offset: d.Record.Offset}
}

// groupPacket encodes a group delivery's PUBLISH at qos, without its
// packet identifier, or reports false for one not to be written: a record
// MQTT cannot name or past its message expiry (acked at once), or one
// over the client's Maximum Packet Size (nacked at once); each is
// counted.
func (s *mqttSession) groupPacket(sub *subscription, d engine.Delivery, qos byte) ([]byte, bool) {
	rec := d.Record
	topic, err := mqtt.TopicFromNative(rec.Topic)
	var b []byte
	if err == nil {
		pk := packets.Packet{TopicName: topic, Payload: rec.Data, FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos}}
		if !publishProps(&pk.Properties, rec.Headers, rec.Key, rec.Time, time.Now()) {
			s.rt.mq.m.skipped.WithLabelValues("expired").Inc() // mqtt_props.go
			s.autoAck(groupAck{sub: sub, pos: deliveryPos(d)})
			return nil, false
		}
		if b, err = mqtt.EncodePublishFrame(pk, s.version); err == nil {
			b = withSubIDs(b, sub)
		}
	}
	if err != nil {
		s.rt.mq.m.skipped.WithLabelValues("no_mqtt_name").Inc()
		s.autoAck(groupAck{sub: sub, pos: deliveryPos(d)})
		return nil, false
	}
	if s.maxOut > 0 && len(b) > int(s.maxOut) {
		// Over the client's Maximum Packet Size [MQTT-3.1.2-25]: not
		// written, so it takes no packet identifier (one never acked
		// would shrink the window for good). Nacked at once, an attempt
		// made: the group delivers it again after its backoff, to a
		// member it may fit (a rebalance may move the partition), and
		// dead-letters it after max attempts. Past the acker's backlog
		// the lease runs out with the ack timeout instead.
		s.rt.mq.m.skipped.WithLabelValues("too_large").Inc()
		s.autoAck(groupAck{sub: sub, pos: deliveryPos(d), nack: nackTooLarge})
		return nil, false
	}
	return b, true
}

// takeGroupIDLocked takes a free packet identifier for a group delivery
// at pos, remembered for its acknowledgement; the caller holds s.imu and
// has seen room in the window (which is at most maxPacketIDs).
func (s *mqttSession) takeGroupIDLocked(sub *subscription, pos engine.Position) uint16 {
	for {
		s.nextID++
		if _, used := s.inflight[s.nextID]; s.nextID != 0 && !used {
			break
		}
	}
	id := s.nextID
	s.addInflight(id)
	if s.groupAcks == nil {
		s.groupAcks = make(map[uint16]groupAck)
	}
	s.groupAcks[id] = groupAck{sub: sub, pos: pos}
	return id
}

// Held group deliveries. The window (the client's Receive Maximum, or
// --mqtt-max-in-flight) is shared by the plain QoS 1 and 2 deliveries and
// the group deliveries of a session; a group delivery that finds it full
// is held by the session, in order, and written when a PUBACK or PUBCOMP
// makes room. The writer holds the plain deliveries that find it full
// (mqtt_write.go); a slot that frees goes to the older of the first held
// group delivery and the first held plain one (groupHold.seq), so that
// neither kind starves the other, and a group delivery comes after the
// plain ones held before it. Until then the client has not seen it: its lease may run out
// (the group's ack timeout) and the group deliver it again, to this
// member or another, which is what a member that keeps its window full
// for that long gets. A held delivery the group delivers again to this
// member is replaced in its place by the newer attempt, with DUP only if
// the attempt it replaces had it (that one never reached the client); one whose lease
// ran out otherwise is still written (the engine's Delivery does not say
// when its lease ends), and its PUBACK then gets ErrNotInFlight, which
// changes nothing. When a subscription ends (an UNSUBSCRIBE, a SUBSCRIBE
// replacing it, its group deleted: dropSub) its held deliveries are
// dropped with it, its member having left the group, which has them back.
// When the session ends, its member leaves the group
// (dropSub), which takes back every record leased to it, held or
// written, and the acker drops the held list (startAcker); a graceful
// shutdown hands the member back in the same way (shutdown.go), the held
// deliveries as never written (takeHeldFor), not counted as attempts, and
// those that come meanwhile and find the window full too (takeLateFor).
//
// Bound: the engine leases at most the member's window to one shared
// subscription at once (engine.JoinRequest.MaxLeased, the
// subscription.leases its membership reserved: at most --queue-messages,
// and over the session's memberships at most
// GroupBounds.MaxSessionLeases), and another only while the member holds
// fewer bytes than its bytes bound (MaxLeasedBytes, when there is one), so
// that many held deliveries are live leases at most. Held deliveries whose
// leases ran out are not, so the held deliveries of a subscription are
// bounded by its leases, in records and bytes: past that
// the one whose lease began first (a redelivery in place begins a new
// one), the first whose lease runs out, is dropped, counted as
// window_full (the group delivers it again after its ack timeout, as
// before holding). A seek drops the held deliveries of the partitions it
// moves for this node's members of its group (their leases go with it:
// Router.seek), a redelivery that took a held one's place while it ran
// included (the window the seek itself delivers is kept), and those of every
// partition when a seek of them all fails part-way; a topic's deletion
// drops those of the topic.

// groupHold is a session's held group deliveries; under mqttSession.imu.
type groupHold struct {
	q []heldGroup
	// sending: a release took the first of q off and writes it (outside
	// imu); further deliveries are held behind it, to keep their order.
	sending bool
	// cur is the delivery being written while sending: a graceful
	// shutdown counts it with the held ones (takeHeldFor).
	cur heldGroup
	// closed: the session ended; nothing more is held.
	closed bool
	// late: deliveries of subscriptions a graceful shutdown is handing
	// back that found the window full after it read what they held
	// (takeHeldFor): not held but listed, for the engine's HandBack to
	// read (takeLateFor).
	late map[*subscription][]engine.Position
	// seq stamps the held deliveries, group (heldGroup.order, .lease) and
	// plain (heldPacket.order), in the order they came.
	seq uint64
	// plainFirst is the stamp of the first plain delivery the writer
	// holds (mqtt_write.go), 0 when it holds none: a slot a PUBACK frees
	// goes to the older of it and the first held group delivery.
	plainFirst uint64
}

// heldGroup is a group delivery waiting for room in the window.
type heldGroup struct {
	sub *subscription
	d   engine.Delivery
	qos byte
	// lease orders the held deliveries by when their leases began (a
	// redelivery's is newer).
	lease uint64
	// seeking: a seek is dropping its lease (heldSeek); it drops first
	// past the bound, and is unmarked if a seek of one partition fails.
	seeking bool
	// order is when its position in the list was taken (kept by a
	// redelivery in place).
	order uint64
	// dup: an earlier attempt may have reached the client (a redelivery
	// held as such; one replacing a held attempt keeps that one's dup).
	dup bool
}

// mustHoldLocked reports whether a QoS 1 or 2 group delivery must wait:
// the window is full, or group deliveries wait before it. The caller holds
// s.imu.
func (s *mqttSession) mustHoldLocked() bool {
	if h := s.groupHeld; h != nil && (len(h.q) > 0 || h.sending || h.plainFirst != 0) {
		return true // after those, and the plain deliveries held before it
	}
	return len(s.inflight) >= int(s.window)
}

// holdBounds bound the held deliveries of a subscription: its
// membership's window in records and bytes (group_leases.go).
type holdBounds struct {
	n     int   // 0 once it left its group
	bytes int64 // 0: no bound
}

// holdBound is how many deliveries of sub may be held, and how many bytes
// of records: its membership's window (group_leases.go).
func (s *mqttSession) holdBound(sub *subscription) holdBounds {
	if s.cn == nil {
		return holdBounds{}
	}
	s.cn.mu.Lock()
	defer s.cn.mu.Unlock()
	return holdBounds{n: sub.leases, bytes: sub.leaseBytes}
}

// leaseBytes is what a lease of rec counts against the membership's bytes
// (engine.JoinRequest.MaxLeasedBytes): its data, key and headers.
func leaseBytes(rec *engine.Record) int64 {
	n := len(rec.Data) + len(rec.Key)
	for k, v := range rec.Headers {
		n += len(k) + len(v)
	}
	return int64(n)
}

// holdGroupLocked holds a group delivery of sub until the window has room;
// the caller holds s.imu. bound is holdBound(sub).
func (s *mqttSession) holdGroupLocked(sub *subscription, d engine.Delivery, qos byte, bound holdBounds) {
	h := s.holdsLocked()
	if h.closed {
		return // the member leaves: the group has it back
	}
	pos := deliveryPos(d)
	if sub.handedBack.Load() {
		// A graceful shutdown began handing the member back (shutdown.go)
		// and may have read its held deliveries already: held now, this
		// one would be in no list and count as an attempt never made.
		// handedBack is set before takeHeldFor takes imu, and read here
		// under it: a delivery held is either seen by takeHeldFor or
		// comes here. The engine reads these (takeLateFor) under the lock
		// its deliveries are made under, after which none comes.
		if h.late == nil {
			h.late = make(map[*subscription][]engine.Position)
		}
		h.late[sub] = append(h.late[sub], pos)
		return
	}
	h.seq++
	for i := range h.q {
		if h.q[i].sub == sub && deliveryPos(h.q[i].d) == pos {
			// Delivered again: the newer attempt, a new lease; the one it
			// replaces was never written, so DUP only as for that one. A
			// seek's mark stays (group_seek.go): a redelivery made before
			// the engine's Seek has its lease dropped by that Seek too. (A
			// seek back to an earlier offset whose new window delivers a
			// position held and marked costs that record one ack timeout.)
			h.q[i] = heldGroup{sub: sub, d: d, qos: qos, lease: h.seq, seeking: h.q[i].seeking, order: h.q[i].order, dup: h.q[i].dup}
			return
		}
	}
	// The engine leases another record to the member only while it holds
	// fewer than its window (and bytes): past that, held ones are dead.
	for {
		n, nb, oldest := 0, int64(0), -1
		for i := range h.q {
			if h.q[i].sub != sub {
				continue
			}
			if oldest < 0 || h.q[i].dropsBefore(&h.q[oldest]) {
				oldest = i
			}
			n++
			nb += leaseBytes(h.q[i].d.Record)
		}
		if n < bound.n && (bound.bytes <= 0 || nb < bound.bytes) {
			break
		}
		s.rt.mq.m.skipped.WithLabelValues("window_full").Inc()
		if oldest < 0 {
			return // bound 0: the member left its group, which has it back
		}
		h.q = slices.Delete(h.q, oldest, oldest+1)
	}
	h.q = append(h.q, heldGroup{sub: sub, d: d, qos: qos, lease: h.seq, order: h.seq, dup: d.Attempt > 1})
	s.rt.mq.m.windowWaits.Inc()
}

// dropsBefore reports whether hg is dropped before o past the bound: one
// a seek is dropping (seeking), else the one whose lease began first.
func (hg *heldGroup) dropsBefore(o *heldGroup) bool {
	if hg.seeking != o.seeking {
		return hg.seeking
	}
	return hg.lease < o.lease
}

// nextHeldLocked takes the first held group delivery off the list with a
// packet identifier, when the window has room and no other release is
// under way; the caller holds s.imu, and then calls releaseGroup with
// what it returns (which clears sending).
func (s *mqttSession) nextHeldLocked() (heldGroup, uint16, bool) {
	h := s.groupHeld
	if h == nil || h.sending || h.closed || len(h.q) == 0 || len(s.inflight) >= int(s.window) {
		return heldGroup{}, 0, false
	}
	if h.plainFirst != 0 && h.plainFirst < h.q[0].order {
		return heldGroup{}, 0, false // the writer's, held before it, goes first
	}
	hg := h.q[0]
	h.q[0] = heldGroup{}
	h.q = h.q[1:]
	if len(h.q) == 0 {
		h.q = nil
	}
	h.sending = true
	h.cur = hg
	return hg, s.takeGroupIDLocked(hg.sub, deliveryPos(hg.d)), true
}

// releaseGroup writes the held group delivery hg with packet identifier
// id (nextHeldLocked), then the next ones while the window has room; on
// the reader goroutine (a PUBACK or PUBCOMP), or the engine's (a slot
// given back by unqueued). Each pass takes one held delivery off.
func (s *mqttSession) releaseGroup(hg heldGroup, id uint16) {
	for {
		s.writeHeld(hg, id)
		s.imu.Lock()
		s.groupHeld.sending = false
		s.groupHeld.cur = heldGroup{}
		var ok bool
		hg, id, ok = s.nextHeldLocked()
		s.imu.Unlock()
		if !ok {
			return
		}
	}
}

// writeHeld queues a held group delivery with packet identifier id, as
// subscription.Deliver queues one, encoded now (its MQTT 5 message expiry
// counts the time it was held); the identifier is given back when it is
// not written after all.
func (s *mqttSession) writeHeld(hg heldGroup, id uint16) {
	sub, d := hg.sub, hg.d
	b, ok := s.groupPacket(sub, d, hg.qos)
	if ok {
		_, idAt, _ := mqtt.Span(b)
		mqtt.PatchPublish(b, idAt, hg.dup, id)
		pos := deliveryPos(d)
		ok = sub.enqueueReliable(session.Item{
			Frame:    b,
			Stream:   session.Stream{Sub: sub.id, Topic: pos.Topic, Partition: pos.Partition},
			Offset:   pos.Offset,
			Priority: d.Record.Priority,
			Policy:   session.Reliable,
			Ref:      &groupRef{s: sub, pos: pos},
		})
	}
	if !ok {
		s.imu.Lock()
		delete(s.inflight, id)
		delete(s.groupAcks, id)
		s.imu.Unlock()
		if s.heldN.Load() > 0 {
			s.cn.sess.Send(session.Item{}) // the slot may be the writer's (nextHeldLocked)
		}
	}
}

// dropHeldOf drops the held deliveries of a subscription that ended
// (dropSub: an UNSUBSCRIBE, a SUBSCRIBE replacing it, its group deleted):
// its member left its group, which has them back.
func (s *mqttSession) dropHeldOf(sub *subscription) {
	s.imu.Lock()
	defer s.imu.Unlock()
	if h := s.groupHeld; h != nil {
		h.q = slices.DeleteFunc(h.q, func(hg heldGroup) bool { return hg.sub == sub })
		if len(h.q) == 0 {
			h.q = nil
		}
	}
}

// heldOp is what heldMatch does to the held deliveries it matches.
type heldOp int

const (
	heldMark   heldOp = iota // mark them seeking
	heldUnmark               // clear the mark: the seek failed
	heldDrop                 // drop those still marked
	heldPurge                // drop them all, marked or not
)

// heldSeek marks, unmarks or drops the held deliveries of topic's
// partition (every partition when partition < 0) for this node's members
// of group, around a seek that drops their leases (Router.seek): marked
// before it, so that one past the bound is dropped first, whatever the
// seek leases next (a redelivery taking a marked one's place keeps the
// mark: holdGroupLocked); dropped once it is done; unmarked if a seek of one
// partition failed, their leases live.
func (rt *Router) heldSeek(group, topic string, partition int, op heldOp) {
	for _, cn := range rt.connList() {
		if cn.mqtt == nil {
			continue
		}
		cn.mqtt.heldMatch(op, func(hg *heldGroup) bool {
			return hg.sub.group == group && hg.d.Record.Topic == topic && (partition < 0 || hg.d.Record.Partition == partition)
		})
	}
}

// heldTopicDeleted drops the held deliveries of a deleted topic: their
// leases are gone, and a topic made again under its name starts over; and
// the positions a persistent session holds of it (trackTopicDeleted).
// Each session's are dropped in one step under its imu, whatever their
// seeking mark: a seek of the topic failing meanwhile unmarks them, and
// its unmark must not come between a mark and a drop of the deletion.
func (rt *Router) heldTopicDeleted(topic string) {
	for _, cn := range rt.connList() {
		if cn.mqtt == nil {
			continue
		}
		cn.mqtt.heldMatch(heldPurge, func(hg *heldGroup) bool { return hg.d.Record.Topic == topic })
		cn.mqtt.trackTopicDeleted(topic) // mqtt_session_made.go
	}
}

// heldMatch marks the held deliveries match reports (seeking), unmarks
// them, drops those so marked, or drops them all, as op says.
func (s *mqttSession) heldMatch(op heldOp, match func(*heldGroup) bool) {
	s.imu.Lock()
	defer s.imu.Unlock()
	h := s.groupHeld
	if h == nil {
		return
	}
	if op == heldMark || op == heldUnmark {
		for i := range h.q {
			if match(&h.q[i]) {
				h.q[i].seeking = op == heldMark
			}
		}
		return
	}
	h.q = slices.DeleteFunc(h.q, func(hg heldGroup) bool { return (hg.seeking || op == heldPurge) && match(&hg) })
	if len(h.q) == 0 {
		h.q = nil
	}
}

// takeHeldFor takes the held deliveries of sub off the list for a
// graceful shutdown (shutdown.go), which hands them back as never
// written, with the one being written now: it is in the subscription's
// unsent positions only once queued, and may reach the client after all,
// which the hand-back allows (an attempt not counted, never one counted
// and not made).
func (s *mqttSession) takeHeldFor(sub *subscription) []engine.Position {
	s.imu.Lock()
	defer s.imu.Unlock()
	h := s.groupHeld
	if h == nil {
		return nil
	}
	var out []engine.Position
	if h.sending && h.cur.sub == sub {
		out = append(out, deliveryPos(h.cur.d))
	}
	h.q = slices.DeleteFunc(h.q, func(hg heldGroup) bool {
		if hg.sub != sub {
			return false
		}
		out = append(out, deliveryPos(hg.d))
		return true
	})
	if len(h.q) == 0 {
		h.q = nil
	}
	return out
}

// takeLateFor takes the deliveries of sub that came after a graceful
// shutdown began handing it back and found the window full
// (holdGroupLocked): never written. engine.MemberRef.Later, called by the
// engine's HandBack.
func (s *mqttSession) takeLateFor(sub *subscription) []engine.Position {
	s.imu.Lock()
	defer s.imu.Unlock()
	h := s.groupHeld
	if h == nil {
		return nil
	}
	out := h.late[sub]
	delete(h.late, sub)
	return out
}

// dropHeld drops the held group deliveries of a session that ended (its
// members left their groups, which have them back) and holds no more.
func (s *mqttSession) dropHeld() {
	s.imu.Lock()
	defer s.imu.Unlock()
	if s.groupHeld == nil {
		s.groupHeld = &groupHold{}
	}
	s.groupHeld.q = nil
	s.groupHeld.closed = true
}

// ackGroup acks in its group the delivery a PUBACK or PUBCOMP settled,
// if it was one; on the reader goroutine.
func (s *mqttSession) ackGroup(ga groupAck) {
	member := ga.sub.member // set by the join, on this goroutine too
	if member == "" {
		return
	}
	err := s.rt.eng.Ack(s.cn.ctx, ga.sub.group, member, ga.pos)
	if err != nil && !errors.Is(err, engine.ErrNotInFlight) && !errors.Is(err, context.Canceled) {
		s.rt.log.Debug("mqtt group ack failed", "group", ga.sub.group, "err", err)
	}
}

// autoAck hands a group delivery to the acker to settle (a QoS 0 one, one
// MQTT cannot name or past its expiry: acked; one too large: nacked); past
// its bound the record is left to the group's ack timeout. It does not
// block: it is called from the engine's Deliver.
func (s *mqttSession) autoAck(ga groupAck) {
	select {
	case s.acks <- ga:
	default:
		s.rt.mq.m.skipped.WithLabelValues("ack_backlog").Inc()
	}
}

// startAcker starts the session's acker goroutine, once: it acks (or
// nacks) what autoAck hands it until the session's context ends (teardown waits for
// it in cn.wg).
func (s *mqttSession) startAcker() {
	if s.acks != nil {
		return
	}
	s.acks = make(chan groupAck, mqttAckBacklog)
	cn := s.cn
	cn.wg.Add(1)
	go func() {
		defer cn.wg.Done()
		for {
			select {
			case ga := <-s.acks:
				ctx, cancel := context.WithTimeout(cn.ctx, 5*time.Second)
				var err error
				if ga.nack != "" {
					err = s.rt.eng.Nack(ctx, ga.sub.group, ga.sub.memberID(), ga.pos, ga.nack)
				} else {
					err = s.rt.eng.Ack(ctx, ga.sub.group, ga.sub.memberID(), ga.pos)
				}
				if err != nil && !errors.Is(err, engine.ErrNotInFlight) {
					s.rt.log.Debug("mqtt group settle failed", "group", ga.sub.group, "nack", ga.nack != "", "err", err)
				}
				cancel()
			case <-cn.ctx.Done():
				s.dropHeld()
				return
			}
		}
	}()
}

// mqttAckBacklog bounds the QoS 0 group deliveries awaiting their ack.
const mqttAckBacklog = 1024

// unqueued gives back the packet identifier of a group delivery
// groupFrame encoded and the queue did not take (its subscription ended
// meanwhile, an UNSUBSCRIBE racing the engine's delivery): never written,
// it would never be acked and would shrink the window for good. The group
// has the record back from the member's Leave.
func (s *mqttSession) unqueued(frame []byte) {
	_, idAt, ok := mqtt.Span(frame)
	if !ok || idAt == 0 {
		return // QoS 0, or nothing written
	}
	id := uint16(frame[idAt])<<8 | uint16(frame[idAt+1])
	s.imu.Lock()
	delete(s.inflight, id)
	delete(s.groupAcks, id)
	hg, hid, release := s.nextHeldLocked() // the slot is free again
	s.imu.Unlock()
	if release {
		s.releaseGroup(hg, hid)
	}
	if s.heldN.Load() > 0 {
		s.cn.sess.Send(session.Item{}) // the writer may take it
	}
}

// holdsLocked returns the session's held list, made on first use; the
// caller holds s.imu.
func (s *mqttSession) holdsLocked() *groupHold {
	if s.groupHeld == nil {
		s.groupHeld = &groupHold{}
	}
	return s.groupHeld
}
