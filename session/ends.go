package session

// The end of a session, in steps: its close is requested (Closing), its
// reader returns, its writer closes the connection, and Run returns
// (Done). Each step is a bit of Session.ends, set once; the session's own
// goroutines look at the bits, and a goroutine that must block until a
// step is taken asks endChan for a channel closed at that step, made by
// the first that asks. The close state (the requested close's code,
// reason and flush, and why the session ended) is made by the first close
// or cause. A session nobody waits on and that has not ended holds
// neither: four channels and the close state were about 0.5 KiB of every
// idle session.
//
// # Concurrency
//
// Session.mu guards Session.end; a step's bit is set and its channel
// closed under it, and endChan makes a channel under it only while the
// bit is clear, so a channel handed out is always closed at its step.
// Session.mu is a leaf (see the lock order in doc.go).

import (
	"math/bits"

	"github.com/coder/websocket"
)

// endStep is one step of a session's end: a bit of Session.ends.
type endStep uint32

const (
	stepClosing     endStep = 1 << iota // a close was requested (Closing)
	stepReadEnded                       // the reader has returned
	stepWriterEnded                     // the writer has closed the connection; no writer starts again
	stepDone                            // Run has returned (Done)
	numSteps        = iota
)

// endState is a session's close state and the channels of the waiters of
// its steps, made on first use (see above).
type endState struct {
	// closing: a close was requested (closeWith); the fields below it
	// say how.
	closing  bool
	flush    bool
	causeSet bool
	code     websocket.StatusCode
	reason   string
	cause    error
	// waits[i] is closed at step 1<<i; nil until someone waits.
	waits [numSteps]chan struct{}
}

// closedChan is a closed channel: what endChan returns for a step taken.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// reached reports whether the session has taken step.
func (s *Session) reached(step endStep) bool {
	return endStep(s.ends.Load())&step != 0
}

// endChan returns a channel closed once the session has taken step.
func (s *Session) endChan(step endStep) <-chan struct{} {
	if s.reached(step) {
		return closedChan
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reached(step) {
		return closedChan
	}
	w := &s.endLocked().waits[bits.TrailingZeros32(uint32(step))]
	if *w == nil {
		*w = make(chan struct{})
	}
	return *w
}

// take records that the session has taken step, which it takes once, and
// wakes its waiters.
func (s *Session) take(step endStep) {
	s.mu.Lock()
	s.ends.Or(uint32(step))
	if s.end != nil {
		if w := s.end.waits[bits.TrailingZeros32(uint32(step))]; w != nil {
			close(w)
		}
	}
	s.mu.Unlock()
}

// endLocked returns the session's close state, made on first use; the
// caller holds s.mu.
func (s *Session) endLocked() *endState {
	if s.end == nil {
		s.end = new(endState)
	}
	return s.end
}

// causeLocked returns why the session ended, as far as known; the caller
// holds s.mu.
func (s *Session) causeLocked() error {
	if s.end == nil {
		return nil
	}
	return s.end.cause
}
