package session

// The outbound queue of a session: the Queue type, Push with its bounds
// and drop policies, and its counters. The per-stream bookkeeping and gap
// ranges are in queue_streams.go, taking a batch in queue_batch.go and
// the rings behind the lanes in queue_ring.go.

import (
	"sync"
	"sync/atomic"
)

// numLanes is the number of priority lanes; priorities above numLanes-1
// count as numLanes-1.
const numLanes = 4

// Outcome is what Queue.Push did with an item.
type Outcome uint8

const (
	// Queued: the item is queued (possibly after evicting another message).
	Queued Outcome = iota
	// Dropped: the incoming message was dropped and recorded as a gap.
	Dropped
	// Overflow: the item was not queued and the session must close with 1013
	// (the Disconnect policy on a full queue, or too many reliable items).
	Overflow
	// Closed: the queue no longer accepts items.
	Closed
	// ControlFull: the control item was not queued because the queued
	// control items would exceed Options.ControlBytes, or the control and
	// reliable items already reach their count bound (4 x QueueMessages);
	// the session must close with 1008.
	ControlFull
)

// String returns a lower-case name for the outcome.
func (o Outcome) String() string {
	switch o {
	case Queued:
		return "queued"
	case Dropped:
		return "dropped"
	case Overflow:
		return "overflow"
	case Closed:
		return "closed"
	case ControlFull:
		return "control_full"
	}
	return "unknown"
}

// QueueStats is a snapshot of a Queue's counters.
type QueueStats struct {
	Queued int // items queued now: control, reliable and message
	// ControlBytes is the bytes of the control items queued now.
	ControlBytes int
	Dropped      uint64 // messages dropped since the queue was made
	Gaps         uint64 // gap frames taken by AppendBatch
}

// Queue is the bounded, multi-lane outbound queue of a session, with its drop
// policies and gap bookkeeping (see the package documentation). A Session
// owns one; it is exported to be tested and reused on its own.
//
// Queue is safe for concurrent use by multiple goroutines: any number of
// producers may Push while one consumer calls AppendBatch.
type Queue struct {
	limit     int // bound on message items; 4 x limit bounds the control and reliable items (hardLimit)
	ctlLimit  int // bound on the bytes of control items
	encodeGap func(dst []byte, s Stream, from, to int64) []byte
	prefix    func(dst []byte, it *Item) []byte
	onDrop    func(it *Item)
	ready     chan struct{}
	// With write coalescing (Options.WriteDelay), a batch holds at most
	// maxFrames frames, and full receives a value once maxFrames items or a
	// control item are queued; maxFrames is 0 without coalescing.
	maxFrames int
	full      chan struct{}

	mu      sync.Mutex // guards following
	closed  bool
	control ring
	// lanes are made on first use and, once empty, given back to lanePool
	// when the session parks (Shrink): an idle session holds none.
	lanes    [numLanes]*ring
	msgs     int // queued message items (bounded by limit)
	others   int // queued control and reliable items (bounded by hardLimit)
	ctlBytes int // bytes of the queued control items
	streams  map[Stream]*streamState
	idle     []Stream       // streams that may have gaps and nothing queued
	free     []*streamState // recycled stream states (with their gap slices)
	dropped  uint64
	drops    atomic.Uint64 // dropped, raised once a drop's bookkeeping is done (Session.Dropped)
	gapsSent uint64
	dropping *Item // the item handed to OnDrop, kept so it does not escape; made at the first drop
	lastKey  Stream
	lastSt   *streamState // the state of lastKey, nil when none (see lookup)
	taken    []any        // Refs of the last AppendBatch; owned by the consumer
}

// hardLimit is the bound on the queued control and reliable items: four
// times the message bound (computed, not stored, so that the Queue fits
// the 352-byte size class).
func (q *Queue) hardLimit() int { return 4 * q.limit }

// NewQueue returns an empty queue configured by opts: it uses QueueMessages,
// ControlBytes, EncodeGap (required; NewQueue panics without it) and OnDrop.
func NewQueue(opts Options) *Queue {
	opts = opts.withDefaults()
	q := &Queue{
		limit:     opts.QueueMessages,
		ctlLimit:  opts.ControlBytes,
		encodeGap: opts.EncodeGap,
		prefix:    opts.FramePrefix,
		onDrop:    opts.OnDrop,
		ready:     make(chan struct{}, 1),
	}
	if opts.WriteDelay > 0 {
		q.maxFrames = opts.WriteDelayFrames
		q.full = make(chan struct{}, 1)
	}
	return q
}

// Ready returns a channel that receives a value after Push changed what
// AppendBatch would return (and when the session wakes its writer for
// its control state: Session.kick). The consumer waits on it, then calls
// AppendBatch until it returns no frames.
func (q *Queue) Ready() <-chan struct{} { return q.ready }

func (q *Queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// signalFull wakes a writer lingering for more frames (coalesce.go), if
// coalescing is on; it never blocks.
func (q *Queue) signalFull() {
	if q.full == nil {
		return
	}
	select {
	case q.full <- struct{}{}:
	default:
	}
}

// Push queues it, applying the bound and the policies described in the
// package documentation. It never blocks beyond the queue's lock.
func (q *Queue) Push(it Item) Outcome {
	out := q.pushQuiet(it)
	if out == Queued || out == Dropped {
		q.signal()
	}
	return out
}

// pushQuiet is Push without the Ready signal, which the caller sends
// later (Deferral.Flush).
func (q *Queue) pushQuiet(it Item) Outcome {
	q.mu.Lock()
	out := q.push(&it)
	full := q.full != nil && out == Queued && (it.Stream.Sub == 0 || q.msgs+q.others >= q.maxFrames)
	q.mu.Unlock()
	if full {
		select {
		case q.full <- struct{}{}:
		default:
		}
	}
	return out
}

// flushDue reports whether a coalescing writer should go on without
// waiting: nothing is pending (there is nothing to wait for), a control item
// or a batch's worth of frames is queued, or the queue is closed.
func (q *Queue) flushDue() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.msgs + q.others
	return q.closed || q.control.n > 0 || n >= q.maxFrames || n == 0 && len(q.idle) == 0
}

func (q *Queue) push(it *Item) Outcome {
	if q.closed {
		return Closed
	}
	if it.Stream.Sub == 0 {
		if q.others >= q.hardLimit() {
			// Unread replies filled the item bound: the same refusal as
			// filling the byte bound.
			return ControlFull
		}
		if q.control.n > 0 && q.ctlBytes+len(it.Frame) > q.ctlLimit {
			return ControlFull
		}
		q.others++
		q.ctlBytes += len(it.Frame)
		q.control.push(*it, nil)
		return Queued
	}
	if it.Dropped != q.drops.Load() {
		// Dropped since its frame was chosen: maybe what it depends on.
		if f, ok := it.Ref.(Fallback); ok {
			it.Frame = f.FallbackFrame()
		}
	}
	prio := min(int(it.Priority), numLanes-1)
	st := q.lookup(it.Stream) // one lookup: the slot keeps the pointer
	lane := laneOf(st, prio)
	switch {
	case it.Policy == Reliable:
		if q.others >= q.hardLimit() {
			return Overflow
		}
		q.others++
	case q.msgs < q.limit:
		q.msgs++
	default:
		// Full: lower priorities go first, then the item's own policy.
		switch {
		case q.evict(lane-1, false):
		case it.Policy == DropOld && q.evict(lane, true):
		case it.Policy == Disconnect:
			return Overflow
		default:
			q.drop(it)
			return Dropped
		}
		// The eviction may have emptied the item's stream.
		lane = laneOf(st, prio)
		q.msgs++
	}
	if st == nil {
		st = q.stream(it.Stream)
	}
	st.queued++
	st.lane = uint8(lane)
	r := q.lanes[lane]
	if r == nil {
		r = q.newLane(lane)
	}
	r.push(*it, st)
	r.count(it, 1)
	q.remember(it.Stream, st)
	return Queued
}

// laneOf returns the lane of a new item of a stream with state st (nil for
// a stream with no state): the stream's current lane while it has items
// queued, else its priority.
func laneOf(st *streamState, prio int) int {
	if st != nil && st.queued > 0 {
		return int(st.lane)
	}
	return prio
}

// evict drops the oldest message of the lowest lane in 0..hi that has one:
// any DropOld or DropNew message, or only DropOld ones when oldOnly is set.
// It reports whether it dropped one.
func (q *Queue) evict(hi int, oldOnly bool) bool {
	for l := 0; l <= hi; l++ {
		r := q.lanes[l]
		if r == nil || r.evictable == 0 || oldOnly && r.dropOld == 0 {
			continue
		}
		for i := 0; i < r.n; i++ {
			s := r.at(i)
			if s.dead || !s.it.isMessage() || s.it.Policy == Disconnect || oldOnly && s.it.Policy != DropOld {
				continue
			}
			r.count(&s.it, -1)
			st := s.st
			victim := r.remove(i)
			q.msgs--
			st.queued--
			q.drop(&victim)
			return true
		}
	}
	return false
}

// drop counts it as dropped, tells OnDrop and records its gap.
func (q *Queue) drop(it *Item) {
	q.dropped++
	if q.onDrop != nil {
		if q.dropping == nil {
			q.dropping = new(Item)
		}
		*q.dropping = *it
		q.onDrop(q.dropping)
		*q.dropping = Item{}
	}
	st := q.stream(it.Stream)
	st.gaps = addGap(st.gaps, it.Offset)
	if st.queued == 0 {
		q.markIdle(it.Stream, st)
	}
	// Last: whoever reads the new count sees OnDrop's effects too.
	q.drops.Add(1)
}

// Len returns the number of items queued: control, reliable and message.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.msgs + q.others
}

// Pending reports whether AppendBatch would return frames: items queued or
// gaps waiting.
func (q *Queue) Pending() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.msgs+q.others > 0 || len(q.idle) > 0
}

// Close makes Push refuse further items (Closed); what is queued can still
// be taken with AppendBatch. Close may be called many times.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.signal()
}

// Stats returns a snapshot of the queue's counters.
func (q *Queue) Stats() QueueStats {
	q.mu.Lock()
	defer q.mu.Unlock()
	return QueueStats{Queued: q.msgs + q.others, ControlBytes: q.ctlBytes, Dropped: q.dropped, Gaps: q.gapsSent}
}
