package router

// The positions of an MQTT persistent session (mqtt_session.go): where
// each QoS 1 or 2 subscription goes on in the log, and which deliveries
// are in flight, kept while the session runs and turned into the stored
// record (sessionRecord); and the resume that makes the subscriptions
// again from a stored record (restoreSession).
//
// Tracking costs only persistent sessions: their queue writes a line
// before each record's frame (session.Options.FramePrefix; NUL, 'r' for a
// replayed delivery (mqtt_session_replay.go), then the subscription,
// partition, offset and topic), which the transport's write
// reads (mqtt_write.go) into the position of the packet after it. When a
// QoS 1 or 2 delivery of a plain subscription takes its packet identifier,
// the position is remembered with the identifier (until its PUBACK or
// PUBREC) and the stream's next offset moves past it. A session's resume
// point in a partition is then the lowest of its next offset and its
// deliveries in flight: what was queued and not written, or held for the
// window, or written and not acknowledged, is read from the log again.
// A partition with no position (none of its records was written) resumes
// at the first record appended since the subscription began (Since).
//
// A resume replays through the session core's catch-up (subscription.
// catchUp) with positions for every matched partition; its frames are
// MQTT packets (replayFrame, through subscription.encode), DUP set on the
// records that were in flight, and a partition trimmed past its position
// is counted in switchyard_mqtt_session_gaps_total (sessionGap, through
// subscription.replayGap), since MQTT has no gap packet. A filter
// restored at QoS 0 goes live, but the deliveries its record lists in
// flight (subscribed again at QoS 0 while they were not acknowledged) are
// sent again at QoS 1 with DUP, paced as a replay (resendInFlight).
//
// Concurrency: mqttTrack is guarded by mqttSession.imu (a leaf, taken by
// the writer per QoS 1 or 2 packet, the reader per acknowledgement and
// per save), except cur, the writer's; mqttSession.dup is written
// by restoreSession before any catch-up goroutine starts and only read
// after.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/mqtt"
	"github.com/switchyard/switchyard/session"
	"github.com/switchyard/switchyard/trie"
)

// mqttTrack are a persistent session's positions; under mqttSession.imu.
type mqttTrack struct {
	next map[trackKey]int64  // the next offset of each stream written to
	sent map[uint16]trackPos // plain QoS 1 and 2 deliveries in flight
	// rel are the QoS 2 deliveries received (PUBREC) and not completed
	// (PUBCOMP), by packet identifier: a resume releases them again.
	rel map[uint16]struct{}
	// cur is the position of the next packet the writer writes, from
	// the line framePrefix put before it, and curReplayed whether it is
	// a replayed delivery; the writer's, not under imu (mqtt_write.go).
	cur         trackPos
	curReplayed bool
	// replay paces the catch-up's deliveries (mqtt_session_replay.go);
	// under its own lock. heldReplayed and heldReplayedBytes count the
	// replayed deliveries held for the window, and written those the
	// writer wrote in its current batch, to give back to replay; all the
	// writer's.
	replay            replayBudget
	heldReplayed      int
	heldReplayedBytes int
	written           replayTally
	// made is the creation time of the topics of next and sent, those
	// known; dels counts the topic deletions seen (mqtt_session_made.go).
	made map[string]time.Time
	dels uint64
	// resend are the deliveries in flight of a restored QoS 0 filter
	// queued to be sent again (resendInFlight) and not written yet: a save
	// meanwhile lists them in flight still; trackSent lets them go.
	resend map[trackPos]struct{}
}

// forgetPositions drops the next offsets tracked for subscription sub
// (its deliveries in flight stay): a resume goes on from its since.
func (s *mqttSession) forgetPositions(sub uint64) {
	if s.trk == nil {
		return // a clean session tracks nothing
	}
	s.imu.Lock()
	defer s.imu.Unlock()
	for k := range s.trk.next {
		if k.sub == sub {
			delete(s.trk.next, k)
		}
	}
}

// trackKey is a stream: a subscription's partition.
type trackKey struct {
	sub   uint64
	topic string
	part  int
}

// trackPos is the position of a record delivered to a subscription.
type trackPos struct {
	key trackKey
	off int64
	ok  bool
}

// dupKey names a record in flight when the session was saved.
type dupKey struct {
	topic string
	part  int
	off   int64
}

// framePrefix implements session.Options.FramePrefix for persistent
// sessions: the line before a record's frame (NUL alone for other
// frames, so that no position outlives its packet), with 'r' after the
// NUL for a replayed delivery (replayItem).
func (s *mqttSession) framePrefix(dst []byte, it *session.Item) []byte {
	dst = append(dst, 0)
	if _, ok := it.Ref.(*engine.Record); !ok || it.Stream.Sub == 0 {
		return dst
	}
	if it.Policy == session.Reliable {
		dst = append(dst, replayMark)
	}
	dst = strconv.AppendUint(dst, it.Stream.Sub, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(it.Stream.Partition), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, it.Offset, 10)
	dst = append(dst, ' ')
	return append(dst, it.Stream.Topic...)
}

// replayMark follows the NUL of a replayed delivery's prefix line.
const replayMark = 'r'

// parsePrefix reads a line framePrefix wrote (without its NUL): the
// position, and whether the delivery is a replayed one.
func parsePrefix(line []byte) (pos trackPos, replayed bool) {
	if len(line) > 0 && line[0] == replayMark {
		line, replayed = line[1:], true
	}
	f := bytes.SplitN(line, []byte{' '}, 4)
	if len(f) != 4 {
		return trackPos{}, replayed
	}
	sub, err1 := strconv.ParseUint(string(f[0]), 10, 64)
	part, err2 := strconv.Atoi(string(f[1]))
	off, err3 := strconv.ParseInt(string(f[2]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return trackPos{}, replayed
	}
	return trackPos{key: trackKey{sub: sub, topic: string(f[3]), part: part}, off: off, ok: true}, replayed
}

// trackSent records a delivery that took packet identifier id; the
// caller holds s.imu.
func (s *mqttSession) trackSent(id uint16, pos trackPos) {
	if s.trk == nil || !pos.ok {
		return
	}
	s.trk.sent[id] = pos
	delete(s.trk.resend, pos)
	if n, ok := s.trk.next[pos.key]; !ok || pos.off+1 > n {
		s.trk.next[pos.key] = pos.off + 1
	}
}

// trackReleased records a QoS 2 delivery the client received (PUBREC),
// until its PUBCOMP; the caller holds s.imu.
func (s *mqttSession) trackReleased(id uint16) {
	if s.trk.rel == nil {
		s.trk.rel = map[uint16]struct{}{}
	}
	s.trk.rel[id] = struct{}{}
}

// releasedIDs returns the QoS 2 deliveries received and not completed, in
// order.
func (s *mqttSession) releasedIDs() []uint16 {
	s.imu.Lock()
	defer s.imu.Unlock()
	if s.trk == nil || len(s.trk.rel) == 0 {
		return nil
	}
	ids := make([]uint16, 0, len(s.trk.rel))
	for id := range s.trk.rel {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// releaseAgain sends PUBREL again for the QoS 2 deliveries a stored
// session had received and not completed, keeping their packet
// identifiers in flight until their PUBCOMP [MQTT-4.4.0-1]: no other
// delivery takes them meanwhile (reader goroutine, before the writer
// starts).
func (s *mqttSession) releaseAgain(ids []uint16) {
	for _, id := range ids {
		if id == 0 {
			continue
		}
		s.imu.Lock()
		s.addInflight(id)
		if s.trk != nil {
			s.trackReleased(id)
		}
		s.imu.Unlock()
		s.cn.sess.Send(session.Item{Frame: s.ackPacket(packets.Pubrel, id, rcSuccess)})
	}
}

// sessionGap counts records of a resumed session that retention trimmed
// before they were delivered.
func (s *mqttSession) sessionGap(from, to int64) {
	if to > from {
		s.rt.mq.sm.gaps.Add(float64(to - from))
	}
}

// replayFrame is a record's PUBLISH for a replaying subscription of an
// MQTT session (subscription.encode), with DUP when it was in flight when
// the session was saved; an empty frame when MQTT cannot carry it.
func (s *mqttSession) replayFrame(rec *engine.Record, sub *subscription) []byte {
	var f mqttFrames
	b := f.frame(rec, sub)
	if b == nil {
		return []byte{}
	}
	if _, ok := s.dup[dupKey{rec.Topic, rec.Partition, rec.Offset}]; ok && b[0]&0x06 != 0 {
		b[0] |= 1 << 3 // the frame is this call's own
	}
	return b
}

// sessionPositions returns the positions of the plain subscriptions, by
// subscription: the resume point of each stream and the deliveries in
// flight. Tracking of subscriptions the session no longer holds is let go.
func (s *mqttSession) sessionPositions() (next, inFlight map[uint64][]engine.Position) {
	held := map[uint64]bool{}
	for _, e := range s.subs.all() {
		mp := e.p
		if mp == nil {
			continue
		}
		held[mp.sub.id] = true
	}
	resume := map[trackKey]int64{}
	inFlight = map[uint64][]engine.Position{}
	s.imu.Lock()
	for k, n := range s.trk.next {
		if !held[k.sub] {
			delete(s.trk.next, k)
			continue
		}
		resume[k] = n
	}
	for _, p := range s.trk.sent {
		if !held[p.key.sub] {
			continue
		}
		if n, ok := resume[p.key]; !ok || p.off < n {
			resume[p.key] = p.off
		}
		inFlight[p.key.sub] = append(inFlight[p.key.sub], engine.Position{Topic: p.key.topic, Partition: p.key.part, Offset: p.off})
	}
	for p := range s.trk.resend {
		if !held[p.key.sub] {
			continue
		}
		if n, ok := resume[p.key]; !ok || p.off < n {
			resume[p.key] = p.off // a filter at QoS 1 or 2 again replays it
		}
		inFlight[p.key.sub] = append(inFlight[p.key.sub], engine.Position{Topic: p.key.topic, Partition: p.key.part, Offset: p.off})
	}
	s.imu.Unlock()
	next = map[uint64][]engine.Position{}
	for k, n := range resume {
		next[k.sub] = append(next[k.sub], engine.Position{Topic: k.topic, Partition: k.part, Offset: n})
	}
	return next, inFlight
}

// sessionRecord is the session as stored: its filters, then as many
// positions as MaxSessionBytes leaves room for (a partition left out
// resumes from the subscription's start: duplicates, not loss).
func (s *mqttSession) sessionRecord(expires time.Time) engine.MQTTSession {
	rec := engine.MQTTSession{ClientID: s.clientID, Owner: s.owner, Node: s.rt.sessionNode(), ExpiresAt: expires,
		Expiry: s.expiryDuration(), Epoch: s.rt.eng.Epoch()}
	next, inFlight := s.sessionPositions()
	made := s.topicsMade() // mqtt_session_made.go
	for f, e := range s.subs.all() {
		mf := e.f
		if mf == nil {
			continue
		}
		sb := engine.MQTTSubscription{Filter: f, QoS: mf.qos, NoLocal: mf.noLocal, RetainAsPublished: mf.rap, SubID: mf.subID,
			Presence: mf.presence || mf.presenceRetry}
		for _, p := range mf.patterns {
			if mp := s.pattern(p); mp != nil && mp.sub.group == "" && (sb.Since.IsZero() || mp.since.Before(sb.Since)) {
				sb.Since = mp.since
			}
		}
		rec.Subs = append(rec.Subs, sb)
	}
	if rec.Released = s.releasedIDs(); rec.Size() > s.rt.mq.opts.MaxSessionBytes {
		rec.Released = nil // the filters take the room (sessionFits): no PUBREL again
	}
	room := s.rt.mq.opts.MaxSessionBytes - rec.Size()
	add := func(dst []engine.MQTTPosition, pattern string, ps []engine.Position) []engine.MQTTPosition {
		for _, p := range ps {
			mp := engine.MQTTPosition{Pattern: pattern, Position: p, Created: made[p.Topic]}
			cost := int64(mp.Size())
			if cost > room {
				return dst
			}
			room -= cost
			dst = append(dst, mp)
		}
		return dst
	}
	for i := range rec.Subs {
		sb := &rec.Subs[i]
		for _, p := range s.filter(sb.Filter).patterns {
			if mp := s.pattern(p); mp != nil && mp.sub.group == "" {
				sb.Next = add(sb.Next, p, next[mp.sub.id])
				sb.InFlight = add(sb.InFlight, p, inFlight[mp.sub.id])
			}
		}
	}
	return rec
}

// restoreSession makes the stored subscriptions again, after the CONNACK
// and before the first packet is read (reader goroutine).
func (s *mqttSession) restoreSession() {
	rec := s.resume
	if rec == nil {
		return
	}
	// Kept until the filters are made: the presence joins read its Owner
	// (mqtt_presence.go).
	defer func() { s.resume = nil }()
	s.releaseAgain(rec.Released) // packet identifiers, whatever the log's epoch
	epochOK := rec.Epoch == s.rt.eng.Epoch()
	var ended time.Time // when its last connection ended, if known
	if !rec.ExpiresAt.IsZero() && rec.Expiry > 0 {
		ended = rec.ExpiresAt.Add(-rec.Expiry)
	}
	s.dup = map[dupKey]struct{}{}
	since := map[string]time.Time{}
	next := map[string]map[partKey]storedPos{}
	inFlight := map[string][]engine.MQTTPosition{} // by pattern
	var started, joined []*subscription
	for i := range rec.Subs {
		sb := &rec.Subs[i]
		f := packets.Subscription{Filter: sb.Filter, Qos: sb.QoS, NoLocal: sb.NoLocal, RetainAsPublished: sb.RetainAsPublished}
		subID := 0
		if s.version == mqtt.Version5 && sb.SubID > 0 && sb.SubID <= mqttMaxSubID {
			subID = sb.SubID // a 3.1.1 connection resuming an MQTT 5 session gets none
		}
		s.askPresence = s.restoredPresence(sb) // mqtt_presence.go
		rc := s.subscribeOne(&f, subID, &started, &joined)
		s.askPresence = presenceNone
		if rc > 2 {
			s.rt.mq.m.refused.WithLabelValues(reasonName(rc)).Inc()
			s.rt.log.Info("mqtt stored subscription not restored", "client_id", s.clientID, "filter", sb.Filter, "reason", reasonName(rc))
			continue
		}
		for _, p := range s.filter(sb.Filter).patterns {
			if t, ok := since[p]; !ok || sb.Since.Before(t) {
				since[p] = sb.Since
			}
		}
		if !epochOK {
			continue // the positions are of another log
		}
		for _, p := range sb.Next {
			m := next[p.Pattern]
			if m == nil {
				m = map[partKey]storedPos{}
				next[p.Pattern] = m
			}
			k := partKey{p.Topic, p.Partition}
			if n, ok := m[k]; !ok || p.Offset < n.off {
				m[k] = storedPos{off: p.Offset, made: p.Created}
			}
		}
		for _, p := range sb.InFlight {
			s.dup[dupKey{p.Topic, p.Partition, p.Offset}] = struct{}{}
			inFlight[p.Pattern] = append(inFlight[p.Pattern], p)
		}
	}
	for _, sub := range started {
		if !s.cn.holds(sub) {
			continue
		}
		if mp := s.pattern(sub.pattern); mp != nil && !since[sub.pattern].IsZero() {
			mp.since = since[sub.pattern]
		}
		if sub.mqttQoS.Load()&mqttQoSMask == 0 {
			s.startLive(sub) // QoS 0: what was published meanwhile is not kept
			s.resendInFlight(sub, inFlight[sub.pattern])
			continue
		}
		s.startResumed(sub, since[sub.pattern], ended, next[sub.pattern])
	}
	for _, sub := range joined {
		sub.release()
	}
}

// startLive puts a restored subscription in the trie.
func (s *mqttSession) startLive(sub *subscription) {
	sub.isLive.Store(true)
	if err := s.rt.subs.Add(sub.pattern, sub); err != nil {
		s.rt.log.Warn("mqtt subscription not added", "pattern", sub.pattern, "err", err)
		s.cn.forget(sub)
		return
	}
	s.rt.m.subscriptions.WithLabelValues("plain").Inc()
}

// resendInFlight sends again the deliveries a stored session had in flight
// (ps, from its record) for a subscription restored at QoS 0: its filter
// was subscribed again at QoS 0 while a QoS 1 or 2 delivery of it was not
// acknowledged, and a resume sends that delivery again [MQTT-4.4.0-1].
// Each is read from the log at its position and queued as a replayed
// delivery (sendReplayed) at QoS 1 with DUP, which the writer gives a new
// packet identifier and tracks until its PUBACK; the subscription is live
// meanwhile (startLive). Until the writer takes it, a save lists it in
// flight still (mqttTrack.resend). A record retention trimmed meanwhile is
// counted as a gap (sessionGap); one whose topic was deleted since, or that
// has no MQTT form now (expired), is not sent.
func (s *mqttSession) resendInFlight(sub *subscription, ps []engine.MQTTPosition) {
	if len(ps) == 0 || !s.cn.holds(sub) {
		return
	}
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b engine.MQTTPosition) int {
		return cmp.Or(strings.Compare(a.Topic, b.Topic), cmp.Compare(a.Partition, b.Partition), cmp.Compare(a.Offset, b.Offset))
	})
	ps = slices.CompactFunc(ps, func(a, b engine.MQTTPosition) bool { return a.Position == b.Position })
	s.imu.Lock()
	if s.trk.resend == nil {
		s.trk.resend = map[trackPos]struct{}{}
	}
	for _, p := range ps {
		s.trk.resend[resendPos(sub, p)] = struct{}{}
	}
	s.imu.Unlock()
	cn := s.cn
	cn.wg.Add(1)
	go func() {
		defer cn.wg.Done()
		for _, p := range ps {
			if err := s.resendOne(cn.ctx, sub, p); err != nil {
				return // the session or the subscription ended
			}
		}
	}()
}

// resendPos is the tracked position of a delivery resendInFlight sends.
func resendPos(sub *subscription, p engine.MQTTPosition) trackPos {
	return trackPos{key: trackKey{sub: sub.id, topic: p.Topic, part: p.Partition}, off: p.Offset, ok: true}
}

// resendOne reads and queues one delivery of resendInFlight. It returns an
// error only when the session or the subscription ended; a read that fails
// leaves the delivery in flight for a later resume.
func (s *mqttSession) resendOne(ctx context.Context, sub *subscription, p engine.MQTTPosition) error {
	rt := s.rt
	pos := resendPos(sub, p)
	drop := func() {
		s.imu.Lock()
		delete(s.trk.resend, pos)
		s.imu.Unlock()
	}
	rctx, cancel := context.WithTimeout(ctx, sessionTimeout)
	defer cancel()
	dels := s.topicDels()
	ti, err := rt.eng.Topic(rctx, p.Topic)
	if errors.Is(err, engine.ErrUnknownTopic) {
		drop()
		return nil
	}
	if err == nil {
		s.noteMade(p.Topic, ti.Created, dels)
		if !p.Created.IsZero() && !p.Created.Equal(ti.Created) {
			drop() // of the topic deleted since
			return nil
		}
	}
	var recs []*engine.Record
	var n int64
	if err == nil {
		recs, n, err = rt.eng.Read(rctx, p.Topic, p.Partition, p.Offset, 1)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		rt.log.Warn("mqtt delivery in flight not sent again", "client_id", s.clientID, "topic", p.Topic, "err", err)
		return nil
	}
	if len(recs) == 0 || recs[0].Offset != p.Offset {
		if len(recs) > 0 && recs[0].Offset > p.Offset || len(recs) == 0 && n > p.Offset {
			sub.replayGap(p.Topic, p.Partition, p.Offset, p.Offset+1) // trimmed
		}
		drop()
		return nil
	}
	frame := s.inFlightFrame(recs[0], sub)
	if frame == nil {
		drop()
		return nil
	}
	if err := s.sendReplayed(ctx, sub.item(recs[0], frame), sub.hasEnded); err != nil {
		return err
	}
	rt.m.deliveriesPlain.Inc()
	return nil
}

// inFlightFrame is rec's PUBLISH at QoS 1 with DUP for sub, whatever its
// QoS now (resendInFlight); nil, counted, when MQTT cannot carry it.
func (s *mqttSession) inFlightFrame(rec *engine.Record, sub *subscription) []byte {
	var rp mqttRecProps
	props := rp.of(rec)
	if props == nil {
		s.rt.mq.m.skipped.WithLabelValues("expired").Inc()
		return nil
	}
	topic, err := mqtt.TopicFromNative(rec.Topic)
	if err != nil {
		s.rt.mq.m.skipped.WithLabelValues("no_mqtt_name").Inc()
		return nil
	}
	pk := packets.Packet{TopicName: topic, Payload: rec.Data, FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}}
	if s.version == mqtt.Version5 {
		pk.Properties = *props
	}
	b, err := mqtt.EncodePublishFrame(pk, s.version)
	if err != nil {
		s.rt.mq.m.skipped.WithLabelValues("too_large").Inc()
		return nil
	}
	b[0] |= 1 << 3 // DUP
	if _, ok := rec.Headers[mqttRetainHeader]; ok && sub.mqttQoS.Load()&mqttRetainPub != 0 {
		b[0] |= 1 // RETAIN, for retain as published
	}
	return withSubIDs(b, sub)
}

// storedPos is a stored position: the next offset to deliver, and the
// creation time of its topic (zero: not stored).
type storedPos struct {
	off  int64
	made time.Time
}

// startResumed starts a restored QoS 1 or 2 subscription with a replay
// from its positions (next: by partition), partitions without one from
// since (ended: see resumeFrom), then live.
func (s *mqttSession) startResumed(sub *subscription, since, ended time.Time, next map[partKey]storedPos) {
	rt, cn := s.rt, s.cn
	from, away, err := s.resumeFrom(sub.pattern, since, ended, next)
	if err != nil {
		rt.log.Warn("mqtt session positions not read: the subscription goes on live", "pattern", sub.pattern, "err", err)
		s.startLive(sub)
		return
	}
	sub.catchingUp = true
	if err := rt.subs.Add(sub.pattern, sub); err != nil {
		rt.log.Warn("mqtt subscription not added", "pattern", sub.pattern, "err", err)
		cn.forget(sub)
		return
	}
	plan, _, err := rt.replayPlan(cn.ctx, sub, from)
	if err != nil {
		rt.log.Warn("mqtt session replay not planned", "pattern", sub.pattern, "err", err)
		cn.forget(sub)
		rt.dropSub(sub)
		return
	}
	for i := range plan {
		if p := &plan[i]; away[partKey{p.topic, p.partition}] {
			p.gapFrom = 0 // what came while away and was trimmed (resumeFrom)
		}
	}
	rt.m.subscriptions.WithLabelValues("plain").Inc()
	// Where the replay starts is the resume point until a delivery moves
	// it: a session that ends before its replay wrote a partition's
	// records keeps the partition's position.
	s.imu.Lock()
	for _, p := range plan {
		s.trk.next[trackKey{sub.id, p.topic, p.partition}] = p.from
	}
	s.imu.Unlock()
	cn.wg.Add(1)
	go func() {
		defer cn.wg.Done()
		sub.catchUp(cn.ctx, plan)
	}()
}

// sessionClockSkew is how far the clocks of two nodes may differ for a
// resume to tell a topic made after a session's connection ended
// (resumeFrom): a topic made within it of the end counts as made before
// (its trimmed records no gap), and a node's clock further ahead than it
// may count as gaps records a client got (docs/mqtt.md).
const sessionClockSkew = 10 * time.Second

// resumeFrom is the replay of a restored subscription: a position for
// every partition its pattern matches, the stored one or, for a partition
// without, the first record appended at or after since.
//
// A partition resumed from since has no position to tell what retention
// trimmed, but for one of a topic made after the session's connection
// ended (ended, zero when not known: a session saved while held): every
// record of it came while the client was away, so it resumes from the
// topic's first offset, 0 (away lists those partitions): the replay
// counts those trimmed as a gap (sessionGap), as for a stored position.
// For a topic made before, the records trimmed may be older than since or
// not, and none is counted. A stored position of a topic made at another
// time than the topic of that name now (deleted and made again) is of the
// topic that was deleted: the partition resumes as one of a topic made
// away, from offset 0 with its trimmed records a gap, since the new topic
// was made after the position was stored (mqtt_session_made.go). Made after means made more than
// sessionClockSkew after ended: the topic's creation time is the clock of
// the node that made it, ended this node's or another's.
func (s *mqttSession) resumeFrom(pattern string, since, ended time.Time, next map[partKey]storedPos) (from fromSpec, away map[partKey]bool, err error) {
	rt := s.rt
	ctx, cancel := context.WithTimeout(s.cn.ctx, sessionTimeout)
	defer cancel()
	dels := s.topicDels()
	topics, err := rt.matchingTopics(ctx, pattern)
	if err != nil {
		return fromSpec{}, nil, err
	}
	from = fromSpec{positions: true, epoch: rt.eng.Epoch()}
	for _, t := range topics {
		if !trie.Matches(pattern, t.Config.Name) {
			continue
		}
		s.noteMade(t.Config.Name, t.Created, dels)
		madeAway := !ended.IsZero() && t.Created.After(ended.Add(sessionClockSkew))
		for _, p := range t.Parts {
			sp, ok := next[partKey{t.Config.Name, p.Partition}]
			n := sp.off
			// A position of a topic deleted since: the topic now was made
			// after it was stored.
			stale := ok && !sp.made.IsZero() && !sp.made.Equal(t.Created)
			if stale || (!ok && madeAway) {
				// From its earliest record, what retention trimmed
				// before it a gap (startResumed).
				if away == nil {
					away = map[partKey]bool{}
				}
				away[partKey{t.Config.Name, p.Partition}] = true
				continue
			}
			if !ok {
				if n, err = rt.eng.Resolve(ctx, t.Config.Name, p.Partition, engine.Start{Kind: engine.StartTime, Time: since}); err != nil {
					return fromSpec{}, nil, err
				}
			}
			if n <= 0 {
				// From the partition's start: a partition without a
				// position starts at its earliest record (replayPlan).
				continue
			}
			// A position names the last record seen: the one before next.
			from.pos = append(from.pos, engine.Position{Topic: t.Config.Name, Partition: p.Partition, Offset: n - 1})
		}
	}
	return from, away, nil
}
