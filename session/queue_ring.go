package session

import "sync"

// The ring of slots behind each lane and the control FIFO of a Queue: a
// growable power-of-two FIFO that can drop an item from its middle (an
// eviction) and compacts its dead slots. Its callers hold Queue.mu.

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

// lanePool holds the empty lanes that parked sessions gave back (Shrink):
// each holds no buffer, its counters zero.
var lanePool = sync.Pool{New: func() any { return new(ring) }}

// newLane makes lane l of q, which has none: the first item of its
// priority since the session was made or last parked.
func (q *Queue) newLane(l int) *ring {
	r := lanePool.Get().(*ring)
	q.lanes[l] = r
	return r
}

// dropLanes gives q's empty lanes that hold no buffer back to lanePool; a
// lane that grew past minRing slots keeps its buffer, and the queue keeps
// it.
func (q *Queue) dropLanes() {
	for l, r := range q.lanes {
		if r != nil && r.n == 0 && r.buf == nil {
			*r = ring{}
			lanePool.Put(r)
			q.lanes[l] = nil
		}
	}
}
