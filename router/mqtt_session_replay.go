package router

// A persistent MQTT session's replay, paced by its client.
//
// A resume replays from the log through the catch-up (subscription.
// catchUp), which waits for room in the session's queue (SendWait). An
// MQTT session's writer empties its queue at once, though: the QoS 1 and
// 2 deliveries the in-flight window has no room for go to its held list
// (mqtt_write.go), whose bounds (the queue's bound in count,
// MQTTOptions.MaxHeldBytes in bytes) drop the oldest. A backlog past them
// would lose records that a replay, unlike a live delivery, can wait for.
//
// So a replayed delivery is queued as a Reliable item (the queue never
// drops it, and it leaves the bound to live deliveries) with its prefix
// line marked (framePrefix), and the writer never drops it from the held
// list, where the bounds are the live deliveries' alone (a replay going on
// never pushes a live one out; the oldest live one goes past them, counted
// as before). The replay paces itself
// by the session's replay budget: the replayed deliveries queued or held
// and not written yet are at most the queue's bound, and their bytes at
// most MaxHeldBytes (one delivery always goes). Every subscription of the
// session that replays at once takes from the one budget; the writer gives
// back what it writes, so the catch-up goes on as the client acknowledges
// and the window lets deliveries go. A window that never opens leaves the
// catch-up waiting, with the session: its keepalive and the connection's
// end stop both (the wait ends with the session's context).
//
// Only a persistent session replays (restoreSession), and only it has the
// prefix lines that carry the mark; a session without them replays as
// before (sendReplayed).

import (
	"context"
	"sync"

	"github.com/switchyard/switchyard/session"
)

// replayBudget bounds the replayed deliveries of a session queued or held
// and not written yet; see the file comment.
type replayBudget struct {
	mu    sync.Mutex // a leaf
	n     int        // the deliveries taken and not given back
	bytes int        // their bytes
	// freed, when not nil, is closed by the next give: a catch-up waits
	// on it.
	freed chan struct{}
}

// replayTally counts the replayed deliveries the writer wrote.
type replayTally struct{ n, bytes int }

// add takes n deliveries of size bytes whatever the bounds.
func (b *replayBudget) add(n, size int) {
	b.mu.Lock()
	b.n += n
	b.bytes += size
	b.mu.Unlock()
}

// give gives back what the writer wrote and wakes the catch-ups waiting.
func (b *replayBudget) give(t replayTally) {
	b.mu.Lock()
	b.n -= t.n
	b.bytes -= t.bytes
	if b.freed != nil {
		close(b.freed)
		b.freed = nil
	}
	b.mu.Unlock()
}

// wait waits until ok, called under b.mu, reports true (and then takes
// what it did), for ctx or the session's end.
func (b *replayBudget) wait(ctx context.Context, done <-chan struct{}, ok func() bool) error {
	for {
		b.mu.Lock()
		if ok() {
			b.mu.Unlock()
			return nil
		}
		if b.freed == nil {
			b.freed = make(chan struct{})
		}
		freed := b.freed
		b.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		case <-done:
			return session.ErrClosed
		}
	}
}

// replayBounds are the bounds of the session's replay budget: the queue's
// bound and MaxHeldBytes.
func (s *mqttSession) replayBounds() (n, bytes int) {
	return s.rt.opts.Session.QueueMessages, s.rt.mq.opts.MaxHeldBytes
}

// paced reports whether the session's replay is paced by its budget: it
// is a persistent one, whose queue marks replayed deliveries.
func (s *mqttSession) paced() bool { return s.trk != nil }

// replayItem makes it a replayed delivery: a Reliable item, which
// framePrefix marks for the writer.
func replayItem(it session.Item) session.Item {
	it.Policy = session.Reliable
	return it
}

// sendReplayed queues one replayed delivery once the budget has room for
// it, and the queue (as SendWait), waiting for ctx or the session's end. A
// frame MQTT cannot carry (empty: replayFrame) is queued as before. A
// subscription that ended while it waited (ended: an UNSUBSCRIBE) queues
// nothing more [MQTT-3.10.4-2]: errEnded.
func (s *mqttSession) sendReplayed(ctx context.Context, it session.Item, ended func() bool) error {
	if !s.paced() || len(it.Frame) == 0 {
		return s.cn.sess.SendWait(ctx, it)
	}
	b := &s.trk.replay
	maxN, maxBytes := s.replayBounds()
	size := len(it.Frame)
	err := b.wait(ctx, s.cn.sess.Done(), func() bool {
		if b.n >= maxN || b.n > 0 && b.bytes+size > maxBytes {
			return false
		}
		b.n++
		b.bytes += size
		return true
	})
	if err != nil {
		return err
	}
	if err := s.cn.sess.WaitRoom(ctx, 1); err != nil {
		b.give(replayTally{1, size})
		return err
	}
	if ended() {
		b.give(replayTally{1, size})
		return errEnded
	}
	if !s.cn.sess.Send(replayItem(it)) {
		// A Reliable item is refused only by a session that is ending.
		b.give(replayTally{1, size})
		return session.ErrClosed
	}
	return nil
}

// takeLast takes from the budget, in one step, the last buffered
// deliveries of a catch-up going live (drainPending, with the
// subscription's lock held), when they leave room to spare: headroom
// deliveries (capped at the bound) and half the bytes bound, as
// waitReplayRoom waits for. It reports false, taking nothing, when they do
// not; the catch-up then queues them paced (sendReplayed). Taking them in
// one step keeps several catch-ups going live at once within the bounds.
func (s *mqttSession) takeLast(its []session.Item, headroom int) bool {
	if !s.paced() {
		return true
	}
	n, size := 0, 0
	for _, it := range its {
		if len(it.Frame) > 0 {
			n++
			size += len(it.Frame)
		}
	}
	b := &s.trk.replay
	maxN, maxBytes := s.replayBounds()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.n+n+min(headroom, maxN) > maxN || b.bytes+size > maxBytes/2 {
		return false
	}
	b.n += n
	b.bytes += size
	return true
}

// sendTaken queues the deliveries takeLast took, without waiting, and
// reports how many were queued.
func (s *mqttSession) sendTaken(its []session.Item) int {
	queued := 0
	for _, it := range its {
		if !s.paced() || len(it.Frame) == 0 {
			if s.cn.sess.Send(it) {
				queued++
			}
			continue
		}
		if !s.cn.sess.Send(replayItem(it)) {
			s.trk.replay.give(replayTally{1, len(it.Frame)})
			continue
		}
		queued++
	}
	return queued
}

// waitReplayRoom waits until the budget has room for n more deliveries
// (capped at the bound) with half its bytes free, for ctx or the session's
// end.
func (s *mqttSession) waitReplayRoom(ctx context.Context, n int) error {
	if !s.paced() {
		return nil
	}
	b := &s.trk.replay
	maxN, maxBytes := s.replayBounds()
	n = min(n, maxN)
	return b.wait(ctx, s.cn.sess.Done(), func() bool {
		return b.bytes <= maxBytes/2 && maxN-b.n >= n
	})
}

// wroteReplayed notes a replayed delivery of size bytes the writer wrote
// (or skipped); writeDone gives them back.
func (s *mqttSession) wroteReplayed(size int) {
	s.trk.written.n++
	s.trk.written.bytes += size
}

// writeDone gives back to the budget the replayed deliveries the writer
// wrote in its batch.
func (s *mqttSession) writeDone() {
	if s.trk == nil || s.trk.written.n == 0 {
		return
	}
	s.trk.replay.give(s.trk.written)
	s.trk.written = replayTally{}
}
