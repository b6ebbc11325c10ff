package client

import "time"

// Backpressure. A plain subscription whose handler falls behind would
// otherwise make the reader drop records while the gateway still holds
// them: during a replay after an outage the gateway sends as fast as the
// socket takes them, and a reader that never slows down turns its pacing
// into client_queue_full gaps. So when a plain subscription has
// MaxPending deliveries waiting, the reader stops reading the connection
// until the dispatcher makes room, for up to MaxPendingWait. The socket's
// flow control then holds the gateway back, and its queue applies the
// subscription's on_full policy, which the gateway reports as gaps of its
// own; a resume from positions after a reconnect loses nothing the log
// still holds.
//
// The reader must not wait for a handler that waits for the reader: a
// request's reply (a handler's Publish, Ack or Subscribe) may be behind the
// records in the socket. While any request waits for its reply the reader
// keeps reading and lets a subscription queue up to twice MaxPending.
//
// A wait that reaches MaxPendingWait makes the subscription shed: the
// reader drops its records at once (reported as a gap when the handler
// drains) until the handler has made room again, so a stuck handler does
// not stop the connection for good. The liveness check (liveness.go) does
// not count a missing pong while the reader waits here.

// roomFor reports whether a delivery for the plain subscription s may be
// queued, waiting for the dispatcher to make room as described above.
// false means the record is to be dropped. It runs on the reader
// goroutine.
func (c *Client) roomFor(s *Subscription) bool {
	limit := int64(s.opts.MaxPending)
	p := s.pending.Load()
	if p < limit {
		if s.shedding.Load() {
			s.shedding.Store(false)
		}
		return true
	}
	if s.opts.MaxPendingWait < 0 {
		return false
	}
	if c.waiters.Load() > 0 {
		return p < 2*limit
	}
	if s.shedding.Load() {
		return false
	}
	c.stalls.Add(1)
	c.stalled.Store(true)
	s.waiting.Store(true)
	defer func() {
		s.waiting.Store(false)
		c.stalled.Store(false)
	}()
	t := time.NewTimer(s.opts.MaxPendingWait)
	defer t.Stop()
	for {
		// waiting is set before pending is read again, and the dispatcher
		// lowers pending before it reads waiting: one of the two sees the
		// other.
		p := s.pending.Load()
		switch {
		case p < limit:
			return true
		case c.waiters.Load() > 0:
			return p < 2*limit
		}
		select {
		case <-s.room:
		case <-c.callWake:
		case <-t.C:
			s.shedding.Store(true)
			return false
		case <-s.done:
			return false
		case <-c.ctx.Done():
			return false
		}
	}
}

// madeRoom tells a reader waiting in roomFor that s has a free place. The
// dispatcher calls it after lowering s.pending.
func (s *Subscription) madeRoom() {
	if s.waiting.Load() {
		select {
		case s.room <- struct{}{}:
		default:
		}
	}
}

// callWaiting is called, with c.mu held, when a request that a caller
// waits on is registered: a reader waiting in roomFor must go on reading
// until its reply is read.
func (c *Client) callWaiting() {
	c.waiters.Add(1)
	select {
	case c.callWake <- struct{}{}:
	default:
	}
}

// replied is called, with c.mu held, when cl leaves c.pending: its reply
// was read, or it failed or was given up. Counting ends here rather than
// when the caller wakes, so that the reader does not read on for a reply
// it already has.
func (c *Client) replied(cl *call) {
	if cl.done != nil {
		c.waiters.Add(-1)
	}
}
