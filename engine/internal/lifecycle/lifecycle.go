// Package lifecycle holds the shutdown and announcement plumbing that every
// Switchyard engine needs in the same form: a Guard that runs clock-driven
// callbacks only while the engine is open and lets Close wait for those
// already running, and an Observers list that an engine's append path reads
// without taking a lock.
//
// # Concurrency
//
// Guard, Timeout and Observers are safe for concurrent use by multiple
// goroutines. Nothing here starts a goroutine: Guard's callbacks run on the
// Clock's own timer goroutines. Guard's mutex and Observers' mutex are leaf
// locks: neither is held while calling out, except that Guard.Close runs its
// function argument under Guard's mutex, so that function must not take
// another lock.
package lifecycle

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// Guard tracks whether an engine is closed and which of its callbacks are
// running. The zero value is an open Guard. A Guard must not be copied after
// first use.
type Guard struct {
	mu      sync.Mutex // guards following
	closed  bool
	running sync.WaitGroup // callbacks and Enter/Exit spans in progress
}

// AfterFunc runs f after d on clock, unless the Guard has been closed by
// then. Wait waits for an f that has started.
func (g *Guard) AfterFunc(clock engine.Clock, d time.Duration, f func()) engine.Timer {
	return clock.AfterFunc(d, func() {
		if !g.Enter() {
			return
		}
		defer g.Exit()
		f()
	})
}

// Enter reports whether the Guard is still open and, if it is, counts the
// caller as running until it calls Exit; Wait waits for it. A caller that
// gets false must not call Exit.
func (g *Guard) Enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.running.Add(1)
	return true
}

// Exit ends a span begun by an Enter that returned true.
func (g *Guard) Exit() { g.running.Done() }

// Close closes the Guard and, in the same critical section, calls then
// (which may be nil), so that no Enter succeeds once then has run. It
// reports false, without calling then, when the Guard was already closed.
func (g *Guard) Close(then func()) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.closed = true
	if then != nil {
		then()
	}
	return true
}

// Wait blocks until every callback and Enter/Exit span that started before
// Close has finished. Call it after Close.
func (g *Guard) Wait() { g.running.Wait() }

// Timeout is a channel closed once a duration has passed on a clock: an
// Append's block timeout. A nil *Timeout may be stopped.
type Timeout struct {
	done  chan struct{}
	timer engine.Timer
}

// Timeout starts a Timeout of d on clock. Its channel is never closed when
// the Guard closes first.
func (g *Guard) Timeout(clock engine.Clock, d time.Duration) *Timeout {
	ch := make(chan struct{})
	return &Timeout{done: ch, timer: g.AfterFunc(clock, d, func() { close(ch) })}
}

// Done returns the channel closed when the Timeout passes.
func (t *Timeout) Done() <-chan struct{} { return t.done }

// Stop stops the Timeout's timer; it does nothing on a nil *Timeout.
func (t *Timeout) Stop() {
	if t != nil {
		t.timer.Stop()
	}
}

// Observers is a copy-on-write list of engine observers: Add and the stop
// functions it returns copy the list under a mutex, and List reads the
// current copy with one atomic load, so an append path may call it while
// holding its own locks. The zero value is an empty list. An Observers must
// not be copied after first use.
type Observers struct {
	mu   sync.Mutex // serialises Add and stop
	list atomic.Pointer[observerList]
}

// observerList is one immutable version of the list: handles[i] was
// registered for vals[i]. Handles give each registration its own identity,
// so one observer added twice is two entries.
type observerList struct {
	handles []*handle
	vals    []engine.Observer
}

// handle is one registration. It is not zero-sized: pointers to distinct
// zero-sized values may be equal.
type handle struct{ _ byte }

// Add registers o until stop is called; stop may be called more than once.
func (os *Observers) Add(o engine.Observer) (stop func()) {
	h := new(handle)
	os.mu.Lock()
	next := &observerList{}
	if cur := os.list.Load(); cur != nil {
		next.handles = slices.Clone(cur.handles)
		next.vals = slices.Clone(cur.vals)
	}
	next.handles = append(next.handles, h)
	next.vals = append(next.vals, o)
	os.list.Store(next)
	os.mu.Unlock()
	return func() {
		os.mu.Lock()
		defer os.mu.Unlock()
		cur := os.list.Load()
		if cur == nil {
			return
		}
		i := slices.Index(cur.handles, h)
		if i < 0 {
			return
		}
		os.list.Store(&observerList{
			handles: slices.Delete(slices.Clone(cur.handles), i, i+1),
			vals:    slices.Delete(slices.Clone(cur.vals), i, i+1),
		})
	}
}

// List returns the observers registered now. The caller must not modify
// the slice; later registrations do not change it.
func (os *Observers) List() []engine.Observer {
	if cur := os.list.Load(); cur != nil {
		return cur.vals
	}
	return nil
}
