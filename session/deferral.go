package session

import (
	"sync"
	"time"
)

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
// before each read of its socket, before waiting for the next frame, before
// waiting for the read budget (ReadBudget), and when its reader ends; a
// session over another connection flushes it after each frame. A handler
// that is about to wait on something other than its socket (a network
// round trip, room in a full pipeline) flushes it first (Flush), so that
// what it queued is not held for the wait.
//
// A session is in at most one Deferral's list at a time: a session already
// waiting for another reader's flush is not listed again, and its items go
// out with that flush. So a wait that holds one Deferral's flush would
// hold what every other publisher sends to the sessions listed in it too.
// The flushes above cover the waits known to the reader; the bound covers
// every other one by construction: a Deferral flushes itself once its
// oldest listing has waited Options.MaxDeferredWake (a timer armed when
// its list goes from empty to listed, stopped by Flush). No item sent
// through a Deferral, by any publisher, waits longer than that for its
// writer to be woken, whatever its owner waits for. The timer's flush is
// like any other, only earlier (it runs on a goroutine of its own): the
// writers write what is queued by then, and what is sent after it is
// listed again for the next flush.

// Deferral is a set of sessions whose writers are woken at the next Flush,
// or at the latest Options.MaxDeferredWake (for the zero Deferral,
// DefaultMaxDeferredWake) after the first of them was listed. Its methods
// are safe for concurrent use; a Deferral is normally used by the one
// reader goroutine that flushes it. The zero Deferral is ready to use.
type Deferral struct {
	mu      sync.Mutex  // guards following
	pending *[]*Session // from listPool while sessions are listed, else nil
	// late flushes the Deferral maxWait after pending was taken; made on
	// the first listing, so that a session that never publishes has none.
	late *time.Timer
	// maxWait bounds how long a listing waits for a flush; zero:
	// DefaultMaxDeferredWake.
	maxWait time.Duration
}

// NewDeferral returns a Deferral whose wakes wait at most maxWait for a
// flush; DefaultMaxDeferredWake when maxWait is not positive, as for the
// zero Deferral.
func NewDeferral(maxWait time.Duration) *Deferral {
	return &Deferral{maxWait: maxWait}
}

// listPool holds the lists of Deferrals between flushes, so that a session
// that published once holds no list.
var listPool = sync.Pool{New: func() any { return new([]*Session) }}

// SendDeferred is Send, except that when the item is queued (or dropped
// as a gap) the session's writer is not woken until d is flushed, or
// d's bound has passed. A nil d makes it Send. Items that close the
// session (an overflow) act at once.
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
				d.armLocked()
			}
			*d.pending = append(*d.pending, s)
			d.mu.Unlock()
		}
		return out == Queued
	}
	s.pushed(out)
	return false
}

// armLocked starts the bound of a list just taken; caller holds d.mu. It
// runs once per list, not per item: per read of a publisher that fans out.
func (d *Deferral) armLocked() {
	wait := d.maxWait
	if wait <= 0 {
		wait = DefaultMaxDeferredWake
	}
	if d.late == nil {
		d.late = time.AfterFunc(wait, d.Flush)
		return
	}
	d.late.Reset(wait)
}

// Flush wakes the writer of every session sent items through d since the
// last Flush. The timer of the bound calls it too, on a goroutine of its
// own, concurrently with the owner's sends and flushes: each flush takes
// the list under d.mu, so each listing is woken by exactly one of them.
func (d *Deferral) Flush() {
	d.mu.Lock()
	lp := d.pending
	d.pending = nil
	if lp != nil {
		// A timer that fired already finds nothing, or a later list,
		// which it flushes early.
		d.late.Stop()
	}
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
// before it may wait for its socket or the read budget.
func (s *Session) flushDeferred() { s.deferral.Flush() }
