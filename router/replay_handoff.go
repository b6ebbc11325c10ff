package router

// The edges of a catch-up (subscription.catchUp): a topic deleted while it
// is replayed, and the switch from the log to the live tail.
//
// A deleted topic: the replay of that incarnation stops where it is (what
// the log still held of it after the topic_deleted frame is gone with it),
// its buffered live records are dropped, and the catch-up forgets how far
// it read each of its partitions, so that a topic created again under the
// same name reaches the subscription from its offset 0: live, from the
// switch-over buffer, or from the log when the buffer overflowed.
//
// The switch to live: an engine may return a record from the log before
// its observers are told of it (engine.SeenReader: "or are being told
// of"; a Read of a shared store ahead of the node's tail), so a record the
// catch-up read can still arrive from the live tail after the switch. The
// subscription therefore keeps, per partition the catch-up read, the next
// offset it expects (a floorSet) and drops live records below it. A
// partition's floor is passed by its first live record at or above it (the
// tail announces a partition in offset order); once every floor is passed
// the set is dropped and a delivery costs one atomic load again. Until
// then it costs a map lookup and no allocation or lock.

import (
	"sync/atomic"

	"github.com/switchyard/switchyard/engine"
)

// floorSet is the next offset a subscription expects on each partition its
// catch-up read. It is not changed once published (subscription.floors);
// a topic's deletion publishes a copy without it.
type floorSet struct {
	m    map[partKey]*floor
	left atomic.Int64 // floors not passed yet
}

type floor struct {
	next   int64
	passed atomic.Bool
}

// newFloorSet returns the floors of a catch-up that ended at next, nil
// when none can drop anything.
func newFloorSet(next map[partKey]int64) *floorSet {
	f := &floorSet{m: make(map[partKey]*floor, len(next))}
	for k, n := range next {
		if n > 0 {
			f.m[k] = &floor{next: n}
		}
	}
	if len(f.m) == 0 {
		return nil
	}
	f.left.Store(int64(len(f.m)))
	return f
}

// belowFloor reports whether a live record is one the catch-up gave
// already. Calls for one partition never overlap (live's contract).
func (s *subscription) belowFloor(rec *engine.Record) bool {
	f := s.floors.Load()
	if f == nil {
		return false
	}
	fl := f.m[partKey{rec.Topic, rec.Partition}]
	switch {
	case fl == nil:
		return false
	case rec.Offset < fl.next:
		return true
	}
	if !fl.passed.Load() && !fl.passed.Swap(true) && f.left.Add(-1) == 0 {
		s.floors.CompareAndSwap(f, nil)
	}
	return false
}

// dropFloors forgets the floors of a deleted topic: a new incarnation
// starts at offset 0. Caller holds s.mu.
func (s *subscription) dropFloors(topic string) {
	f := s.floors.Load()
	if f == nil {
		return
	}
	nf := &floorSet{m: make(map[partKey]*floor, len(f.m))}
	left := int64(0)
	for k, fl := range f.m {
		if k.topic == topic {
			continue
		}
		nf.m[k] = &floor{next: fl.next}
		if fl.passed.Load() {
			nf.m[k].passed.Store(true)
		} else {
			left++
		}
	}
	if len(nf.m) == len(f.m) {
		return
	}
	if left == 0 {
		nf = nil
	} else {
		nf.left.Store(left)
	}
	s.floors.CompareAndSwap(f, nf) // fails only when every floor was passed meanwhile
}

// deletedWhileCatchingUp records that topic was deleted during the
// catch-up: its buffered live records go, and the catch-up stops reading
// it (takeDeleted). Caller holds s.mu.
func (s *subscription) deletedWhileCatchingUp(topic string) {
	kept := s.pending[:0]
	for _, rec := range s.pending {
		if rec.Topic != topic {
			kept = append(kept, rec)
		}
	}
	clear(s.pending[len(kept):])
	s.pending = kept
	if s.deleted == nil {
		s.deleted = make(map[string]struct{})
	}
	s.deleted[topic] = struct{}{}
	s.deletions.Add(1)
}

// takeDeleted moves the topics deleted since its last call into gone and
// forgets how far the catch-up read their partitions. Caller holds s.mu.
func (s *subscription) takeDeleted(next map[partKey]int64, gone map[string]bool) {
	for topic := range s.deleted {
		gone[topic] = true
		for k := range next {
			if k.topic == topic {
				delete(next, k)
			}
		}
	}
	clear(s.deleted)
}

// replayDeleted reports whether topic was deleted since the catch-up last
// took the deletions (gen: s.deletions then); the check takes no lock
// unless some topic was.
func (s *subscription) replayDeleted(topic string, gen uint64) bool {
	if s.deletions.Load() == gen {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.deleted[topic]
	return ok
}
