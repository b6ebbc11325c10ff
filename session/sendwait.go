package session

import (
	"context"
	"errors"
	"time"
)

// SendWait queues a message item like Send, but first waits while the queue
// already holds QueueMessages items or more, so that a producer that can
// wait (a replay reading the log) is paced by the client instead of
// overflowing the queue. It returns ctx's error, or ErrClosed once the
// session is closing. While waiting it checks the queue at short, growing
// intervals (1 ms up to 20 ms); a replay does not need a finer signal.
func (s *Session) SendWait(ctx context.Context, it Item) error {
	if err := s.WaitRoom(ctx, 1); err != nil {
		return err
	}
	if !s.Send(it) {
		if s.reached(stepClosing) {
			return ErrClosed
		}
	}
	return nil
}

// Room reports how many more items the queue takes before it holds
// QueueMessages (0 when it holds that many or more). Control and reliable
// items count too, as they do for SendWait.
func (s *Session) Room() int {
	return max(0, s.opts.QueueMessages-s.q.Len())
}

// WaitRoom waits until Room is at least n (n is capped at QueueMessages),
// polling like SendWait. It returns ctx's error, or ErrClosed once the
// session is closing.
func (s *Session) WaitRoom(ctx context.Context, n int) error {
	n = min(n, s.opts.QueueMessages)
	delay := time.Millisecond
	var t *time.Timer
	for s.Room() < n {
		if t == nil {
			t = time.NewTimer(delay)
			defer t.Stop()
		} else {
			t.Reset(delay)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.endChan(stepDone):
			return ErrClosed
		case <-s.endChan(stepClosing):
			return ErrClosed
		case <-t.C:
		}
		delay = min(2*delay, 20*time.Millisecond)
	}
	return nil
}

// ErrClosed is returned by SendWait once the session is closing.
var ErrClosed = errors.New("session: closed")
