package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/internal/wire"
)

// Subscription is one subscription of a Client, plain or to a group. It is
// safe for concurrent use by multiple goroutines.
type Subscription struct {
	// C receives the deliveries of a subscription made with SubscribeChan;
	// it is closed when the subscription ends. Nil for Subscribe.
	C <-chan *Message

	c       *Client
	pattern string
	group   string
	opts    SubscribeOptions
	handler func(*Message)
	ch      chan *Message
	done    chan struct{} // closed when the subscription ends
	pending atomic.Int64  // deliveries queued for the dispatcher
	dups    atomic.Int64  // duplicate deliveries suppressed
	drops   atomic.Bool   // localGaps may hold drops: spares a lock per delivery
	// Backpressure (backpressure.go).
	room     chan struct{} // capacity 1: the dispatcher made room
	waiting  atomic.Bool   // the reader waits for room
	shedding atomic.Bool   // a wait for room timed out; drop until there is room

	chClosed bool // touched by the dispatcher goroutine only

	mu           sync.Mutex // guards following
	active       bool
	ended        bool
	subscribedAt time.Time
	epoch        string            // the epoch positions belong to
	positions    map[partKey]int64 // plain: last offset delivered
	localGaps    map[partKey]*Gap  // plain: dropped for MaxPending, not yet reported
	// A reset not yet confirmed: the positions of another epoch, sent on
	// every resubscribe until a reply says whether they still apply, so
	// that a connection lost before that reply does not lose the reset.
	staleEpoch     string
	stalePositions map[partKey]int64
	recent         map[recentKey]bool // group: recently acked positions
	recentRing     []recentKey        // insertion order of recent, bounded by DedupeSize
	recentNext     int
	// bases: a delta subscription's last payload per partition (delta.go).
	bases map[partKey][]byte
	// deleted: the topics deleted while this connection was read (see
	// advance), at most maxDeletedTopics; cleared with each connection.
	deleted map[string]struct{}
	// stragglers: per partition of a deleted topic not yet seen made
	// again, the last offset of the deleted incarnation delivered (before
	// the delete or after it, a straggler). Never resumed from; cleared
	// with each connection.
	stragglers map[partKey]int64
}

// maxDeletedTopics bounds Subscription.deleted: past it the oldest marks
// are forgotten at once (a connection that sees so many deletes of its
// topics is one whose messages of a deleted topic have long been read).
const maxDeletedTopics = 1024

type partKey struct {
	topic     string
	partition int
}

type recentKey struct {
	topic     string
	partition int
	offset    int64
}

func newSubscription(c *Client, pattern string, opts SubscribeOptions, handler func(*Message)) *Subscription {
	s := &Subscription{
		c: c, pattern: pattern, group: opts.Group, opts: opts, handler: handler,
		done:         make(chan struct{}),
		room:         make(chan struct{}, 1),
		subscribedAt: time.Now(),
		positions:    make(map[partKey]int64),
	}
	if handler == nil {
		s.ch = make(chan *Message, opts.Buffer)
		s.C = s.ch
	}
	if opts.Group != "" {
		s.recent = make(map[recentKey]bool)
	}
	return s
}

// Duplicates returns how many duplicate deliveries the client suppressed
// for this subscription: plain records at or below the last offset
// delivered, and group redeliveries of records already acked.
func (s *Subscription) Duplicates() int64 { return s.dups.Load() }

// Pattern returns the subscribed pattern.
func (s *Subscription) Pattern() string { return s.pattern }

// Group returns the consumer group, or "" for a plain subscription.
func (s *Subscription) Group() string { return s.group }

// Done is closed when the subscription ends: unsubscribed, refused by the
// gateway on a resubscribe, or its client stopped.
func (s *Subscription) Done() <-chan struct{} { return s.done }

// Positions returns, for a plain subscription, the last offset delivered
// per (topic, partition), and the epoch they belong to: what the client
// resubscribes from after a reconnect.
func (s *Subscription) Positions() (epoch string, positions []Position) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, off := range s.positions {
		positions = append(positions, Position{Topic: k.topic, Partition: k.partition, Offset: off})
	}
	return s.epoch, positions
}

// Unsubscribe ends the subscription. Deliveries already received may still
// be handled while it runs; none are handled after it returns, except by a
// handler already running. It returns ErrUnsubscribed if the subscription
// had already ended.
func (s *Subscription) Unsubscribe(ctx context.Context) error {
	c := s.c
	c.mu.Lock()
	k := subKey{s.pattern, s.group}
	mine := c.subs[k] == s
	if mine {
		delete(c.subs, k)
	}
	connected := c.conn != nil
	c.mu.Unlock()
	if !mine || !s.end() {
		return ErrUnsubscribed
	}
	c.disp.push(event{kind: evEnd, sub: s})
	if !connected {
		return nil // the lost connection took the subscription with it
	}
	_, err := c.roundTrip(ctx, func(id uint64) any {
		return unsubscribeReq{Op: wire.OpUnsubscribe, ID: id, Pattern: s.pattern, Group: s.group}
	}, nil, nil)
	var e *Error
	switch {
	case err == nil, errors.Is(err, ErrConnectionLost):
		// A lost connection took the subscription with it.
		return nil
	case errors.As(err, &e) && e.Code == CodeNotSubscribed:
		return nil
	}
	return err
}

// end marks the subscription ended; it reports whether this call did.
func (s *Subscription) end() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return false
	}
	s.ended, s.active = true, false
	close(s.done)
	return true
}

func (s *Subscription) setEpoch(epoch string) {
	s.mu.Lock()
	s.epoch = epoch
	s.mu.Unlock()
}

func (s *Subscription) activate() {
	s.mu.Lock()
	if !s.ended {
		s.active = true
	}
	s.mu.Unlock()
}

func (s *Subscription) isActive() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active
}

func (s *Subscription) isEnded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

// request builds the subscribe frame. On a resubscribe (resume), epoch is
// the new connection's, and a plain subscription continues from its
// positions.
func (s *Subscription) request(id uint64, resume bool, epoch string) subscribeReq {
	req := subscribeReq{Op: wire.OpSubscribe, ID: id, Pattern: s.pattern, Group: s.group, OnFull: s.opts.OnFull, Presence: s.opts.Presence}
	if s.opts.Delta && s.group == "" {
		req.Delta = wire.DeltaFossil
	}
	if len(s.opts.Filter) > 0 {
		req.Filter = &filterSpec{Headers: s.opts.Filter}
	}
	from := s.opts.From
	if resume {
		if s.group != "" {
			// A group resumes from its committed offsets.
			return req
		}
		from = s.resumeFrom(epoch)
	}
	if !from.IsZero() {
		req.From = &from
	}
	return req
}

// resumeFrom is where a plain subscription continues on a connection whose
// log has epoch. With nothing delivered yet it repeats the original start,
// with "latest" pinned to the time of the first subscribe (by this
// machine's clock) so records published during an outage are not missed.
func (s *Subscription) resumeFrom(epoch string) From {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.positions) == 0 && s.stalePositions != nil {
		// The reset of an earlier resubscribe is not confirmed yet.
		s.epoch = epoch
		return fromPositionMap(s.staleEpoch, s.stalePositions)
	}
	if len(s.positions) == 0 {
		switch s.opts.From.kind {
		case fromDefault, fromLatest:
			return FromTime(s.subscribedAt)
		}
		return s.opts.From
	}
	from := fromPositionMap(s.epoch, s.positions)
	if s.epoch != epoch {
		// The gateway will send everything it holds; offsets start over.
		// The old positions are kept until the gateway's reply confirms
		// the reset (resumed).
		s.staleEpoch, s.stalePositions = s.epoch, s.positions
		s.positions = make(map[partKey]int64)
		s.epoch = epoch
	}
	return from
}

func fromPositionMap(epoch string, positions map[partKey]int64) From {
	pos := make([]Position, 0, len(positions))
	for k, off := range positions {
		pos = append(pos, Position{Topic: k.topic, Partition: k.partition, Offset: off})
	}
	return FromPositions(epoch, pos...)
}

// resumed takes the reply's recovered (nil when the reply has none) to a
// resubscribe and reports whether it is a reset to report, and whether the
// epoch changed. A pending reset stays pending until a reply settles it.
func (s *Subscription) resumed(recovered *bool) (reset, epochChanged bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if recovered == nil {
		return false, false
	}
	if *recovered {
		if s.stalePositions != nil && len(s.positions) == 0 {
			// The gateway is back on the epoch of the positions it was
			// sent: they still apply.
			s.epoch, s.positions = s.staleEpoch, s.stalePositions
		}
		s.staleEpoch, s.stalePositions = "", nil
		return false, false
	}
	// s.epoch is the connection's (resumeFrom).
	epochChanged = s.stalePositions != nil && s.staleEpoch != s.epoch
	s.staleEpoch, s.stalePositions = "", nil
	return true, epochChanged
}

// advance records offset as delivered, or reports false for a duplicate.
//
// A topic deleted while the connection is read is the exception: the
// gateway writes topic_deleted ahead of the messages of the topic it had
// queued, so messages of the deleted incarnation may follow the frame,
// and then the incarnation created next, from offset 0. On one connection
// the gateway sends each offset of an incarnation once and in order, so
// an offset at or below the last one of a deleted topic is the next
// incarnation's, not a duplicate: it starts the partition's positions
// again.
//
// A straggler (an offset above the deleted incarnation's last) moves no
// position: a resume must not name the deleted incarnation's offsets, or
// the gateway would skip the next incarnation's records up to them.
func (s *Subscription) advance(topic string, partition int, offset int64) bool {
	k := partKey{topic, partition}
	s.mu.Lock()
	defer s.mu.Unlock()
	if last, ok := s.stragglers[k]; ok {
		if offset > last {
			s.stragglers[k] = offset
			return true
		}
		delete(s.stragglers, k) // the next incarnation, from its first offset
		s.positions[k] = offset
		return true
	}
	if last, ok := s.positions[k]; ok && offset <= last {
		if _, again := s.deleted[topic]; !again {
			return false
		}
	}
	s.positions[k] = offset
	return true
}

// newConnection forgets the topics deleted on the previous connection:
// on a new one, the gateway resumes from the positions (an offset at or
// below them is a duplicate again).
func (s *Subscription) newConnection() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deleted, s.stragglers = nil, nil
}

func (s *Subscription) forgetTopic(topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.deleted == nil || len(s.deleted) >= maxDeletedTopics {
		s.deleted = make(map[string]struct{})
	}
	s.deleted[topic] = struct{}{}
	for k := range s.bases {
		if k.topic == topic {
			delete(s.bases, k)
		}
	}
	for k, off := range s.positions {
		if k.topic == topic {
			if len(s.stragglers) < maxDeletedTopics {
				if s.stragglers == nil {
					s.stragglers = make(map[partKey]int64)
				}
				s.stragglers[k] = off
			}
			delete(s.positions, k)
		}
	}
}

// noteDrop records a plain delivery dropped for MaxPending, merging
// adjacent drops into one gap.
func (s *Subscription) noteDrop(topic string, partition int, offset int64) {
	k := partKey{topic, partition}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.localGaps == nil {
		s.localGaps = make(map[partKey]*Gap)
	}
	s.drops.Store(true)
	if g := s.localGaps[k]; g != nil {
		g.To = max(g.To, offset+1)
		return
	}
	s.localGaps[k] = &Gap{Pattern: s.pattern, Topic: topic, Partition: partition,
		From: offset, To: offset + 1, Reason: "client_queue_full"}
}

// takeLocalGaps returns and forgets the drops not yet reported.
func (s *Subscription) takeLocalGaps() []Gap {
	if !s.drops.Load() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drops.Store(false)
	if len(s.localGaps) == 0 {
		return nil
	}
	gaps := make([]Gap, 0, len(s.localGaps))
	for _, g := range s.localGaps {
		gaps = append(gaps, *g)
	}
	clear(s.localGaps)
	return gaps
}

func (s *Subscription) remember(k recentKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.recent[k] {
		return
	}
	if len(s.recentRing) < s.opts.DedupeSize {
		s.recentRing = append(s.recentRing, k)
	} else {
		delete(s.recent, s.recentRing[s.recentNext])
		s.recentRing[s.recentNext] = k
		s.recentNext = (s.recentNext + 1) % len(s.recentRing)
	}
	s.recent[k] = true
}

func (s *Subscription) forget(k recentKey) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The ring keeps the stale slot; it is recycled in turn.
	delete(s.recent, k)
}

func (s *Subscription) handled(k recentKey) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recent[k]
}

// Message is one delivery. Its fields must not be modified; Ack and Nack
// may be called from any goroutine.
type Message struct {
	Pattern   string
	Topic     string
	Partition int
	Offset    int64
	Key       string            // "" when the publisher set none
	Headers   map[string]string // nil when the publisher set none
	Data      json.RawMessage
	// Encoding is "base64" when the record's bytes are not JSON: Data is
	// then a JSON string of their standard base64 (Payload decodes it).
	Encoding string
	Time     time.Time // append time, millisecond precision
	Group    string    // consumer group deliveries only
	Attempt  int       // consumer group deliveries only; 1 on the first

	sub *Subscription
}

// Payload returns the record's bytes: Data itself when it is JSON, the
// decoded base64 when Encoding is "base64".
func (m *Message) Payload() ([]byte, error) {
	if m.Encoding != wire.EncodingBase64 {
		return m.Data, nil
	}
	var s string
	if err := json.Unmarshal(m.Data, &s); err != nil {
		return nil, fmt.Errorf("%w: base64 data is not a string: %v", ErrProtocol, err)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	return b, nil
}

func (m *Message) key() recentKey { return recentKey{m.Topic, m.Partition, m.Offset} }

// Ack acknowledges a group delivery and waits for the gateway's answer.
// The position is remembered first, so a redelivery of it is acked again
// without running the handler, even if this Ack fails (for example with
// code "not_in_flight" after the ack timeout passed). Plain deliveries
// return ErrNotGroup.
func (m *Message) Ack(ctx context.Context) error {
	if m.Group == "" || m.sub == nil {
		return ErrNotGroup
	}
	m.sub.remember(m.key())
	return m.settle(ctx, "ack", "")
}

// Nack hands a group delivery back for redelivery after the gateway's
// backoff; reason is recorded with the record. Plain deliveries return
// ErrNotGroup.
func (m *Message) Nack(ctx context.Context, reason string) error {
	if m.Group == "" || m.sub == nil {
		return ErrNotGroup
	}
	m.sub.forget(m.key())
	return m.settle(ctx, "nack", reason)
}

func (m *Message) settle(ctx context.Context, op, reason string) error {
	_, err := m.sub.c.roundTrip(ctx, func(id uint64) any {
		return ackReq{Op: op, ID: id, Group: m.Group, Topic: m.Topic, Partition: m.Partition, Offset: m.Offset, Error: reason}
	}, nil, nil)
	return err
}

// --- dispatcher ---

type eventKind int

const (
	evMessage eventKind = iota + 1
	evGap
	evReset
	evEnd
	evState
	evError
	evExit
	evPresence
	evTopicDeleted
)

type event struct {
	kind  eventKind
	sub   *Subscription
	msg   *Message
	gap   *Gap
	reset *Reset
	state State
	err   error
	// presence of evPresence
	presence *PresenceEvent
	// deleted of evTopicDeleted
	deleted *TopicDeleted
}

// dispatcher is an unbounded FIFO of events from the reader to the
// dispatcher goroutine; each subscription's MaxPending bounds its share.
type dispatcher struct {
	mu   sync.Mutex // guards q
	q    []event
	wake chan struct{} // capacity 1
}

func (d *dispatcher) push(e event) {
	d.mu.Lock()
	d.q = append(d.q, e)
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// dispatch is the dispatcher goroutine. It returns when the client is
// closed, or after an evExit event.
func (c *Client) dispatch() {
	defer c.wg.Done()
	var batch []event
	defer func() { c.finish(batch) }()
	for {
		c.disp.mu.Lock()
		batch, c.disp.q = c.disp.q, batch[:0]
		c.disp.mu.Unlock()
		if len(batch) == 0 {
			select {
			case <-c.disp.wake:
				continue
			case <-c.ctx.Done():
				return
			}
		}
		for i := range batch {
			if c.ctx.Err() != nil || batch[i].kind == evExit {
				batch = batch[i:]
				return
			}
			c.deliver(&batch[i])
			batch[i] = event{}
		}
	}
}

// finish ends every subscription, including those of the undelivered
// events in rest, and reports StateClosed.
func (c *Client) finish(rest []event) {
	c.mu.Lock()
	subs := make([]*Subscription, 0, len(c.subs))
	for k, s := range c.subs {
		subs = append(subs, s)
		delete(c.subs, k)
	}
	c.mu.Unlock()
	for _, s := range subs {
		s.end()
		c.closeChan(s)
	}
	c.disp.mu.Lock()
	rest = append(rest, c.disp.q...)
	c.disp.q = nil
	c.disp.mu.Unlock()
	for _, e := range rest {
		if e.sub != nil {
			e.sub.end()
			c.closeChan(e.sub)
		}
	}
	if c.opts.OnState != nil {
		c.opts.OnState(StateClosed, nil)
	}
}

func (c *Client) closeChan(s *Subscription) {
	if s.ch != nil && !s.chClosed {
		s.chClosed = true
		close(s.ch)
	}
}

func (c *Client) deliver(e *event) {
	switch e.kind {
	case evMessage:
		s := e.sub
		s.pending.Add(-1)
		s.madeRoom()
		if s.isEnded() {
			return
		}
		m := e.msg
		if s.group != "" && s.handled(m.key()) {
			// Already handled and acked: ack the redelivery, skip the handler.
			s.dups.Add(1)
			c.sendAsync(ackReq{Op: wire.OpAck, Group: m.Group, Topic: m.Topic, Partition: m.Partition, Offset: m.Offset})
			return
		}
		if s.handler != nil {
			s.handler(m)
		} else {
			select {
			case s.ch <- m:
			case <-s.done:
			case <-c.ctx.Done():
			}
		}
		if s.group == "" && s.pending.Load() == 0 {
			// Drained: what was dropped meanwhile is reported now, not
			// when the next record arrives (which may be never).
			for _, g := range s.takeLocalGaps() {
				c.deliver(&event{kind: evGap, sub: s, gap: &g})
			}
		}
	case evGap:
		if c.opts.OnGap != nil {
			c.opts.OnGap(*e.gap)
		} else {
			c.log.Warn("switchyard: gap", "pattern", e.gap.Pattern, "topic", e.gap.Topic,
				"partition", e.gap.Partition, "from", e.gap.From, "to", e.gap.To, "reason", e.gap.Reason)
		}
	case evReset:
		if c.opts.OnReset != nil {
			c.opts.OnReset(*e.reset)
		} else {
			c.log.Warn("switchyard: subscription reset", "pattern", e.reset.Pattern, "group", e.reset.Group,
				"epoch_changed", e.reset.EpochChanged)
		}
	case evEnd:
		c.closeChan(e.sub)
	case evState:
		if c.opts.OnState != nil {
			c.opts.OnState(e.state, e.err)
		}
	case evPresence:
		c.opts.OnPresence(*e.presence)
	case evTopicDeleted:
		if c.opts.OnTopicDeleted != nil {
			c.opts.OnTopicDeleted(*e.deleted)
		} else {
			c.log.Info("switchyard: topic deleted", "topic", e.deleted.Topic, "pattern", e.deleted.Pattern)
		}
	case evError:
		if c.opts.OnError != nil {
			c.opts.OnError(e.err)
		} else {
			c.log.Warn("switchyard: error", "err", e.err)
		}
	}
}
