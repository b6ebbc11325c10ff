package session

import "sync"

// Deferred wakes. A publisher's frame is fanned out by its session's reader
// to every matching session; waking each of their writers per message
// costs a goroutine hand-off per delivery and lets each writer write as
// little as one message per system call. A Deferral collects the sessions
// that were sent items through it (SendDeferred) without waking their
// writers, and wakes each once when it is flushed. The reader that owns
// it flushes it before every read of its socket: once the frames of one
// read have been handled, every writer they queued for finds all of that
// read's messages and writes them in one batch.
//
// A session accepted by Accept flushes its own Deferral (Session.Deferral)
// before each read of its socket, before waiting for the next frame, and
// when its reader ends; a session over another connection flushes it after
// each frame. A handler that is about to wait on something other than its
// socket (a network round trip, room in a full pipeline) flushes it first
// (Flush), so that what it queued is not held for the wait.
//
// A session is in at most one Deferral's list at a time: a session already
// waiting for another reader's flush is not listed again, and its items go
// out with that flush. What is queued is never held longer than the
// handling of one read of some publisher's socket, plus any wait that
// publisher's handler did not flush before.

// Deferral is a set of sessions whose writers are woken at the next Flush.
// Its methods are safe for concurrent use; a Deferral is normally used by
// the one reader goroutine that flushes it.
type Deferral struct {
	mu      sync.Mutex  // guards pending
	pending *[]*Session // from listPool while sessions are listed, else nil
}

// listPool holds the lists of Deferrals between flushes, so that a session
// that published once holds no list.
var listPool = sync.Pool{New: func() any { return new([]*Session) }}

// SendDeferred is Send, except that when the item is queued (or dropped
// as a gap) the session's writer is not woken until d is flushed. A nil d
// makes it Send. Items that close the session (an overflow) act at once.
func (s *Session) SendDeferred(it Item, d *Deferral) bool {
	if d == nil {
		return s.Send(it)
	}
	out := s.q.pushQuiet(it)
	switch out {
	case Queued, Dropped:
		// Most items of a fan-out find the session listed already: a load
		// spares them the locked compare-and-swap.
		if !s.deferred.Load() && s.deferred.CompareAndSwap(false, true) {
			d.mu.Lock()
			if d.pending == nil {
				d.pending = listPool.Get().(*[]*Session)
			}
			*d.pending = append(*d.pending, s)
			d.mu.Unlock()
		}
		return out == Queued
	}
	s.pushed(out)
	return false
}

// Flush wakes the writer of every session sent items through d since the
// last Flush.
func (d *Deferral) Flush() {
	d.mu.Lock()
	lp := d.pending
	d.pending = nil
	d.mu.Unlock()
	if lp == nil {
		return
	}
	for _, s := range *lp {
		// The mark goes before the wake: an item queued after it is
		// listed again, one queued before it is seen by this wake.
		s.deferred.Store(false)
		s.q.signal()
		s.wake()
	}
	clear(*lp)
	if cap(*lp) <= maxPooledList {
		*lp = (*lp)[:0]
		listPool.Put(lp)
	}
}

// maxPooledList bounds the lists kept in listPool (512 KiB each; the pool
// itself lets go of them at garbage collections).
const maxPooledList = 1 << 16

// Deferral returns the session's own Deferral, which its reader flushes
// (see above). A handler passes it to SendDeferred for the items its frame
// fans out to other sessions.
func (s *Session) Deferral() *Deferral { return &s.deferral }

// flushDeferred flushes the session's own Deferral; the reader calls it
// before it may wait for its socket.
func (s *Session) flushDeferred() { s.deferral.Flush() }
