package session

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
	limit     int // bound on message items
	hardLimit int // bound on control and reliable items
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

	mu       sync.Mutex // guards following
	closed   bool
	control  ring
	lanes    [numLanes]ring
	msgs     int // queued message items (bounded by limit)
	others   int // queued control and reliable items (bounded by hardLimit)
	ctlBytes int // bytes of the queued control items
	streams  map[Stream]*streamState
	idle     []Stream       // streams that may have gaps and nothing queued
	free     []*streamState // recycled stream states (with their gap slices)
	dropped  uint64
	drops    atomic.Uint64 // dropped, raised once a drop's bookkeeping is done (Session.Dropped)
	gapsSent uint64
	dropping Item // the item handed to OnDrop, kept here so it does not escape
	lastKey  Stream
	lastSt   *streamState // the state of lastKey, nil when none (see lookup)
	taken    []any        // Refs of the last AppendBatch; owned by the consumer
}

// streamState is the bookkeeping of a stream that has items queued or gaps
// pending; it is released when it has neither.
type streamState struct {
	lane   uint8
	idle   bool // listed in Queue.idle
	queued int  // items of the stream in the lanes
	gaps   []gapRange
}

// gapRange is a half-open offset range [from,to); a stream's ranges are
// sorted, disjoint and never adjacent.
type gapRange struct{ from, to int64 }

// maxFree bounds the recycled stream states a queue keeps.
const maxFree = 256

// NewQueue returns an empty queue configured by opts: it uses QueueMessages,
// ControlBytes, EncodeGap (required; NewQueue panics without it) and OnDrop.
func NewQueue(opts Options) *Queue {
	opts = opts.withDefaults()
	q := &Queue{
		limit:     opts.QueueMessages,
		hardLimit: 4 * opts.QueueMessages,
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
// AppendBatch would return. The consumer waits on it, then calls
// AppendBatch until it returns no frames.
func (q *Queue) Ready() <-chan struct{} { return q.ready }

func (q *Queue) signal() {
	select {
	case q.ready <- struct{}{}:
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
		if q.others >= q.hardLimit {
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
		if q.others >= q.hardLimit {
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
	r := &q.lanes[lane]
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
		r := &q.lanes[l]
		if r.evictable == 0 || oldOnly && r.dropOld == 0 {
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
		q.dropping = *it
		q.onDrop(&q.dropping)
		q.dropping = Item{}
	}
	st := q.stream(it.Stream)
	st.gaps = addGap(st.gaps, it.Offset)
	if st.queued == 0 {
		q.markIdle(it.Stream, st)
	}
	// Last: whoever reads the new count sees OnDrop's effects too.
	q.drops.Add(1)
}

func (q *Queue) markIdle(s Stream, st *streamState) {
	if !st.idle {
		st.idle = true
		q.idle = append(q.idle, s)
	}
}

// The stream last looked up is remembered (lastKey, lastSt), and kept in
// streams while it has nothing to do: a busy subscription's queue empties
// at every batch, and would otherwise hash its stream's key to forget it
// and again to make it anew at the next push. At most that one stream is
// kept without items or gaps; it is released once another takes its place.

// lookup returns the state of s, nil when it has none; push calls it
// first, then remember once the item is queued.
func (q *Queue) lookup(s Stream) *streamState {
	if q.lastSt != nil && q.lastKey == s {
		return q.lastSt
	}
	return q.streams[s]
}

// remember makes st, the state of s, the one last looked up, releasing
// the one it replaces if that has nothing to do. It may release a state,
// so no caller holds another state's pointer across it.
func (q *Queue) remember(s Stream, st *streamState) {
	old, oldKey := q.lastSt, q.lastKey
	if old == st {
		return
	}
	q.lastKey, q.lastSt = s, st
	if old != nil && old.queued == 0 && len(old.gaps) == 0 {
		// A stale entry of it in idle is skipped (take).
		q.release(oldKey, old)
	}
}

// stream returns the state of s, making it if needed.
func (q *Queue) stream(s Stream) *streamState {
	if q.streams == nil {
		q.streams = streamMaps.Get().(map[Stream]*streamState)
	}
	st := q.streams[s]
	if st == nil {
		if n := len(q.free); n > 0 {
			st = q.free[n-1]
			q.free[n-1] = nil
			q.free = q.free[:n-1]
		} else {
			st = new(streamState)
		}
		q.streams[s] = st
	}
	return st
}

// release forgets s, whose state has nothing queued and no gaps, unless
// it is the one last looked up (kept, see above).
func (q *Queue) release(s Stream, st *streamState) {
	if st == q.lastSt {
		return
	}
	delete(q.streams, s)
	if len(q.free) < maxFree {
		*st = streamState{gaps: st.gaps[:0]}
		q.free = append(q.free, st)
	}
}

// streamMaps holds the empty stream maps of idle queues (see Shrink).
var streamMaps = sync.Pool{New: func() any { return make(map[Stream]*streamState) }}

// Shrink lets an empty queue (no items, no pending gaps) give back what it
// keeps for its next items: the state of the stream last looked up and
// its map of streams, which go back to a pool shared by all queues. A
// session's writer calls it when it parks, so that an idle session holds
// neither; a queue with anything to do is left as it is.
func (q *Queue) Shrink() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.msgs+q.others > 0 || len(q.idle) > 0 {
		return
	}
	if st := q.lastSt; st != nil {
		key := q.lastKey
		q.lastSt, q.lastKey = nil, Stream{}
		q.release(key, st)
	}
	if q.streams != nil && len(q.streams) == 0 {
		streamMaps.Put(q.streams)
		q.streams = nil
	}
}

// addGap adds offset off to the sorted ranges gs, merging contiguous ones.
func addGap(gs []gapRange, off int64) []gapRange {
	// Drops come mostly in offset order: search from the end.
	i := len(gs)
	for i > 0 && gs[i-1].from > off {
		i--
	}
	// gs[:i] start at or before off; gs[i:] start after it.
	if i > 0 && off < gs[i-1].to {
		return gs // already recorded
	}
	joinPrev := i > 0 && gs[i-1].to == off
	joinNext := i < len(gs) && gs[i].from == off+1
	switch {
	case joinPrev && joinNext:
		gs[i-1].to = gs[i].to
		return append(gs[:i], gs[i+1:]...)
	case joinPrev:
		gs[i-1].to = off + 1
	case joinNext:
		gs[i].from = off
	default:
		gs = append(gs, gapRange{})
		copy(gs[i+1:], gs[i:])
		gs[i] = gapRange{off, off + 1}
	}
	return gs
}

// AppendBatch takes queued frames and pending gaps and appends them to dst,
// separated by '\n', while the appended bytes stay within maxBytes (the
// first frame is taken whatever its size). Control frames come first, then
// the lanes from the highest, then the gaps of streams with nothing queued.
// It returns the extended buffer and the number of frames appended; 0 means
// there is nothing to write.
func (q *Queue) AppendBatch(dst []byte, maxBytes int) ([]byte, int) {
	b := batch{buf: dst, start: len(dst), max: maxBytes, maxFrames: q.maxFrames}
	q.take(&b)
	return b.buf, b.n
}

// AppendFrames is AppendBatch without copying: it appends to vec the
// pieces of the batch in order (the frames themselves, shared, and a "\n"
// between each two), encoding only gap frames into scratch. It returns the
// extended vec and scratch, the number of frames and the batch's length
// in bytes. The pieces stay valid after the call (queued frames are never
// modified), so they may be written without the queue's lock.
func (q *Queue) AppendFrames(vec [][]byte, scratch []byte, maxBytes int) ([][]byte, []byte, int, int) {
	b := batch{buf: scratch, start: len(scratch), max: maxBytes, maxFrames: q.maxFrames, pieces: true, vec: vec}
	q.take(&b)
	return b.vec, b.buf, b.n, b.size
}

// take fills b from the queue (AppendBatch, AppendFrames).
func (q *Queue) take(b *batch) {
	q.mu.Lock()
	defer q.mu.Unlock()
	clear(q.taken)
	q.taken = q.taken[:0]

	for q.control.n > 0 {
		if !b.add(q.control.at(0).it.Frame) {
			return
		}
		q.ctlBytes -= len(q.control.at(0).it.Frame)
		q.control.popFront()
		q.others--
	}

	for l := numLanes - 1; l >= 0; l-- {
		r := &q.lanes[l]
		for r.n > 0 {
			sl := r.at(0)
			it, st := &sl.it, sl.st
			// A stream's pending gaps before this offset go first, and
			// a frame that depended on what they stand for is replaced.
			gapped := false
			for len(st.gaps) > 0 && st.gaps[0].from < it.Offset {
				if !q.addGapFrame(b, it.Stream, st) {
					return
				}
				gapped = true
			}
			if gapped {
				if f, ok := it.Ref.(Fallback); ok {
					it.Frame = f.FallbackFrame()
				}
			}
			if !q.addItem(b, it) {
				return
			}
			if it.Ref != nil {
				q.taken = append(q.taken, it.Ref)
			}
			if it.isMessage() {
				q.msgs--
			} else {
				q.others--
			}
			r.count(it, -1)
			s := it.Stream
			r.popFront()
			st.queued--
			if st.queued == 0 {
				if len(st.gaps) == 0 {
					q.release(s, st)
				} else {
					q.markIdle(s, st)
				}
			}
		}
	}

	// Gaps of streams with nothing queued go out as soon as there is room.
	i := 0
	for ; i < len(q.idle); i++ {
		s := q.idle[i]
		st := q.streams[s]
		if st == nil || !st.idle {
			continue // stale entry
		}
		if st.queued > 0 {
			// Its gaps go before its next message, or it is listed again
			// when it empties.
			st.idle = false
			continue
		}
		for len(st.gaps) > 0 {
			if !q.addGapFrame(b, s, st) {
				break
			}
		}
		if len(st.gaps) > 0 {
			break // no room: keep it and the rest for the next batch
		}
		st.idle = false
		q.release(s, st)
	}
	rest := copy(q.idle, q.idle[i:])
	clear(q.idle[rest:])
	q.idle = q.idle[:rest]
	return
}

// Refs returns the non-nil Refs of the items the last AppendBatch took, in
// order. The slice is valid until the next AppendBatch; only the consumer
// (the one goroutine calling AppendBatch) may call Refs.
func (q *Queue) Refs() []any { return q.taken }

// addGapFrame encodes the first pending gap of st into b if it fits.
func (q *Queue) addGapFrame(b *batch, s Stream, st *streamState) bool {
	mark := len(b.buf)
	if b.pieces {
		g := st.gaps[0]
		b.buf = q.encodeGap(b.buf, s, g.from, g.to)
		if !b.add(b.buf[mark:len(b.buf):len(b.buf)]) {
			b.buf = b.buf[:mark]
			return false
		}
		q.gapsSent++
		st.gaps = st.gaps[:copy(st.gaps, st.gaps[1:])]
		return true
	}
	if b.n > 0 {
		b.buf = append(b.buf, '\n')
	}
	g := st.gaps[0]
	b.buf = q.encodeGap(b.buf, s, g.from, g.to)
	if b.n > 0 && (len(b.buf)-b.start > b.max || b.maxFrames > 0 && b.n >= b.maxFrames) {
		b.buf = b.buf[:mark]
		return false
	}
	b.n++
	q.gapsSent++
	st.gaps = st.gaps[:copy(st.gaps, st.gaps[1:])]
	return true
}

// addItem adds a stream item's frame to b, after its FramePrefix if the
// queue has one, reporting whether it fit.
func (q *Queue) addItem(b *batch, it *Item) bool {
	if q.prefix == nil || b.pieces {
		return b.add(it.Frame)
	}
	mark := len(b.buf)
	if b.n > 0 {
		if b.maxFrames > 0 && b.n >= b.maxFrames {
			return false
		}
		b.buf = append(b.buf, '\n')
	}
	b.buf = q.prefix(b.buf, it)
	b.buf = append(b.buf, '\n')
	b.buf = append(b.buf, it.Frame...)
	if b.n > 0 && len(b.buf)-b.start > b.max {
		b.buf = b.buf[:mark]
		return false
	}
	b.n++
	return true
}

// batch is a text frame being built by AppendBatch, or listed in pieces by
// AppendFrames.
type batch struct {
	buf   []byte // the frame (AppendBatch), or the gap frames (AppendFrames)
	start int    // len(buf) before the batch
	max   int
	// maxFrames bounds n when positive.
	maxFrames int
	n         int // frames appended

	pieces bool     // AppendFrames: list the pieces in vec
	vec    [][]byte // the pieces
	size   int      // their bytes
}

// newline is the piece between two frames of an AppendFrames batch.
var newline = []byte{'\n'}

// add appends frame if it fits, reporting whether it did.
func (b *batch) add(frame []byte) bool {
	if b.pieces {
		if b.n > 0 {
			if b.size+1+len(frame) > b.max || b.maxFrames > 0 && b.n >= b.maxFrames {
				return false
			}
			b.vec = append(b.vec, newline)
			b.size++
		}
		b.vec = append(b.vec, frame)
		b.size += len(frame)
		b.n++
		return true
	}
	if b.n > 0 {
		if len(b.buf)-b.start+1+len(frame) > b.max || b.maxFrames > 0 && b.n >= b.maxFrames {
			return false
		}
		b.buf = append(b.buf, '\n')
	}
	b.buf = append(b.buf, frame...)
	b.n++
	return true
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

// slot is one ring position; an item evicted from the middle of a ring
// leaves a dead slot that AppendBatch skips.
type slot struct {
	it   Item
	st   *streamState // the item's stream; valid while the item is queued
	dead bool
}

// ring is a growable FIFO of slots whose first and last slots are live
// whenever it is not empty.
type ring struct {
	buf  []slot // len is zero or a power of two
	head int
	n    int // slots in use from head, live and dead
	live int
	// Live message items by policy, to skip lanes quickly when evicting.
	evictable int // DropOld and DropNew
	dropOld   int
}

func (r *ring) at(i int) *slot { return &r.buf[(r.head+i)&(len(r.buf)-1)] }

func (r *ring) count(it *Item, d int) {
	if !it.isMessage() {
		return
	}
	switch it.Policy {
	case DropOld:
		r.dropOld += d
		r.evictable += d
	case DropNew:
		r.evictable += d
	}
}

func (r *ring) push(it Item, st *streamState) {
	if r.n == len(r.buf) {
		r.grow()
	}
	*r.at(r.n) = slot{it: it, st: st}
	r.n++
	r.live++
}

func (r *ring) grow() {
	if len(r.buf) == 0 {
		r.buf = ringPool.Get().(*[minRing]slot)[:]
		r.head = 0
		return
	}
	buf := make([]slot, 2*len(r.buf))
	for i := 0; i < r.n; i++ {
		buf[i] = *r.at(i)
	}
	r.buf = buf
	r.head = 0
}

// minRing is the slots of a ring's first buffer: small, since most
// sessions queue little.
const minRing = 4

// ringPool holds the first buffers of all rings. A ring gives its buffer
// back once it is empty, unless it has grown past minRing slots (a busy
// session keeps its larger one): an idle session then holds no slots, and
// one that is sent a message now and then borrows them only meanwhile.
var ringPool = sync.Pool{New: func() any { return new([minRing]slot) }}

// emptied gives the buffer of an empty ring of minRing slots back to
// ringPool; every slot of an empty ring is zero.
func (r *ring) emptied() {
	if r.n == 0 && len(r.buf) == minRing {
		ringPool.Put((*[minRing]slot)(r.buf))
		r.buf, r.head = nil, 0
	}
}

// popFront removes the first slot, which is live.
func (r *ring) popFront() {
	*r.at(0) = slot{}
	r.head = (r.head + 1) & (len(r.buf) - 1)
	r.n--
	r.live--
	r.trimHead()
	r.emptied()
}

func (r *ring) trimHead() {
	for r.n > 0 && r.at(0).dead {
		*r.at(0) = slot{}
		r.head = (r.head + 1) & (len(r.buf) - 1)
		r.n--
	}
}

func (r *ring) trimTail() {
	for r.n > 0 && r.at(r.n-1).dead {
		*r.at(r.n - 1) = slot{}
		r.n--
	}
}

// remove takes the live item at i out of the ring and returns it.
func (r *ring) remove(i int) Item {
	s := r.at(i)
	it := s.it
	*s = slot{dead: true}
	r.live--
	switch dead := r.n - r.live; {
	case i == 0:
		r.trimHead()
	case i == r.n-1:
		r.trimTail()
	case dead > r.live && dead >= 16:
		r.compact()
	}
	r.emptied()
	return it
}

// compact moves the live slots together, keeping their order.
func (r *ring) compact() {
	w := 0
	for i := 0; i < r.n; i++ {
		s := r.at(i)
		if s.dead {
			*s = slot{}
			continue
		}
		if w != i {
			*r.at(w) = *s
			*s = slot{}
		}
		w++
	}
	r.n = w
}
