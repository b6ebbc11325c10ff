// Package groupstate is the consumer-group delivery state machine shared by
// Switchyard's engines: a Window of Flights per group partition, each
// Flight moving between Ready, InFlight, Backoff and Done as it is
// delivered, acked, nacked or times out; the committed offset advancing
// past every contiguous Done flight; redelivery after the backoff of
// engine.GroupPolicy; and dead-lettering after the last attempt. A record
// whose dead letter is not yet stored stays owed (Storing): the committed
// offset never moves past it until the engine reports the letter stored.
// A redriven dead letter comes back through Window.Redeliver: a new flight
// at its own offset with a fresh attempt count (in Redo when it is below the
// committed offset, which does not move back).
//
// An engine keeps what is its own: where records come from, where dead
// letters are stored, who owns a partition, and how positions are
// persisted. It plugs those in through a Machine's fields.
//
// # Concurrency
//
// Windows and Flights are not safe for concurrent use: every Window, every
// Flight in it, and every Machine method call must be guarded by one lock
// of the engine's, the same lock given as Machine.Mu. Timer callbacks that
// a Machine schedules take Mu themselves before touching state. The package
// starts no goroutine; callbacks run on the Clock's timer goroutines
// (through Machine.AfterFunc).
package groupstate

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// State is where a Flight is in its delivery.
type State uint8

const (
	Ready    State = iota // waiting to be (re)delivered
	InFlight              // leased to a member
	Backoff               // failed; waiting for its backoff timer
	Done                  // acked, filtered out or dead-lettered
	// Storing: out of attempts; its dead letter is being stored, or waits
	// for its backoff to be tried again. Still owed: the committed offset
	// stays below it.
	Storing
)

// ErrPending, returned by Machine.DeadLetter, says the letter is being
// stored and the engine will report the outcome through settle.
var ErrPending = errors.New("groupstate: dead letter pending")

// Member is a group member connected to the engine.
type Member struct {
	ID       string
	Consumer engine.Consumer
	// Limit bounds the records leased to the member at once over all its
	// partitions (engine.JoinRequest.MaxLeased); 0: no bound.
	Limit int
	// Starved is set when DeliverReady held a record back because the
	// member was at its Limit; the engine clears it and pumps the member's
	// other partitions once the member settles a record (see Settled).
	Starved bool
	// LimitBytes bounds likewise the bytes of the records leased to it
	// (engine.JoinRequest.MaxLeasedBytes, LeaseBytes each); 0: no bound.
	// A lease is given while the member holds fewer, so one record may
	// take it past the bound.
	LimitBytes int64

	leased      int   // flights leased to the member now
	leasedBytes int64 // their LeaseBytes
}

// Room reports whether the member may take one more lease.
func (m *Member) Room() bool {
	return (m.Limit <= 0 || m.leased < m.Limit) && (m.LimitBytes <= 0 || m.leasedBytes < m.LimitBytes)
}

// LeasedBytes returns the LeaseBytes of the records leased to the member
// now.
func (m *Member) LeasedBytes() int64 { return m.leasedBytes }

// LeaseBytes is what a lease of r counts against Member.LimitBytes: its
// data, key and headers.
func LeaseBytes(r *engine.Record) int64 {
	n := len(r.Data) + len(r.Key)
	for k, v := range r.Headers {
		n += len(k) + len(v)
	}
	return int64(n)
}

// Leased returns how many records are leased to the member now.
func (m *Member) Leased() int { return m.leased }

// Settled reports, and clears, whether the member was starved and has room
// again: the engine then pumps the member's partitions.
func (m *Member) Settled() bool {
	if m.Starved && m.Room() {
		m.Starved = false
		return true
	}
	return false
}

// Flight is one record in a group's window.
type Flight struct {
	Rec     *engine.Record
	State   State
	Attempt int     // deliveries made so far
	To      *Member // who holds it while InFlight
	LastErr string

	letter *engine.DeadLetter // while Storing: the letter, kept for retries
	again  bool               // while Storing: redriven; Ready again once the letter is stored
	timer  engine.Timer
	gen    uint64 // bumped on every state change; stale timers see a new value
}

// HeldBy reports whether the flight is leased to member; member "" stands
// for whoever holds it, a member ending in engine.AnyMember for every
// member whose ID starts with what precedes it, and engine.LeaseOf for
// those members while the flight is on the given attempt.
func (f *Flight) HeldBy(member string) bool {
	if f.State != InFlight {
		return false
	}
	if member == "" {
		return true
	}
	if f.To == nil {
		return false
	}
	if prefix, rest, ok := strings.Cut(member, engine.AnyMember); ok {
		if rest != "" { // engine.LeaseOf: "@" and the attempt
			n, err := strconv.Atoi(strings.TrimPrefix(rest, "@"))
			if err != nil || rest[0] != '@' || n != f.Attempt {
				return false
			}
		}
		return strings.HasPrefix(f.To.ID, prefix)
	}
	return f.To.ID == member
}

// stop stops the flight's timer and invalidates any callback already due.
// A lease it ends no longer counts against its member.
func (f *Flight) stop() {
	if f.State == InFlight && f.To != nil {
		f.To.leased--
		f.To.leasedBytes -= LeaseBytes(f.Rec)
		f.To = nil
	}
	if f.timer != nil {
		f.timer.Stop()
		f.timer = nil
	}
	f.gen++
}

// Ack completes a delivery.
func (f *Flight) Ack() {
	f.stop()
	f.State = Done
	f.To = nil
}

// Window is a group's cursor on one partition. Offsets below Committed are
// done, except those in Redo; Flights holds one flight per offset in
// [Committed, Next), so Flights[i] is offset Committed+i. The zero value is
// an empty window at offset zero.
type Window struct {
	Committed int64
	Next      int64
	Flights   []*Flight
	// Redo holds the redriven records below Committed being delivered
	// again (see Redeliver), in offset order, one flight per offset. They
	// count in the window like Flights; the committed offset never waits
	// for them.
	Redo    []*Flight
	Skipped int64 // records skipped because retention removed them first
}

// All yields every flight of the window in offset order: Redo, then
// Flights.
func (w *Window) All(yield func(*Flight) bool) {
	for _, f := range w.Redo {
		if !yield(f) {
			return
		}
	}
	for _, f := range w.Flights {
		if !yield(f) {
			return
		}
	}
}

// Drop forgets every flight, Redo included, stopping its timers.
func (w *Window) Drop() {
	for f := range w.All {
		f.stop()
	}
	w.Flights, w.Redo = nil, nil
	w.Next = w.Committed
}

// FastForward moves the cursor up to earliest, dropping flights below it
// (Redo stays: its records are in their flights).
// When earliest is past every flight it drops the whole window (leaving
// Flights empty); otherwise at least one flight remains.
func (w *Window) FastForward(earliest int64) {
	k := earliest - w.Committed
	if k >= int64(len(w.Flights)) {
		for _, f := range w.Flights {
			f.stop()
		}
		w.Flights = nil
		w.Committed = earliest
		w.Next = max(w.Next, earliest)
		return
	}
	for _, f := range w.Flights[:k] {
		f.stop()
	}
	w.Flights = w.Flights[k:]
	w.Committed = earliest
}

// SkipTo fast-forwards past records below earliest, which retention has
// removed, and counts them in Skipped. It returns the skipped range
// [from, to); from == to when nothing was skipped.
func (w *Window) SkipTo(earliest int64) (from, to int64) {
	from, to = w.Committed, w.Committed
	if w.Committed < earliest {
		to = earliest
		w.Skipped += earliest - w.Committed
		w.FastForward(earliest)
	}
	return from, to
}

// InFlightAt returns the flight at offset if it is leased to a member.
func (w *Window) InFlightAt(offset int64) *Flight {
	if offset >= w.Committed && offset < w.Next {
		if f := w.Flights[offset-w.Committed]; f.State == InFlight {
			return f
		}
		return nil
	}
	for _, f := range w.Redo {
		if f.Rec.Offset == offset && f.State == InFlight {
			return f
		}
	}
	return nil
}

// Load counts the flights not yet done (outstanding) and those leased to a
// member (inFlight), and reports whether any is leased to a member other
// than m (draining: the partition moved and the old member still holds
// records, so m gets nothing until they are settled).
func (w *Window) Load(m *Member) (outstanding, inFlight int, draining bool) {
	for f := range w.All {
		switch {
		case f.State == Done:
			continue
		case f.State == InFlight:
			inFlight++
			if f.To != m {
				draining = true
			}
		}
		outstanding++
	}
	return outstanding, inFlight, draining
}

// Leased returns how many flights are leased to a member.
func (w *Window) Leased() int {
	n := 0
	for f := range w.All {
		if f.State == InFlight {
			n++
		}
	}
	return n
}

// Fill appends flights for the records from Next up to end while fewer
// than limit are outstanding, starting from outstanding, and returns how
// many are outstanding then. at returns the record at an offset, or nil
// when it cannot be had now (Fill stops there). A record without every
// header pair of filter is Done at once.
func (w *Window) Fill(outstanding, limit int, end int64, filter map[string]string, at func(int64) *engine.Record) int {
	for outstanding < limit && w.Next < end {
		r := at(w.Next)
		if r == nil {
			return outstanding
		}
		w.Next++
		f := &Flight{Rec: r}
		if !accepts(filter, r) {
			f.State = Done
		} else {
			outstanding++
		}
		w.Flights = append(w.Flights, f)
	}
	return outstanding
}

// accepts reports whether a record's headers hold every pair of filter.
func accepts(filter map[string]string, r *engine.Record) bool {
	for k, v := range filter {
		if hv, ok := r.Headers[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// Advance moves Committed past every contiguous Done flight at the front
// of the window and forgets the Done flights of Redo.
func (w *Window) Advance() {
	for len(w.Flights) > 0 && w.Flights[0].State == Done {
		w.Flights[0] = nil
		w.Flights = w.Flights[1:]
		w.Committed++
	}
	if len(w.Redo) > 0 {
		w.Redo = slices.DeleteFunc(w.Redo, func(f *Flight) bool { return f.State == Done })
		if len(w.Redo) == 0 {
			w.Redo = nil
		}
	}
}

// Machine drives flights through delivery, timeouts, backoff and dead
// letters for one engine. P is the engine's per-partition cursor, handed
// back to Active and Pump from timer callbacks. Every field must be set
// before first use; a Machine must not be changed afterwards.
type Machine[P any] struct {
	// Policy gives AckTimeout, MaxAttempts and Backoff.
	Policy engine.GroupPolicy
	// Clock stamps dead letters.
	Clock engine.Clock
	// NewID makes dead-letter IDs.
	NewID func() string
	// Group returns the name of p's group, for deliveries and dead letters.
	Group func(p P) string
	// Mu is the engine lock guarding every Window; timer callbacks take it.
	// LockOf, when set, replaces it: the lock guarding p's Window.
	Mu     sync.Locker
	LockOf func(p P) sync.Locker
	// AfterFunc schedules a timer callback; it should not run f once the
	// engine is closed.
	AfterFunc func(d time.Duration, f func()) engine.Timer
	// Active reports, with Mu held, whether p still delivers: false once
	// the cursor is removed or the engine closed. Timers of an inactive
	// cursor do nothing.
	Active func(p P) bool
	// Pump brings p up to date after a timer changed a flight; called with
	// Mu held.
	Pump func(p P)
	// DeadLetter stores a record that ran out of attempts; called with Mu
	// held. It returns nil once the letter is stored (the flight is then
	// Done); ErrPending when it stores the letter later, then calling
	// settle, with Mu held, with the outcome (settle pumps p and does
	// nothing once the flight was dropped or changed); or another error,
	// when the letter could not be stored. Until the letter is stored the
	// flight stays Storing and the committed offset stays below it; a
	// failed store is tried again, with the same letter, after the
	// backoff of the last attempt.
	DeadLetter func(dl *engine.DeadLetter, settle func(error)) error
}

// lock returns the lock guarding p's Window.
func (ma *Machine[P]) lock(p P) sync.Locker {
	if ma.LockOf != nil {
		return ma.LockOf(p)
	}
	return ma.Mu
}

// Deliver leases f to m (another attempt) and hands it to m's consumer,
// starting its ack timeout: when that passes with f still leased, f fails
// with "ack timeout" and p is pumped.
func (ma *Machine[P]) Deliver(p P, f *Flight, m *Member) {
	f.stop()
	f.Attempt++
	f.State = InFlight
	f.To = m
	m.leased++
	m.leasedBytes += LeaseBytes(f.Rec)
	gen := f.gen
	f.timer = ma.AfterFunc(ma.Policy.AckTimeout, func() {
		mu := ma.lock(p)
		mu.Lock()
		defer mu.Unlock()
		if !ma.Active(p) || f.gen != gen || f.State != InFlight {
			return
		}
		ma.Fail(p, f, "ack timeout", true)
		ma.Pump(p)
	})
	m.Consumer.Deliver(engine.Delivery{Group: ma.Group(p), Record: f.Rec, Attempt: f.Attempt})
}

// DeliverReady delivers the Ready flights of w to m, in offset order, while
// m has room; when it holds one back it marks m Starved.
func (ma *Machine[P]) DeliverReady(p P, w *Window, m *Member) {
	for f := range w.All {
		if f.State != Ready {
			continue
		}
		if !m.Room() {
			m.Starved = true
			return
		}
		ma.Deliver(p, f, m)
	}
}

// Fail ends a delivery attempt: after the last attempt the record is
// dead-lettered; otherwise it is redelivered after the backoff, or at once
// when backoff is false. The caller pumps afterwards.
func (ma *Machine[P]) Fail(p P, f *Flight, reason string, backoff bool) {
	f.stop()
	f.LastErr = reason
	f.To = nil
	if f.Attempt >= ma.Policy.MaxAttempts {
		f.State = Storing
		f.letter = &engine.DeadLetter{
			ID:       ma.NewID(),
			Reason:   engine.ReasonMaxAttempts,
			Group:    ma.Group(p),
			Record:   *f.Rec,
			Attempts: f.Attempt,
			Error:    reason,
			Time:     ma.Clock.Now(),
		}
		ma.store(p, f)
		return
	}
	if !backoff {
		f.State = Ready
		return
	}
	f.State = Backoff
	gen := f.gen
	f.timer = ma.AfterFunc(ma.Policy.Backoff(f.Attempt), func() {
		mu := ma.lock(p)
		mu.Lock()
		defer mu.Unlock()
		if !ma.Active(p) || f.gen != gen || f.State != Backoff {
			return
		}
		f.timer = nil
		f.State = Ready
		ma.Pump(p)
	})
}

// store hands f's dead letter to the engine; a failure is tried again
// after the backoff. Caller holds Mu; f is Storing.
func (ma *Machine[P]) store(p P, f *Flight) {
	gen := f.gen
	settled := false
	settle := func(err error) {
		if settled || !ma.Active(p) || f.gen != gen || f.State != Storing {
			return
		}
		settled = true
		ma.settle(p, f, err)
	}
	switch err := ma.DeadLetter(f.letter, settle); {
	case err == nil:
		settled = true
		f.letterStored()
	case errors.Is(err, ErrPending):
	default:
		settled = true
		ma.retryStore(p, f)
	}
}

// settle applies the late outcome of storing f's dead letter and pumps p.
func (ma *Machine[P]) settle(p P, f *Flight, err error) {
	if err == nil {
		f.stop()
		f.letterStored()
	} else {
		ma.retryStore(p, f)
	}
	ma.Pump(p)
}

// letterStored ends a Storing flight whose letter is stored: Done, or
// Ready with no attempts when it was redriven meanwhile.
func (f *Flight) letterStored() {
	f.letter = nil
	if f.again {
		f.again = false
		f.State, f.Attempt, f.LastErr = Ready, 0, ""
		return
	}
	f.State = Done
}

// retryStore tries f's dead letter again after the backoff of its last
// attempt.
func (ma *Machine[P]) retryStore(p P, f *Flight) {
	f.stop()
	gen := f.gen
	f.timer = ma.AfterFunc(ma.Policy.Backoff(f.Attempt), func() {
		mu := ma.lock(p)
		mu.Lock()
		defer mu.Unlock()
		if !ma.Active(p) || f.gen != gen || f.State != Storing {
			return
		}
		f.timer = nil
		f.gen++
		ma.store(p, f)
		ma.Pump(p)
	})
}

// Release fails, without backoff, every flight of w leased to m: m has
// left, so they go to the partition's next member at once, or to the dead
// letters when that was their last attempt. The caller pumps afterwards.
func (ma *Machine[P]) Release(p P, w *Window, m *Member) {
	for f := range w.All {
		if f.State == InFlight && f.To == m {
			ma.Fail(p, f, "member left", false)
		}
	}
}

// HandBack gives back every flight of w leased to m, as a node shutting
// down does. A delivery for which unsent reports true never reached the
// member: it is no attempt, and the flight is Ready with the attempts it
// had before. One that reached the member counts, as when a member leaves:
// Ready again, or dead-lettered when it was the last attempt. The caller
// pumps afterwards.
func (ma *Machine[P]) HandBack(p P, w *Window, m *Member, unsent func(offset int64) bool) {
	for f := range w.All {
		if f.State != InFlight || f.To != m {
			continue
		}
		if unsent(f.Rec.Offset) {
			f.stop()
			f.Attempt = max(f.Attempt-1, 0)
			f.State = Ready
			continue
		}
		ma.Fail(p, f, "handed back", false)
	}
}

// Unsent indexes positions by (topic, partition) for HandBack.
type Unsent map[string]map[int]map[int64]bool

// NewUnsent indexes ps.
func NewUnsent(ps []engine.Position) Unsent {
	u := Unsent{}
	for _, p := range ps {
		if u[p.Topic] == nil {
			u[p.Topic] = map[int]map[int64]bool{}
		}
		if u[p.Topic][p.Partition] == nil {
			u[p.Topic][p.Partition] = map[int64]bool{}
		}
		u[p.Topic][p.Partition][p.Offset] = true
	}
	return u
}

// Of returns the test HandBack takes for one partition.
func (u Unsent) Of(topic string, partition int) func(int64) bool {
	offs := u[topic][partition]
	return func(o int64) bool { return offs[o] }
}
