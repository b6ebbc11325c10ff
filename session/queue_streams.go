package session

import "sync"

// The per-stream bookkeeping of a Queue: which lane a stream's items are
// in, how many it has queued, the offsets of its dropped messages not yet
// reported (gap ranges), and the recycling of these states and of the map
// that holds them while a session is idle. Everything here runs under
// Queue.mu.

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
// keeps for its next items: the state of the stream last looked up, its
// map of streams and its empty lanes, which go back to pools shared by
// all queues. A session's writer calls it when it parks, so that an idle
// session holds none of them; a queue with anything to do is left as it
// is.
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
	q.dropLanes()
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
