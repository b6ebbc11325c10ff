package router

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/session"
	"github.com/switchyard/switchyard/trie"
)

// maxPending bounds the live records a replaying subscription buffers while
// it reads the log; past it the buffer is dropped and the records are read
// from the log instead, so a long replay under heavy traffic costs memory
// only up to this bound.
const maxPending = 16384

// replayBatch is how many records a catch-up reads from the log at once.
const replayBatch = 256

// subscription is one subscribe of one session: a plain subscription (in the
// trie, fed by Appended) or a group member (fed by the engine's Deliver).
type subscription struct {
	c       *conn
	id      uint64
	pattern string
	group   string
	policy  session.Policy
	filter  map[string]string
	member  string // set once, under c.mu, by the join (conn.joinGroup)
	// hookAllowed: the subscribe hook allowed it (the grants did not).
	hookAllowed bool
	// presence: the session is in the topic's presence set (presence.go).
	// Set at register for a native subscription; an MQTT session's
	// pattern gains and loses it on its reader goroutine as the filters
	// that ask presence come and go (mqtt_presence.go), while dropSub may
	// read it on another: atomic, under no lock.
	presence atomic.Bool
	// maxInFlight is a group subscribe's max_in_flight (0: the group's).
	maxInFlight int
	// mqttQoS is an MQTT subscription's QoS (mqtt_subscribe.go): the
	// highest granted to the session's filters that share its pattern.
	mqttQoS atomic.Uint32
	// mqttSubIDs are the MQTT 5 Subscription Identifier properties of its
	// filters, nil for none (mqtt_props.go).
	mqttSubIDs atomic.Pointer[[]byte]
	// leases and leaseBytes are the member window a group membership
	// reserved of its session's lease bounds; guarded by conn.mu.
	leases     int
	leaseBytes int64
	// handedBack is set once shutdown handed the member back to the
	// engine: ending the subscription then does not leave again.
	handedBack atomic.Bool
	dl         dlBucket // queue_full dead letters; guarded by conn.mu
	// local is set for in-process subscribers (see Router.Subscribe); c
	// is nil then.
	local *LocalSubscription
	// delta is set for a "delta":"fossil" subscription (delta.go).
	delta *deltaSub

	// isLive is set once a plain subscription delivers straight from the
	// live tail, so the hot path takes no lock.
	isLive atomic.Bool
	// floors: the offsets a live subscription's catch-up ended at, below
	// which live records are dropped (replay_handoff.go); nil for most.
	floors atomic.Pointer[floorSet]
	// deletions counts topics deleted during the catch-up (the deleted
	// set), so that the replay checks for them without a lock.
	deletions atomic.Uint64

	mu         sync.Mutex // guards the fields below
	catchingUp bool
	pending    []*engine.Record    // live records that arrived during catch-up
	overflow   bool                // pending hit maxPending
	deleted    map[string]struct{} // topics deleted during catch-up, until it takes them
	holding    bool                // group deliveries wait for the "subscribed" reply
	held       []session.Item
	ended      bool
	// unsent counts group deliveries queued and not yet written to the
	// socket, by position: a graceful shutdown hands them back as never
	// delivered (see shutdown.go).
	unsent map[engine.Position]int
	// drained, when not nil, is closed once unsent is empty (a seek waits
	// on it: group_seek.go).
	drained chan struct{}
}

// groupRef is the session.Item Ref of a group delivery: once the writer
// has written it, the delivery reached the wire.
type groupRef struct {
	s   *subscription
	pos engine.Position
}

// sent records that a group delivery was written.
func (r *groupRef) sent() {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if n := s.unsent[r.pos]; n > 1 {
		s.unsent[r.pos] = n - 1
	} else {
		delete(s.unsent, r.pos)
	}
	if len(s.unsent) == 0 && s.drained != nil {
		close(s.drained)
		s.drained = nil
	}
}

// unsentPositions returns the group deliveries not yet written.
func (s *subscription) unsentPositions() []engine.Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]engine.Position, 0, len(s.unsent))
	for p := range s.unsent {
		out = append(out, p)
	}
	return out
}

// accepts applies the subscription's header filter.
func (s *subscription) accepts(rec *engine.Record) bool {
	if len(s.filter) == 0 {
		return true // most subscriptions: no map iteration per delivery
	}
	for k, v := range s.filter {
		if got, ok := rec.Headers[k]; !ok || got != v {
			return false
		}
	}
	return true
}

func (s *subscription) item(rec *engine.Record, frame []byte) session.Item {
	return s.itemRef(rec, frame, rec, 0)
}

// itemRef is item with the Ref given (a delta message's is a *deltaRef,
// chosen when the session had dropped dropped messages).
func (s *subscription) itemRef(rec *engine.Record, frame []byte, ref any, dropped uint64) session.Item {
	return session.Item{
		Frame:    frame,
		Stream:   session.Stream{Sub: s.id, Topic: rec.Topic, Partition: rec.Partition},
		Offset:   rec.Offset,
		Priority: rec.Priority,
		Policy:   s.policy,
		Ref:      ref,
		Dropped:  dropped,
	}
}

// send queues one message and counts it as a delivery when it was queued.
func (s *subscription) send(rec *engine.Record, frame []byte) {
	if s.c.sess.Send(s.item(rec, frame)) {
		s.c.rt.countPlainDeliveries(1)
	}
}

// live takes one record from the live tail and reports whether it queued
// it; the caller counts the deliveries of a fan-out at once
// (countPlainDeliveries). Calls for one partition never overlap (the engine
// serializes them), so order is kept.
func (s *subscription) live(rec *engine.Record, frame []byte, d *session.Deferral) bool {
	return s.liveRef(rec, frame, rec, 0, d)
}

// liveRef is live with the item's Ref and Dropped given (delta.go).
func (s *subscription) liveRef(rec *engine.Record, frame []byte, ref any, dropped uint64, d *session.Deferral) bool {
	if s.isLive.Load() {
		if s.belowFloor(rec) {
			return false // the catch-up gave it already
		}
		return s.c.sess.SendDeferred(s.itemRef(rec, frame, ref, dropped), d)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.ended:
	case s.catchingUp:
		if len(s.pending) < maxPending {
			s.pending = append(s.pending, rec)
		} else {
			s.overflow = true
		}
	default:
		return s.c.sess.Send(s.itemRef(rec, frame, ref, dropped))
	}
	return false
}

// Deliver implements engine.Consumer for group members.
func (s *subscription) Deliver(d engine.Delivery) {
	var frame []byte
	if s.c != nil && s.c.kind == transportMQTT {
		frame = s.c.mqtt.groupFrame(s, d) // mqtt_group.go
	} else {
		frame = encodeGroupMessage(s.pattern, d)
	}
	it := session.Item{
		Frame:    frame,
		Stream:   session.Stream{Sub: s.id, Topic: d.Record.Topic, Partition: d.Record.Partition},
		Offset:   d.Record.Offset,
		Priority: d.Record.Priority,
		Policy:   session.Reliable,
		Ref: &groupRef{s: s, pos: engine.Position{
			Topic: d.Record.Topic, Partition: d.Record.Partition, Offset: d.Record.Offset}},
	}
	if d.Attempt > 1 {
		s.c.rt.m.redeliveries.Inc()
	}
	if s.enqueueReliable(it) {
		s.c.rt.m.deliveriesGroup.Inc()
	} else if s.c != nil && s.c.kind == transportMQTT {
		s.c.mqtt.unqueued(frame) // mqtt_group.go
	}
}

// Skipped implements engine.Consumer: retention trimmed records the group
// had not consumed.
func (s *subscription) Skipped(group, topic string, partition int, from, to int64) {
	s.c.rt.m.gaps.WithLabelValues("retention").Inc()
	s.enqueueReliable(session.Item{
		Frame:  encodeGap(nil, s.pattern, group, topic, partition, from, to, "retention"),
		Stream: session.Stream{Sub: s.id, Topic: topic, Partition: partition},
		Offset: from,
		Policy: session.Reliable,
	})
}

// enqueueReliable queues it to the session, or holds it while the
// subscription is held back; it reports whether it did either (not after
// the subscription ended, nor when the queue refused it and closed the
// session).
func (s *subscription) enqueueReliable(it session.Item) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r, ok := it.Ref.(*groupRef); ok && !s.ended {
		if s.unsent == nil {
			s.unsent = make(map[engine.Position]int)
		}
		s.unsent[r.pos]++
	}
	switch {
	case s.ended:
		return false
	case s.holding:
		s.held = append(s.held, it)
		return true
	default:
		return s.c.sess.Send(it)
	}
}

// release sends what a group member held back until its reply was queued.
func (s *subscription) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range s.held {
		s.c.sess.Send(it)
	}
	s.held = nil
	s.holding = false
}

// topicDeleted tells a plain subscriber that a matching topic is gone. A
// catch-up stops replaying it, and a topic created again under the name
// reaches the subscription from offset 0 (replay_handoff.go).
func (s *subscription) topicDeleted(topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.catchingUp && !s.ended {
		s.deletedWhileCatchingUp(topic)
	}
	s.dropFloors(topic)
	if s.delta != nil {
		s.delta.forgetTopic(topic) // a topic made again starts full
	}
	s.c.sess.Send(session.Item{Frame: encodeReply("topic_deleted", nil, map[string]any{
		"pattern": s.pattern,
		"topic":   topic,
	})})
}

// replayPart is one partition a catch-up reads.
type replayPart struct {
	topic     string
	partition int
	from      int64
	gapFrom   int64 // when < from: [gapFrom, from) was trimmed before the client saw it
	// done: from was the partition's next offset when the plan was made,
	// so there is nothing to read; later records come from the live tail,
	// which the subscription was registered with before the plan.
	done bool
}

// checkLast applies the bound on {"last": N} of subscriptions to
// patterns (the topic policies' or MaxLast: maxLastFor); a group resumes
// from its committed offsets, so "last" is for plain subscriptions only.
func (rt *Router) checkLast(from fromSpec, group string, patterns ...string) *protoError {
	switch {
	case from.last == 0:
		return nil
	case group != "":
		return perr(codeBadRequest, `from "last" applies to plain subscriptions; a group resumes from its committed offsets`)
	}
	set := rt.settings()
	for _, p := range patterns {
		if max := set.maxLastFor(p); from.last > max {
			return perr(codeBadRequest, "from.last must be 1 to %d on %s", max, quoteInput(p))
		}
	}
	return nil
}

type partKey struct {
	topic     string
	partition int
}

// replayPlan decides where a replaying subscription starts on every
// partition of every topic its pattern matches. recovered is false when the
// client's epoch is not ours or one of its positions was already trimmed.
func (rt *Router) replayPlan(ctx context.Context, s *subscription, from fromSpec) ([]replayPart, bool, error) {
	topics, err := rt.matchingTopics(ctx, s.pattern)
	if err != nil {
		return nil, false, err
	}
	recovered := true
	known := map[partKey]int64{}
	if from.positions {
		if from.epoch != rt.eng.Epoch() {
			recovered = false
		} else {
			for _, p := range from.pos {
				// The next offset, saturated: a position at the largest
				// offset resumes at the partition's end, never wraps
				// round to a gap before its start.
				known[partKey{p.Topic, p.Partition}] = p.Offset + min(1, math.MaxInt64-p.Offset)
			}
		}
	}
	var plan []replayPart
	seen := map[partKey]bool{}
	set := rt.settings()
	for _, t := range topics {
		if !trie.Matches(s.pattern, t.Config.Name) {
			continue
		}
		// {"last": N} within the bound of the topic's own policy: a
		// wildcard's check at subscribe time (checkLast) knows no topic.
		last := min(from.last, set.topicMaxLast(t.Config.Name)) // topic_policies_access.go
		for _, p := range t.Parts {
			k := partKey{t.Config.Name, p.Partition}
			seen[k] = true
			part := replayPart{topic: k.topic, partition: k.partition, from: p.Earliest, gapFrom: p.Earliest}
			switch {
			case from.positions:
				if want, ok := known[k]; ok {
					switch {
					case want < p.Earliest:
						recovered = false
						part.gapFrom = want
					case want > p.Next:
						part.from, part.gapFrom = p.Next, p.Next
					default:
						part.from, part.gapFrom = want, want
					}
				}
			case from.last > 0:
				// The newest records only: what lies before them is not
				// asked for, so it is no gap.
				part.from = max(p.Earliest, p.Next-int64(last))
				part.gapFrom = part.from
			case from.start.Kind == engine.StartTime:
				off, err := rt.eng.Resolve(ctx, k.topic, k.partition, from.start)
				if err != nil {
					return nil, false, err
				}
				part.from, part.gapFrom = off, off
			}
			part.done = part.from >= p.Next
			plan = append(plan, part)
		}
	}
	for k := range known {
		if !seen[k] && trie.Matches(s.pattern, k.topic) {
			recovered = false // the client had seen a topic that is gone
		}
	}
	return plan, recovered, nil
}

// matchingTopics returns the topics a replay of pattern reads: for a
// pattern without wildcards (a dashboard tile's usual subscription) one
// Topic call, else every topic, which the caller filters.
func (rt *Router) matchingTopics(ctx context.Context, pattern string) ([]engine.TopicInfo, error) {
	if !literalPattern(pattern) {
		return rt.eng.Topics(ctx)
	}
	t, err := rt.eng.Topic(ctx, pattern)
	switch {
	case errors.Is(err, engine.ErrUnknownTopic):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return []engine.TopicInfo{t}, nil
}

// literalPattern reports whether pattern has no wildcard segment.
func literalPattern(pattern string) bool {
	for seg := range strings.SplitSeq(pattern, ".") {
		if seg == "*" || seg == "#" {
			return false
		}
	}
	return true
}

// catchUp replays the log for a subscription, then switches it to live with
// no gap and no duplicate: live records that arrived meanwhile were buffered
// and are delivered after the log, skipping offsets the log already gave.
//
// Every record of the catch-up, buffered ones included, is paced by the
// session's queue (SendWait; an MQTT session's by its client too:
// sendReplayed), and the switch to live happens only once the
// queue has half its room free after the last buffered records: a replay
// that left the queue full would make the first live records meet a full
// queue and be dropped even though the client reads steadily. Until then
// live records keep arriving in the bounded buffer (past maxPending they are
// read from the log again), so a client that reads faster than records
// arrive goes live without loss.
func (s *subscription) catchUp(ctx context.Context, plan []replayPart) {
	next := make(map[partKey]int64, len(plan))
	gone := map[string]bool{} // topics deleted during this read of the plan
	headroom := max(1, s.c.rt.opts.Session.QueueMessages/2)
	for {
		for _, p := range plan {
			k := partKey{p.topic, p.partition}
			s.mu.Lock()
			s.takeDeleted(next, gone)
			gen := s.deletions.Load()
			s.mu.Unlock()
			if gone[p.topic] {
				continue // the incarnation planned for is gone
			}
			if p.gapFrom < p.from {
				s.replayGap(p.topic, p.partition, p.gapFrom, p.from)
			}
			if p.done {
				next[k] = p.from
				continue
			}
			var n int64
			err := s.retrying(ctx, func() (err error) {
				n, err = s.replayPart(ctx, p, gen)
				p.from, p.gapFrom = n, n // on from where it stopped (replay_retry.go)
				return err
			})
			if err != nil {
				s.replayFailed(ctx, p.topic, err)
				return
			}
			s.mu.Lock()
			s.takeDeleted(next, gone)
			s.mu.Unlock()
			if !gone[p.topic] {
				next[k] = n
			}
		}
		replan, err := s.drainPending(ctx, next, gone, headroom)
		if err != nil {
			s.replayFailed(ctx, "", err)
			return
		}
		if !replan {
			return
		}
		// Too much arrived while replaying: read the rest from the log,
		// a deleted topic's new incarnation (not in next) from its start.
		clear(gone)
		plan = plan[:0]
		for k, n := range next {
			plan = append(plan, replayPart{topic: k.topic, partition: k.partition, from: n, gapFrom: n})
		}
		var more []replayPart
		err = s.retrying(ctx, func() (err error) {
			more, _, err = s.c.rt.replayPlan(ctx, s, fromSpec{start: engine.Start{Kind: engine.StartEarliest}})
			return err
		})
		if err != nil {
			s.replayFailed(ctx, "", err)
			return
		}
		for _, p := range more {
			if _, ok := next[partKey{p.topic, p.partition}]; !ok {
				plan = append(plan, p)
			}
		}
	}
}

// drainPending delivers the live records buffered during the catch-up,
// paced by the queue, and switches the subscription to live once what is
// left fits with headroom to spare. It reports replan when the buffer
// overflowed, so the caller reads on from the log at next.
func (s *subscription) drainPending(ctx context.Context, next map[partKey]int64, gone map[string]bool, headroom int) (replan bool, err error) {
	for {
		s.mu.Lock()
		if s.ended {
			s.mu.Unlock()
			return false, errEnded
		}
		s.takeDeleted(next, gone)
		if s.overflow {
			s.pending = nil
			s.overflow = false
			s.mu.Unlock()
			return true, nil
		}
		batch := s.pending[:0]
		for _, rec := range s.pending {
			k := partKey{rec.Topic, rec.Partition}
			if n, ok := next[k]; ok && rec.Offset < n {
				continue // the log gave it already
			}
			if s.accepts(rec) {
				batch = append(batch, rec)
			}
		}
		if s.goLive(batch, headroom) {
			s.pending = nil
			s.catchingUp = false
			s.floors.Store(newFloorSet(next))
			s.isLive.Store(true)
			s.mu.Unlock()
			return false, nil
		}
		s.pending = nil
		s.mu.Unlock()
		if len(batch) == 0 {
			if err := s.waitReplayRoom(ctx, headroom); err != nil {
				return false, err
			}
			continue
		}
		for _, rec := range batch {
			it := s.item(rec, s.encode(rec))
			if err := s.sendReplayed(ctx, it); err != nil {
				return false, err
			}
			s.c.rt.m.deliveriesPlain.Inc()
			next[partKey{rec.Topic, rec.Partition}] = rec.Offset + 1
		}
	}
}

var errEnded = errors.New("router: subscription ended")

// sendReplayed queues one record of the catch-up, paced by the session's
// queue (SendWait) and, for an MQTT session, by its client: an MQTT
// session's writer empties its queue at once, holding what the in-flight
// window has no room for (mqtt_session_replay.go).
func (s *subscription) sendReplayed(ctx context.Context, it session.Item) error {
	if s.c.kind == transportMQTT {
		return s.c.mqtt.sendReplayed(ctx, it, s.hasEnded)
	}
	return s.c.sess.SendWait(ctx, it)
}

// hasEnded reports whether the subscription ended (dropSub).
func (s *subscription) hasEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// waitReplayRoom waits until the queue has room for n more records and,
// for an MQTT session, its replay too; the caller checks again.
func (s *subscription) waitReplayRoom(ctx context.Context, n int) error {
	if err := s.c.sess.WaitRoom(ctx, n); err != nil {
		return err
	}
	if s.c.kind == transportMQTT {
		return s.c.mqtt.waitReplayRoom(ctx, n)
	}
	return nil
}

// goLive queues the catch-up's last buffered records, with s.mu held,
// when they leave the queue headroom records to spare and, for an MQTT
// session, its replay budget too (takeLast): an MQTT session's as
// replayed deliveries (mqtt_session_replay.go), which its writer does not
// drop. It reports false, queuing nothing, when they do not.
func (s *subscription) goLive(batch []*engine.Record, headroom int) bool {
	if len(batch)+headroom > s.c.sess.Room() {
		return false
	}
	if s.c.kind != transportMQTT {
		for _, rec := range batch {
			s.send(rec, s.encode(rec))
		}
		return true
	}
	its := make([]session.Item, len(batch))
	for i, rec := range batch {
		its[i] = s.item(rec, s.encode(rec))
	}
	if !s.c.mqtt.takeLast(its, headroom) {
		return false
	}
	s.c.rt.countPlainDeliveries(s.c.mqtt.sendTaken(its))
	return true
}

// replayPart sends one partition's records from p.from to the log's end and
// returns the offset after the last one read. It stops early, with no
// error, once the topic is deleted (gen: s.deletions when the catch-up
// last took the deletions).
func (s *subscription) replayPart(ctx context.Context, p replayPart, gen uint64) (int64, error) {
	off := p.from
	for {
		recs, n, err := s.c.rt.readLog(ctx, p.topic, p.partition, off)
		if errors.Is(err, engine.ErrUnknownTopic) {
			return off, nil // deleted meanwhile
		}
		if err != nil {
			return off, err
		}
		if s.replayDeleted(p.topic, gen) {
			return off, nil // what it read may be a new incarnation's
		}
		if len(recs) == 0 {
			return n, nil
		}
		if recs[0].Offset > off {
			s.replayGap(p.topic, p.partition, off, recs[0].Offset)
		}
		for _, rec := range recs {
			if s.replayDeleted(p.topic, gen) {
				return off, nil
			}
			if !s.accepts(rec) {
				continue
			}
			it := s.item(rec, s.encode(rec))
			if err := s.sendReplayed(ctx, it); err != nil {
				return off, err
			}
			s.c.rt.m.deliveriesPlain.Inc()
		}
		s.mu.Lock()
		ended := s.ended
		s.mu.Unlock()
		if ended {
			return off, errEnded
		}
		off = n
	}
}

// readLog reads up to replayBatch records of a partition for a catch-up:
// from the engine's memory when it can answer there (engine.SeenReader;
// what it has not announced yet reaches the subscription live), else with
// Read. A subscribe with "last" over thousands of topics then costs no
// round trip per partition on an engine backed by a remote store.
func (rt *Router) readLog(ctx context.Context, topic string, partition int, from int64) ([]*engine.Record, int64, error) {
	if sr, ok := rt.eng.(engine.SeenReader); ok {
		if recs, n, ok := sr.ReadSeen(topic, partition, from, replayBatch); ok {
			return recs, n, nil
		}
	}
	return rt.eng.Read(ctx, topic, partition, from, replayBatch)
}

func (s *subscription) replayGap(topic string, partition int, from, to int64) {
	s.c.rt.m.gaps.WithLabelValues("retention").Inc()
	if s.c.kind == transportMQTT {
		s.c.mqtt.sessionGap(from, to) // no gap packet in MQTT (mqtt_session_track.go)
		return
	}
	s.c.sess.Send(session.Item{
		Frame:  encodeGap(nil, s.pattern, "", topic, partition, from, to, "retention"),
		Stream: session.Stream{Sub: s.id, Topic: topic, Partition: partition},
		Offset: from,
		Policy: session.Reliable,
	})
}
