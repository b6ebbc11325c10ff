package session

import "time"

// Write coalescing (Options.WriteDelay). Without it the writer writes what
// is queued as soon as it wakes, so at moderate rates every delivery is one
// frame and one write system call. With it, the writer that found frames
// waits up to WriteDelay for more before it writes them, and stops waiting
// as soon as a batch's worth (WriteDelayFrames) is queued, a control item
// (a reply, which nobody should wait for) is queued, or the session ends.
// A batch then holds at most WriteDelayFrames frames. Order, drops and gaps
// are the queue's as without coalescing: the writer only takes later.

// linger waits, with coalescing on, until the queue is due to be written or
// WriteDelay has passed; it reports false when the session is ending (the
// caller stops draining and the close path flushes). It runs on the writer
// goroutine.
func (s *Session) linger() bool {
	q := s.q
	select {
	case <-q.full: // a stale signal: the conditions are checked below
	default:
	}
	// The end steps are taken before kick signals full (kick), so a
	// signal drained above was for a step seen here, and one sent after
	// this check ends the wait below. No end channel is made: an idle
	// session holds none (ends.go).
	if s.reached(stepClosing | stepReadEnded) {
		return false
	}
	if q.flushDue() {
		return true
	}
	if s.delay == nil {
		s.delay = time.NewTimer(s.opts.WriteDelay)
	} else {
		s.delay.Reset(s.opts.WriteDelay)
	}
	defer s.delay.Stop()
	select {
	case <-s.delay.C:
	case <-q.full:
	}
	return !s.reached(stepClosing | stepReadEnded)
}
