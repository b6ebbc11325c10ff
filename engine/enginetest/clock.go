package enginetest

import (
	"slices"
	"sync"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// FakeClock is an engine.Clock that only moves when Advance is called. It
// is safe for concurrent use by multiple goroutines.
//
// Unlike the system clock, a FakeClock runs due AfterFunc callbacks on the
// goroutine that calls Advance, one after another in deadline order (ties in
// creation order), and Advance returns only when they have all returned.
// That makes tests deterministic; it also means Advance must not be called
// while holding a lock that a callback takes.
type FakeClock struct {
	advMu sync.Mutex // serialises Advance

	mu      sync.Mutex // guards following
	now     time.Time
	seq     uint64
	timers  []*fakeTimer
	changed chan struct{} // closed and replaced when timers are added
}

// NewFakeClock returns a clock reading start.
func NewFakeClock(start time.Time) *FakeClock {
	return &FakeClock{now: start, changed: make(chan struct{})}
}

var _ engine.Clock = (*FakeClock)(nil)

type fakeTimer struct {
	c    *FakeClock
	when time.Time
	seq  uint64
	f    func()
}

// Now returns the clock's current time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// AfterFunc schedules f to run when Advance moves the clock d or more
// past now. A d of zero or less runs at the next Advance (even Advance(0)).
func (c *FakeClock) AfterFunc(d time.Duration, f func()) engine.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	t := &fakeTimer{c: c, when: c.now.Add(d), seq: c.seq, f: f}
	c.timers = append(c.timers, t)
	close(c.changed)
	c.changed = make(chan struct{})
	return t
}

// Stop cancels the timer, reporting whether it was still pending.
func (t *fakeTimer) Stop() bool {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.Index(c.timers, t)
	if i < 0 {
		return false
	}
	c.timers = slices.Delete(c.timers, i, i+1)
	return true
}

// Pending returns how many timers have not fired or been stopped.
func (c *FakeClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitForTimers waits until at least n timers are pending, up to timeout of
// real time, and reports whether they were. Use it to know that a goroutine
// has started waiting on the clock before calling Advance.
func (c *FakeClock) WaitForTimers(n int, timeout time.Duration) bool {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		ok, ch := len(c.timers) >= n, c.changed
		c.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ch:
		case <-deadline.C:
			return false
		}
	}
}

// maxFires bounds the callbacks one Advance runs, so a callback that keeps
// scheduling zero-delay timers fails loudly instead of spinning forever.
const maxFires = 1_000_000

// Advance moves the clock forward by d, running every callback that falls
// due, including ones scheduled by callbacks within the interval. During a
// callback Now reads that callback's deadline.
func (c *FakeClock) Advance(d time.Duration) {
	c.advMu.Lock()
	defer c.advMu.Unlock()
	c.mu.Lock()
	target := c.now.Add(max(d, 0))
	c.mu.Unlock()
	for range maxFires {
		c.mu.Lock()
		var due *fakeTimer
		for _, t := range c.timers {
			if t.when.After(target) {
				continue
			}
			if due == nil || t.when.Before(due.when) || t.when.Equal(due.when) && t.seq < due.seq {
				due = t
			}
		}
		if due == nil {
			c.now = target
			c.mu.Unlock()
			return
		}
		c.timers = slices.DeleteFunc(c.timers, func(t *fakeTimer) bool { return t == due })
		if due.when.After(c.now) {
			c.now = due.when
		}
		c.mu.Unlock()
		due.f()
	}
	panic("enginetest: FakeClock.Advance ran too many callbacks; a timer keeps rescheduling itself")
}
