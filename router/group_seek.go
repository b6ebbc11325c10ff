package router

import (
	"context"
	"sync"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// A seek drops a group's leases and delivers a fresh window at once. The
// deliveries of the window it dropped may still wait in a member's
// session queue, where they count against the session's reliable bound
// (4×QueueMessages): seeks faster than a member's socket takes a window
// would pile windows up there and close a healthy member with 1013. So a
// seek waits, one seek of a group at a time, until this node's members of
// the group have written what they were sent (at most seekDrainWait), and
// the queue never holds more than about two of a member's windows.

// seekDrainWait bounds how long a seek waits for this node's members of
// the group to write the deliveries already queued for them. A member
// that reads at all drains one window (at most QueueMessages deliveries)
// far sooner; one that does not read is not healthy, and the seek goes
// ahead once the wait is over.
const seekDrainWait = 5 * time.Second

// seekLocks serializes the seeks of one group on this node. The zero value
// is ready for use; an entry lives while a seek of its group runs or waits.
type seekLocks struct {
	mu sync.Mutex // guards m
	m  map[string]*seekLock
}

type seekLock struct {
	ch   chan struct{} // capacity 1: holds a token while a seek runs
	refs int           // seeks running or waiting; guarded by seekLocks.mu
}

// lock waits for group's turn; the caller calls unlock when done.
func (l *seekLocks) lock(ctx context.Context, group string) (unlock func(), err error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[string]*seekLock)
	}
	sl := l.m[group]
	if sl == nil {
		sl = &seekLock{ch: make(chan struct{}, 1)}
		l.m[group] = sl
	}
	sl.refs++
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		if sl.refs--; sl.refs == 0 {
			delete(l.m, group)
		}
		l.mu.Unlock()
	}
	select {
	case sl.ch <- struct{}{}:
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
	return func() { <-sl.ch; release() }, nil
}

// seek moves group's position (engine.Engine.Seek) once this node's
// members of the group have written the deliveries queued for them, one
// seek of the group at a time.
func (rt *Router) seek(ctx context.Context, group, topic string, partition int, to engine.Start) error {
	unlock, err := rt.seeks.lock(ctx, group)
	if err != nil {
		return err
	}
	defer unlock()
	rt.awaitDrained(ctx, group)
	// Marked before the engine's Seek (mqtt_group.go), unmarked if it
	// fails: the leases are still live. A delivery the engine makes
	// again while the seek runs takes the held one's place with its mark
	// (holdGroupLocked): a redelivery made before the engine's Seek took
	// the lock its deliveries are made under has its lease dropped by the
	// Seek too. A new position held meanwhile is not marked: the window
	// the Seek itself delivers is live.
	//
	// A seek of every partition (partition < 0) may fail part-way, the
	// partitions before the failure moved (jsengine seeks them one by one
	// and returns the first error), and the error does not say which:
	// its held deliveries are dropped as after a seek that succeeded, as
	// a held delivery whose lease the seek dropped must not be written (a
	// record the seek skipped, to a client the group no longer leases it
	// to). One whose lease is live costs its record one ack timeout. A
	// caller gone before the engine is asked moves nothing and drops
	// nothing.
	if err := ctx.Err(); err != nil {
		return err
	}
	rt.heldSeek(group, topic, partition, heldMark)
	if err := rt.eng.Seek(ctx, group, topic, partition, to); err != nil {
		if partition >= 0 {
			rt.heldSeek(group, topic, partition, heldUnmark)
		} else {
			rt.heldSeek(group, topic, partition, heldDrop)
		}
		return err
	}
	rt.heldSeek(group, topic, partition, heldDrop)
	return nil
}

// awaitDrained waits until this node's members of group have no delivery
// waiting in their session queues, for at most seekDrainWait.
func (rt *Router) awaitDrained(ctx context.Context, group string) {
	var subs []*subscription
	for _, cn := range rt.connList() {
		cn.mu.Lock()
		for _, s := range cn.byID {
			if s.group == group {
				subs = append(subs, s)
			}
		}
		cn.mu.Unlock()
	}
	if len(subs) == 0 {
		return
	}
	t := time.NewTimer(seekDrainWait)
	defer t.Stop()
	for _, s := range subs {
		ch := s.drainedCh()
		if ch == nil {
			continue
		}
		select {
		case <-ch:
		case <-s.c.ctx.Done():
		case <-ctx.Done():
			return
		case <-t.C:
			rt.gm.seekDrainTimeouts.Inc()
			return
		}
	}
}

// drainedCh returns a channel closed once no group delivery of s waits in
// its session's queue, or nil when none does now.
func (s *subscription) drainedCh() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.unsent) == 0 {
		return nil
	}
	if s.drained == nil {
		s.drained = make(chan struct{})
	}
	return s.drained
}
