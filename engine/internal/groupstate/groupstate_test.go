package groupstate_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/internal/groupstate"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// rec makes the record at offset of partition 0 of topic "t".
func rec(offset int64, headers map[string]string) *engine.Record {
	return &engine.Record{Topic: "t", Offset: offset, Headers: headers, Data: []byte(fmt.Sprint(offset)), Time: t0}
}

// records returns an at function over n records starting at offset 0; hdr
// gives each record's headers (nil: none). Offsets in missing return nil.
func records(n int64, hdr func(int64) map[string]string, missing ...int64) func(int64) *engine.Record {
	return func(off int64) *engine.Record {
		if off < 0 || off >= n || slices.Contains(missing, off) {
			return nil
		}
		var h map[string]string
		if hdr != nil {
			h = hdr(off)
		}
		return rec(off, h)
	}
}

func states(w *groupstate.Window) []groupstate.State {
	out := make([]groupstate.State, len(w.Flights))
	for i, f := range w.Flights {
		out[i] = f.State
	}
	return out
}

// window makes a window at committed holding one flight per state.
func window(committed int64, ss ...groupstate.State) *groupstate.Window {
	w := &groupstate.Window{Committed: committed, Next: committed + int64(len(ss))}
	for i, s := range ss {
		w.Flights = append(w.Flights, &groupstate.Flight{Rec: rec(committed+int64(i), nil), State: s})
	}
	return w
}

const (
	R = groupstate.Ready
	I = groupstate.InFlight
	B = groupstate.Backoff
	D = groupstate.Done
	S = groupstate.Storing
)

func TestWindowFill(t *testing.T) {
	red := func(off int64) map[string]string {
		if off%2 == 0 {
			return map[string]string{"color": "red", "size": "l"}
		}
		return map[string]string{"color": "blue", "size": "l"}
	}
	tests := []struct {
		name        string
		start       int64 // Committed and Next before Fill
		outstanding int
		limit       int
		end         int64
		filter      map[string]string
		at          func(int64) *engine.Record
		wantNext    int64
		wantStates  []groupstate.State
	}{
		{name: "up to limit", limit: 3, end: 10, at: records(10, nil),
			wantNext: 3, wantStates: []groupstate.State{R, R, R}},
		{name: "counts outstanding already", outstanding: 2, limit: 3, end: 10, at: records(10, nil),
			wantNext: 1, wantStates: []groupstate.State{R}},
		{name: "nothing when at limit", outstanding: 3, limit: 3, end: 10, at: records(10, nil),
			wantNext: 0, wantStates: []groupstate.State{}},
		{name: "nothing when over limit", outstanding: 4, limit: 3, end: 10, at: records(10, nil),
			wantNext: 0, wantStates: []groupstate.State{}},
		{name: "stops at end", limit: 10, end: 2, at: records(10, nil),
			wantNext: 2, wantStates: []groupstate.State{R, R}},
		{name: "from a later offset", start: 7, limit: 10, end: 10, at: records(10, nil),
			wantNext: 10, wantStates: []groupstate.State{R, R, R}},
		{name: "stops where a record cannot be had", limit: 10, end: 10, at: records(10, nil, 2),
			wantNext: 2, wantStates: []groupstate.State{R, R}},
		{name: "filter marks rejected Done without counting them", limit: 2, end: 10,
			filter: map[string]string{"color": "red"}, at: records(10, red),
			wantNext: 3, wantStates: []groupstate.State{R, D, R}},
		{name: "filter needs every pair", limit: 10, end: 4,
			filter: map[string]string{"color": "red", "size": "s"}, at: records(10, red),
			wantNext: 4, wantStates: []groupstate.State{D, D, D, D}},
		{name: "filter on a missing header", limit: 10, end: 3,
			filter: map[string]string{"shape": ""}, at: records(10, red),
			wantNext: 3, wantStates: []groupstate.State{D, D, D}},
		{name: "filter on records without headers", limit: 10, end: 2,
			filter: map[string]string{"color": "red"}, at: records(10, nil),
			wantNext: 2, wantStates: []groupstate.State{D, D}},
		{name: "filter of two pairs both held", limit: 2, end: 10,
			filter: map[string]string{"color": "red", "size": "l"}, at: records(10, red),
			wantNext: 3, wantStates: []groupstate.State{R, D, R}},
		{name: "rejected records past the limit are not taken", limit: 1, end: 10,
			filter: map[string]string{"color": "blue"}, at: records(10, red),
			wantNext: 2, wantStates: []groupstate.State{D, R}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &groupstate.Window{Committed: tt.start, Next: tt.start}
			w.Fill(tt.outstanding, tt.limit, tt.end, tt.filter, tt.at)
			if w.Next != tt.wantNext {
				t.Errorf("Next = %d, want %d", w.Next, tt.wantNext)
			}
			if got := states(w); !slices.Equal(got, tt.wantStates) {
				t.Errorf("states = %v, want %v", got, tt.wantStates)
			}
			if w.Committed != tt.start {
				t.Errorf("Committed = %d, want %d (Fill must not commit)", w.Committed, tt.start)
			}
			for i, f := range w.Flights {
				if want := w.Committed + int64(i); f.Rec == nil || f.Rec.Offset != want {
					t.Errorf("Flights[%d] holds %v, want the record at offset %d", i, f.Rec, want)
				}
				if f.Attempt != 0 || f.To != nil {
					t.Errorf("Flights[%d]: Attempt %d To %v, want a fresh flight", i, f.Attempt, f.To)
				}
			}
		})
	}
}

func TestWindowAdvance(t *testing.T) {
	tests := []struct {
		name          string
		flights       []groupstate.State
		wantCommitted int64 // from 10
		wantStates    []groupstate.State
	}{
		{name: "empty", flights: nil, wantCommitted: 10, wantStates: []groupstate.State{}},
		{name: "all done", flights: []groupstate.State{D, D, D}, wantCommitted: 13, wantStates: []groupstate.State{}},
		{name: "done prefix", flights: []groupstate.State{D, D, I, D}, wantCommitted: 12, wantStates: []groupstate.State{I, D}},
		{name: "in flight first", flights: []groupstate.State{I, D, D}, wantCommitted: 10, wantStates: []groupstate.State{I, D, D}},
		{name: "ready first", flights: []groupstate.State{R, D}, wantCommitted: 10, wantStates: []groupstate.State{R, D}},
		{name: "backoff first", flights: []groupstate.State{B, D}, wantCommitted: 10, wantStates: []groupstate.State{B, D}},
		{name: "stops at the first gap", flights: []groupstate.State{D, B, D, R}, wantCommitted: 11, wantStates: []groupstate.State{B, D, R}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := window(10, tt.flights...)
			next := w.Next
			w.Advance()
			if w.Committed != tt.wantCommitted {
				t.Errorf("Committed = %d, want %d", w.Committed, tt.wantCommitted)
			}
			if got := states(w); !slices.Equal(got, tt.wantStates) {
				t.Errorf("states = %v, want %v", got, tt.wantStates)
			}
			if w.Next != next {
				t.Errorf("Next = %d, want %d unchanged", w.Next, next)
			}
			if len(w.Flights) > 0 && w.Flights[0].Rec.Offset != w.Committed {
				t.Errorf("first flight is offset %d, want Committed %d", w.Flights[0].Rec.Offset, w.Committed)
			}
		})
	}
}

func TestWindowSkipTo(t *testing.T) {
	// The window is at Committed 5 with flights for 5, 6, 7 (Next 8) and
	// 4 records already skipped.
	tests := []struct {
		name          string
		earliest      int64
		wantFrom      int64
		wantTo        int64
		wantCommitted int64
		wantNext      int64
		wantFlights   int
		wantSkipped   int64
	}{
		{name: "earliest below", earliest: 3, wantFrom: 5, wantTo: 5, wantCommitted: 5, wantNext: 8, wantFlights: 3, wantSkipped: 4},
		{name: "earliest one below", earliest: 4, wantFrom: 5, wantTo: 5, wantCommitted: 5, wantNext: 8, wantFlights: 3, wantSkipped: 4},
		{name: "earliest at committed", earliest: 5, wantFrom: 5, wantTo: 5, wantCommitted: 5, wantNext: 8, wantFlights: 3, wantSkipped: 4},
		{name: "into the window", earliest: 6, wantFrom: 5, wantTo: 6, wantCommitted: 6, wantNext: 8, wantFlights: 2, wantSkipped: 5},
		{name: "to the last flight", earliest: 7, wantFrom: 5, wantTo: 7, wantCommitted: 7, wantNext: 8, wantFlights: 1, wantSkipped: 6},
		{name: "to next", earliest: 8, wantFrom: 5, wantTo: 8, wantCommitted: 8, wantNext: 8, wantFlights: 0, wantSkipped: 7},
		{name: "past next", earliest: 12, wantFrom: 5, wantTo: 12, wantCommitted: 12, wantNext: 12, wantFlights: 0, wantSkipped: 11},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := window(5, R, I, D)
			w.Skipped = 4
			from, to := w.SkipTo(tt.earliest)
			if from != tt.wantFrom || to != tt.wantTo {
				t.Errorf("SkipTo(%d) = [%d, %d), want [%d, %d)", tt.earliest, from, to, tt.wantFrom, tt.wantTo)
			}
			if w.Committed != tt.wantCommitted || w.Next != tt.wantNext || len(w.Flights) != tt.wantFlights {
				t.Errorf("window Committed %d Next %d flights %d, want %d %d %d",
					w.Committed, w.Next, len(w.Flights), tt.wantCommitted, tt.wantNext, tt.wantFlights)
			}
			if w.Skipped != tt.wantSkipped {
				t.Errorf("Skipped = %d, want %d", w.Skipped, tt.wantSkipped)
			}
			for i, f := range w.Flights {
				if want := w.Committed + int64(i); f.Rec.Offset != want {
					t.Errorf("Flights[%d] is offset %d, want %d", i, f.Rec.Offset, want)
				}
			}
		})
	}
}

func TestWindowInFlightAt(t *testing.T) {
	w := window(10, I, R, D, B, I)
	tests := []struct {
		name   string
		offset int64
		want   *groupstate.Flight
	}{
		{name: "below committed", offset: 9, want: nil},
		{name: "in flight at committed", offset: 10, want: w.Flights[0]},
		{name: "ready", offset: 11, want: nil},
		{name: "done", offset: 12, want: nil},
		{name: "backoff", offset: 13, want: nil},
		{name: "in flight last", offset: 14, want: w.Flights[4]},
		{name: "at next", offset: 15, want: nil},
		{name: "far past next", offset: 1000, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := w.InFlightAt(tt.offset); got != tt.want {
				t.Errorf("InFlightAt(%d) = %p, want %p", tt.offset, got, tt.want)
			}
		})
	}
}

func TestWindowLoad(t *testing.T) {
	a := &groupstate.Member{ID: "a"}
	b := &groupstate.Member{ID: "b"}
	type fl struct {
		s  groupstate.State
		to *groupstate.Member
	}
	tests := []struct {
		name            string
		flights         []fl
		m               *groupstate.Member
		wantOutstanding int
		wantInFlight    int
		wantDraining    bool
	}{
		{name: "empty", m: a},
		{name: "all done", flights: []fl{{D, nil}, {D, nil}}, m: a},
		{name: "mine", flights: []fl{{D, nil}, {R, nil}, {B, nil}, {I, a}, {I, a}}, m: a,
			wantOutstanding: 4, wantInFlight: 2},
		{name: "another member's", flights: []fl{{D, nil}, {R, nil}, {I, a}}, m: b,
			wantOutstanding: 2, wantInFlight: 1, wantDraining: true},
		{name: "mixed holders", flights: []fl{{I, b}, {I, a}}, m: a,
			wantOutstanding: 2, wantInFlight: 2, wantDraining: true},
		{name: "no member yet", flights: []fl{{I, a}}, m: nil,
			wantOutstanding: 1, wantInFlight: 1, wantDraining: true},
		{name: "nothing leased", flights: []fl{{R, nil}, {B, nil}}, m: nil,
			wantOutstanding: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &groupstate.Window{}
			for i, f := range tt.flights {
				w.Flights = append(w.Flights, &groupstate.Flight{Rec: rec(int64(i), nil), State: f.s, To: f.to})
			}
			w.Next = int64(len(w.Flights))
			o, n, d := w.Load(tt.m)
			if o != tt.wantOutstanding || n != tt.wantInFlight || d != tt.wantDraining {
				t.Errorf("Load = (%d, %d, %v), want (%d, %d, %v)", o, n, d, tt.wantOutstanding, tt.wantInFlight, tt.wantDraining)
			}
			if got := w.Leased(); got != tt.wantInFlight {
				t.Errorf("Leased = %d, want %d", got, tt.wantInFlight)
			}
		})
	}
}

// consumer records deliveries.
type consumer struct {
	mu  sync.Mutex // guards following
	got []engine.Delivery
}

func (c *consumer) Deliver(d engine.Delivery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, d)
}

func (*consumer) Skipped(string, string, int, int64, int64) {}

func (c *consumer) deliveries() []engine.Delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}

// part is a test engine's partition cursor.
type part struct {
	name   string
	active bool
	pumps  int
}

// harness is a Machine over a fake clock, recording pumps and dead letters.
type harness struct {
	clock *enginetest.FakeClock
	mu    sync.Mutex // the engine lock, Machine.Mu
	ma    groupstate.Machine[*part]
	p     *part
	dls   []*engine.DeadLetter
	ids   int
	// dlErr, when set, is what the dead-letter store returns; pending
	// collects the settle callbacks of stores that return ErrPending.
	dlErr   error
	pending []func(error)
}

func newHarness(policy engine.GroupPolicy) *harness {
	h := &harness{clock: enginetest.NewFakeClock(t0), p: &part{name: "g", active: true}}
	h.ma = groupstate.Machine[*part]{
		Policy:    policy,
		Clock:     h.clock,
		NewID:     func() string { h.ids++; return fmt.Sprintf("dl-%d", h.ids) },
		Group:     func(p *part) string { return p.name },
		Mu:        &h.mu,
		AfterFunc: h.clock.AfterFunc,
		Active:    func(p *part) bool { return p.active },
		Pump:      func(p *part) { p.pumps++ },
		DeadLetter: func(dl *engine.DeadLetter, settle func(error)) error {
			switch {
			case errors.Is(h.dlErr, groupstate.ErrPending):
				h.pending = append(h.pending, settle)
			case h.dlErr == nil:
				h.dls = append(h.dls, dl)
			}
			return h.dlErr
		},
	}
	return h
}

// locked runs f with the engine lock held, as every Machine call must be.
func (h *harness) locked(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f()
}

// pumps returns how often the machine has pumped.
func (h *harness) pumps() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.p.pumps
}

// state returns f's state and attempt, read under the lock.
func (h *harness) state(f *groupstate.Flight) (groupstate.State, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return f.State, f.Attempt
}

var policy = engine.GroupPolicy{
	AckTimeout:  5 * time.Second,
	MaxAttempts: 4,
	BackoffMin:  100 * time.Millisecond,
	BackoffMax:  time.Second,
	MaxInFlight: 4,
}

func member(id string) (*groupstate.Member, *consumer) {
	c := &consumer{}
	return &groupstate.Member{ID: id, Consumer: c}, c
}

func TestMachineDeliver(t *testing.T) {
	h := newHarness(policy)
	m, c := member("a")
	f := &groupstate.Flight{Rec: rec(3, nil)}
	for attempt := 1; attempt <= 3; attempt++ {
		h.locked(func() { h.ma.Deliver(h.p, f, m) })
		if f.State != I || f.Attempt != attempt || f.To != m {
			t.Fatalf("after delivery %d: State %v Attempt %d To %v, want InFlight %d %v", attempt, f.State, f.Attempt, f.To, attempt, m)
		}
		got := c.deliveries()
		want := engine.Delivery{Group: "g", Record: f.Rec, Attempt: attempt}
		if len(got) != attempt || got[attempt-1] != want {
			t.Fatalf("deliveries = %+v, want %d ending in %+v", got, attempt, want)
		}
	}
	// A redelivery replaces the previous ack timer rather than adding one.
	if n := h.clock.Pending(); n != 1 {
		t.Errorf("pending timers = %d, want 1", n)
	}
}

func TestMachineDeliverReady(t *testing.T) {
	h := newHarness(policy)
	a, ca := member("a")
	b, _ := member("b")
	w := window(20, R, I, D, B, R)
	w.Flights[1].To = b
	h.locked(func() { h.ma.DeliverReady(h.p, w, a) })
	var offs []int64
	for _, d := range ca.deliveries() {
		offs = append(offs, d.Record.Offset)
	}
	if !slices.Equal(offs, []int64{20, 24}) {
		t.Errorf("delivered offsets %v, want [20 24]", offs)
	}
	if got := states(w); !slices.Equal(got, []groupstate.State{I, I, D, B, I}) {
		t.Errorf("states = %v, want [InFlight InFlight Done Backoff InFlight]", got)
	}
	if w.Flights[1].To != b {
		t.Error("DeliverReady took a flight leased to another member")
	}
}

// TestMachineAckTimeout walks one flight through an ack timeout and its
// backoff on the fake clock.
func TestMachineAckTimeout(t *testing.T) {
	h := newHarness(policy)
	m, _ := member("a")
	f := &groupstate.Flight{Rec: rec(0, nil)}
	h.locked(func() { h.ma.Deliver(h.p, f, m) })

	h.clock.Advance(policy.AckTimeout - time.Nanosecond)
	if s, _ := h.state(f); s != I || h.pumps() != 0 {
		t.Fatalf("just before the ack timeout: State %v pumps %d, want InFlight 0", s, h.pumps())
	}
	h.clock.Advance(time.Nanosecond)
	h.locked(func() {
		if f.State != B || f.To != nil || f.LastErr != "ack timeout" || f.Attempt != 1 {
			t.Fatalf("at the ack timeout: State %v To %v LastErr %q Attempt %d, want Backoff nil \"ack timeout\" 1", f.State, f.To, f.LastErr, f.Attempt)
		}
	})
	if h.pumps() != 1 {
		t.Fatalf("pumps after the ack timeout = %d, want 1", h.pumps())
	}
	h.clock.Advance(100*time.Millisecond - time.Nanosecond)
	if s, _ := h.state(f); s != B {
		t.Fatalf("just before the backoff passed: State %v, want Backoff", s)
	}
	h.clock.Advance(time.Nanosecond)
	if s, _ := h.state(f); s != R || h.pumps() != 2 {
		t.Fatalf("after the backoff: State %v pumps %d, want Ready 2", s, h.pumps())
	}
	if n := h.clock.Pending(); n != 0 {
		t.Errorf("pending timers = %d, want 0", n)
	}
}

// TestMachineTimersAfterChange checks that a flight's timer does nothing
// once the flight has moved on or its cursor is no longer active.
func TestMachineTimersAfterChange(t *testing.T) {
	tests := []struct {
		name string
		// change runs under the lock after delivery; its timer is due at
		// AckTimeout from then.
		change      func(h *harness, f *groupstate.Flight, m *groupstate.Member)
		wantState   groupstate.State
		wantPending int // timers left after change
	}{
		{name: "acked", change: func(h *harness, f *groupstate.Flight, m *groupstate.Member) { f.Ack() }, wantState: D},
		{name: "inactive while in flight", change: func(h *harness, f *groupstate.Flight, m *groupstate.Member) { h.p.active = false }, wantState: I, wantPending: 1},
		{name: "inactive in backoff", change: func(h *harness, f *groupstate.Flight, m *groupstate.Member) {
			h.ma.Fail(h.p, f, "nack", true)
			h.p.active = false
		}, wantState: B, wantPending: 1},
		{name: "failed without backoff", change: func(h *harness, f *groupstate.Flight, m *groupstate.Member) {
			h.ma.Fail(h.p, f, "nack", false)
		}, wantState: R},
		{name: "released", change: func(h *harness, f *groupstate.Flight, m *groupstate.Member) {
			w := &groupstate.Window{Flights: []*groupstate.Flight{f}, Next: 1}
			h.ma.Release(h.p, w, m)
		}, wantState: R},
		{name: "window dropped", change: func(h *harness, f *groupstate.Flight, m *groupstate.Member) {
			w := &groupstate.Window{Flights: []*groupstate.Flight{f}, Next: 1}
			w.Drop()
			if w.Next != w.Committed || len(w.Flights) != 0 {
				panic("Drop left flights behind")
			}
		}, wantState: I},
		{name: "skipped with the whole window", change: func(h *harness, f *groupstate.Flight, m *groupstate.Member) {
			w := &groupstate.Window{Flights: []*groupstate.Flight{f}, Next: 1}
			w.SkipTo(1)
		}, wantState: I},
		{name: "skipped with later flights left", change: func(h *harness, f *groupstate.Flight, m *groupstate.Member) {
			w := &groupstate.Window{Flights: []*groupstate.Flight{f, {Rec: rec(1, nil)}}, Next: 2}
			w.SkipTo(1)
			if len(w.Flights) != 1 {
				panic("SkipTo(1) of two flights should keep one")
			}
		}, wantState: I},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(policy)
			m, _ := member("a")
			f := &groupstate.Flight{Rec: rec(0, nil)}
			h.locked(func() {
				h.ma.Deliver(h.p, f, m)
				tt.change(h, f, m)
			})
			if n := h.clock.Pending(); n != tt.wantPending {
				t.Errorf("pending timers after the change = %d, want %d", n, tt.wantPending)
			}
			pumps := h.pumps()
			h.clock.Advance(time.Hour)
			if s, a := h.state(f); s != tt.wantState || a != 1 {
				t.Errorf("after the timers: State %v Attempt %d, want %v 1", s, a, tt.wantState)
			}
			if got := h.pumps(); got != pumps {
				t.Errorf("pumps = %d, want %d (no timer may pump)", got, pumps)
			}
			if len(h.dls) != 0 {
				t.Errorf("dead letters = %d, want 0", len(h.dls))
			}
		})
	}
}

// signalLocker is a mutex that reports each Lock call before blocking, so a
// test can hold it while a timer callback waits for it.
type signalLocker struct {
	sync.Mutex
	locking chan struct{}
}

func (l *signalLocker) Lock() {
	select {
	case l.locking <- struct{}{}:
	default:
	}
	l.Mutex.Lock()
}

// TestMachineStaleTimer fires a timer that is already waiting for the lock
// when its flight moves on to the same state again: the old timer must see
// that it is stale and do nothing.
func TestMachineStaleTimer(t *testing.T) {
	tests := []struct {
		name string
		// setup runs under the lock; due is how far the clock must move
		// for its timer to fire.
		setup func(h *harness, f *groupstate.Flight, m *groupstate.Member)
		due   time.Duration
		// change runs under the lock while the timer waits for it.
		change      func(h *harness, f *groupstate.Flight, m *groupstate.Member)
		wantState   groupstate.State
		wantAttempt int
		wantErr     string
	}{
		{
			name:  "ack timeout after a redelivery",
			setup: func(h *harness, f *groupstate.Flight, m *groupstate.Member) { h.ma.Deliver(h.p, f, m) },
			due:   policy.AckTimeout,
			change: func(h *harness, f *groupstate.Flight, m *groupstate.Member) {
				h.ma.Deliver(h.p, f, m)
			},
			wantState: I, wantAttempt: 2, wantErr: "",
		},
		{
			name: "backoff after a new backoff",
			setup: func(h *harness, f *groupstate.Flight, m *groupstate.Member) {
				h.ma.Deliver(h.p, f, m)
				h.ma.Fail(h.p, f, "first", true)
			},
			due: policy.Backoff(1),
			change: func(h *harness, f *groupstate.Flight, m *groupstate.Member) {
				h.ma.Deliver(h.p, f, m)
				h.ma.Fail(h.p, f, "second", true)
			},
			wantState: B, wantAttempt: 2, wantErr: "second",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(policy)
			mu := &signalLocker{locking: make(chan struct{})}
			h.ma.Mu = mu
			m, _ := member("a")
			f := &groupstate.Flight{Rec: rec(0, nil)}

			mu.Lock()
			tt.setup(h, f, m)
			done := make(chan struct{})
			go func() {
				defer close(done)
				h.clock.Advance(tt.due)
			}()
			<-mu.locking // the timer callback is waiting for the lock
			tt.change(h, f, m)
			mu.Unlock()
			<-done

			mu.Lock()
			defer mu.Unlock()
			if f.State != tt.wantState || f.Attempt != tt.wantAttempt || f.LastErr != tt.wantErr {
				t.Errorf("State %v Attempt %d LastErr %q, want %v %d %q", f.State, f.Attempt, f.LastErr, tt.wantState, tt.wantAttempt, tt.wantErr)
			}
			if h.p.pumps != 0 {
				t.Errorf("pumps = %d, want 0", h.p.pumps)
			}
		})
	}
}

// TestMachineBackoff checks the wait after a failed attempt against
// engine.GroupPolicy.Backoff: BackoffMin doubling per attempt up to
// BackoffMax.
func TestMachineBackoff(t *testing.T) {
	p := policy
	p.MaxAttempts = 10
	tests := []struct {
		name    string
		attempt int
		want    time.Duration
	}{
		{name: "first", attempt: 1, want: 100 * time.Millisecond},
		{name: "second", attempt: 2, want: 200 * time.Millisecond},
		{name: "third", attempt: 3, want: 400 * time.Millisecond},
		{name: "fourth", attempt: 4, want: 800 * time.Millisecond},
		{name: "capped", attempt: 5, want: time.Second},
		{name: "still capped", attempt: 9, want: time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := p.Backoff(tt.attempt); got != tt.want {
				t.Fatalf("policy.Backoff(%d) = %v, want %v", tt.attempt, got, tt.want)
			}
			h := newHarness(p)
			m, _ := member("a")
			f := &groupstate.Flight{Rec: rec(0, nil), Attempt: tt.attempt - 1}
			h.locked(func() {
				h.ma.Deliver(h.p, f, m)
				h.ma.Fail(h.p, f, "nacked", true)
				if f.State != B || f.LastErr != "nacked" || f.To != nil {
					t.Fatalf("after Fail: State %v LastErr %q To %v, want Backoff \"nacked\" nil", f.State, f.LastErr, f.To)
				}
			})
			if n := h.clock.Pending(); n != 1 {
				t.Fatalf("pending timers = %d, want 1 (the ack timer must be stopped)", n)
			}
			h.clock.Advance(tt.want - time.Nanosecond)
			if s, _ := h.state(f); s != B || h.pumps() != 0 {
				t.Fatalf("1ns before the backoff: State %v pumps %d, want Backoff 0", s, h.pumps())
			}
			h.clock.Advance(time.Nanosecond)
			if s, a := h.state(f); s != R || a != tt.attempt || h.pumps() != 1 {
				t.Fatalf("at the backoff: State %v Attempt %d pumps %d, want Ready %d 1", s, a, h.pumps(), tt.attempt)
			}
		})
	}
}

// TestMachineDeadLetter checks when a failure dead-letters and what the
// dead letter holds.
func TestMachineDeadLetter(t *testing.T) {
	tests := []struct {
		name     string
		attempts int // deliveries made before the failure
		how      string
		wantDL   bool
		wantErr  string
		wantNow  time.Time // the dead letter's Time
		wantSt   groupstate.State
		wantPump int
	}{
		{name: "nack before the last attempt", attempts: 3, how: "nack", wantSt: B},
		{name: "nack on the last attempt", attempts: 4, how: "nack", wantDL: true, wantErr: "bad payload", wantSt: D},
		{name: "fail without backoff on the last attempt", attempts: 4, how: "fail now", wantDL: true, wantErr: "bad payload", wantSt: D},
		{name: "fail without backoff before the last attempt", attempts: 1, how: "fail now", wantSt: R},
		{name: "ack timeout on the last attempt", attempts: 4, how: "timeout", wantDL: true, wantErr: "ack timeout", wantSt: D, wantPump: 1},
		{name: "ack timeout before the last attempt", attempts: 3, how: "timeout", wantSt: B, wantPump: 1},
		{name: "past the last attempt", attempts: 6, how: "nack", wantDL: true, wantErr: "bad payload", wantSt: D},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(policy)
			h.clock.Advance(time.Minute) // the dead letter must carry the clock's time, not t0
			m, _ := member("a")
			r := rec(9, map[string]string{"k": "v"})
			r.Key, r.Partition, r.Priority = "key", 2, 3
			f := &groupstate.Flight{Rec: r}
			h.locked(func() {
				for range tt.attempts {
					h.ma.Deliver(h.p, f, m)
				}
			})
			wantTime := h.clock.Now()
			switch tt.how {
			case "nack":
				h.locked(func() { h.ma.Fail(h.p, f, "bad payload", true) })
			case "fail now":
				h.locked(func() { h.ma.Fail(h.p, f, "bad payload", false) })
			case "timeout":
				h.clock.Advance(policy.AckTimeout)
				wantTime = wantTime.Add(policy.AckTimeout)
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			if f.State != tt.wantSt || f.To != nil {
				t.Errorf("State %v To %v, want %v nil", f.State, f.To, tt.wantSt)
			}
			if h.p.pumps != tt.wantPump {
				t.Errorf("pumps = %d, want %d", h.p.pumps, tt.wantPump)
			}
			if !tt.wantDL {
				if len(h.dls) != 0 {
					t.Errorf("dead letters = %+v, want none", h.dls)
				}
				return
			}
			if len(h.dls) != 1 {
				t.Fatalf("dead letters = %d, want 1", len(h.dls))
			}
			dl := h.dls[0]
			want := engine.DeadLetter{
				ID:       "dl-1",
				Reason:   engine.ReasonMaxAttempts,
				Group:    "g",
				Record:   *r,
				Attempts: tt.attempts,
				Error:    tt.wantErr,
				Time:     wantTime,
			}
			if dl.ID != want.ID || dl.Reason != want.Reason || dl.Group != want.Group || dl.Subscriber != "" ||
				dl.Attempts != want.Attempts || dl.Error != want.Error || !dl.Time.Equal(want.Time) {
				t.Errorf("dead letter = %+v, want %+v", *dl, want)
			}
			if got := dl.Record; got.Topic != r.Topic || got.Partition != r.Partition || got.Offset != r.Offset ||
				got.Key != r.Key || string(got.Data) != string(r.Data) || !maps.Equal(got.Headers, r.Headers) ||
				!got.Time.Equal(r.Time) || got.Priority != r.Priority {
				t.Errorf("dead letter record = %+v, want %+v", got, *r)
			}
			if n := h.clock.Pending(); n != 0 {
				t.Errorf("pending timers = %d, want 0 after dead-lettering", n)
			}
		})
	}
}

// TestMachineDeadLetterNotStored: a dead letter the store refuses keeps its
// record owed (the committed offset stays below it) and is tried again,
// the same letter, after the backoff until it is stored; a pending store
// settles later, and a settle for a flight dropped meanwhile does nothing.
func TestMachineDeadLetterNotStored(t *testing.T) {
	errDown := errors.New("store down")
	t.Run("refused then stored", func(t *testing.T) {
		h := newHarness(policy)
		m, _ := member("a")
		w := window(0, R, R)
		f := w.Flights[0]
		h.dlErr = errDown
		h.locked(func() {
			for range policy.MaxAttempts {
				h.ma.Deliver(h.p, f, m)
			}
			h.ma.Fail(h.p, f, "bad payload", true)
			w.Advance()
		})
		h.mu.Lock()
		if f.State != S || w.Committed != 0 || len(h.dls) != 0 {
			t.Fatalf("after a refused store: State %v Committed %d letters %d, want Storing 0 0", f.State, w.Committed, len(h.dls))
		}
		h.mu.Unlock()
		for i := range 3 { // still down: every retry keeps it owed
			h.clock.Advance(policy.BackoffMax)
			if s, _ := h.state(f); s != S {
				t.Fatalf("retry %d: State %v, want Storing", i, s)
			}
		}
		h.locked(func() { h.dlErr = nil })
		h.clock.Advance(policy.BackoffMax)
		h.mu.Lock()
		defer h.mu.Unlock()
		w.Advance()
		if f.State != D || w.Committed != 1 {
			t.Errorf("after the store is back: State %v Committed %d, want Done 1", f.State, w.Committed)
		}
		if len(h.dls) != 1 || h.dls[0].ID != "dl-1" || h.dls[0].Error != "bad payload" || h.dls[0].Attempts != policy.MaxAttempts {
			t.Errorf("dead letters = %+v, want the first letter (dl-1) once", h.dls)
		}
		if h.p.pumps != 4 {
			t.Errorf("pumps = %d, want one per retry (4)", h.p.pumps)
		}
	})
	t.Run("pending", func(t *testing.T) {
		h := newHarness(policy)
		m, _ := member("a")
		w := window(0, R, R)
		h.dlErr = groupstate.ErrPending
		h.locked(func() {
			for _, f := range w.Flights {
				for range policy.MaxAttempts {
					h.ma.Deliver(h.p, f, m)
				}
				h.ma.Fail(h.p, f, "nack", true)
			}
		})
		h.mu.Lock()
		defer h.mu.Unlock()
		if got := states(w); !slices.Equal(got, []groupstate.State{S, S}) || len(h.pending) != 2 {
			t.Fatalf("states %v pending %d, want [Storing Storing] 2", got, len(h.pending))
		}
		h.dlErr = nil
		h.pending[0](errDown) // the first store failed: retried after the backoff
		h.pending[1](nil)
		h.pending[1](errDown) // a second settle is ignored
		if got := states(w); !slices.Equal(got, []groupstate.State{S, D}) || h.p.pumps != 2 {
			t.Fatalf("after settling: states %v pumps %d, want [Storing Done] 2", got, h.p.pumps)
		}
		h.mu.Unlock()
		h.clock.Advance(policy.BackoffMax)
		h.mu.Lock()
		w.Advance()
		if w.Committed != 2 || len(h.dls) != 1 {
			t.Errorf("after the retry: Committed %d letters %d, want 2 1", w.Committed, len(h.dls))
		}
	})
	t.Run("settle after drop", func(t *testing.T) {
		h := newHarness(policy)
		m, _ := member("a")
		w := window(0, R)
		f := w.Flights[0]
		h.dlErr = groupstate.ErrPending
		h.locked(func() {
			for range policy.MaxAttempts {
				h.ma.Deliver(h.p, f, m)
			}
			h.ma.Fail(h.p, f, "nack", true)
			w.Drop()
			h.pending[0](errDown)
		})
		if n := h.clock.Pending(); n != 0 || h.pumps() != 0 {
			t.Errorf("pending timers %d pumps %d after a settle of a dropped flight, want 0 0", n, h.pumps())
		}
	})
}

// TestMachineRelease checks that a leaving member's flights go back at once
// (or to the dead letters on their last attempt) and nothing else changes.
func TestMachineRelease(t *testing.T) {
	h := newHarness(policy)
	a, _ := member("a")
	b, _ := member("b")
	w := &groupstate.Window{}
	for i := range 5 {
		w.Flights = append(w.Flights, &groupstate.Flight{Rec: rec(int64(i), nil)})
	}
	w.Next = 5
	h.locked(func() {
		h.ma.Deliver(h.p, w.Flights[0], a) // leased to a
		h.ma.Deliver(h.p, w.Flights[1], b) // leased to b
		// w.Flights[2] stays Ready
		h.ma.Deliver(h.p, w.Flights[3], a)
		h.ma.Fail(h.p, w.Flights[3], "nack", true) // a's, but in backoff
		for range policy.MaxAttempts {
			h.ma.Deliver(h.p, w.Flights[4], a) // a's last attempt
		}
		h.ma.Release(h.p, w, a)
	})

	h.mu.Lock()
	if got := states(w); !slices.Equal(got, []groupstate.State{R, I, R, B, D}) {
		t.Errorf("states = %v, want [Ready InFlight Ready Backoff Done]", got)
	}
	f0 := w.Flights[0]
	if f0.To != nil || f0.LastErr != "member left" || f0.Attempt != 1 {
		t.Errorf("released flight: To %v LastErr %q Attempt %d, want nil \"member left\" 1", f0.To, f0.LastErr, f0.Attempt)
	}
	if w.Flights[1].To != b || w.Flights[1].LastErr != "" {
		t.Errorf("another member's flight changed: To %v LastErr %q", w.Flights[1].To, w.Flights[1].LastErr)
	}
	if w.Flights[3].LastErr != "nack" {
		t.Errorf("flight in backoff: LastErr %q, want \"nack\"", w.Flights[3].LastErr)
	}
	if len(h.dls) != 1 || h.dls[0].Record.Offset != 4 || h.dls[0].Error != "member left" || h.dls[0].Attempts != policy.MaxAttempts {
		t.Errorf("dead letters = %+v, want offset 4 with \"member left\" after %d attempts", h.dls, policy.MaxAttempts)
	}
	if h.p.pumps != 0 {
		t.Errorf("pumps = %d, want 0 (the caller pumps)", h.p.pumps)
	}
	h.mu.Unlock()

	// Only b's ack timer and flight 3's backoff timer remain; the released
	// flight's ack timeout must not fire.
	if n := h.clock.Pending(); n != 2 {
		t.Errorf("pending timers = %d, want 2", n)
	}
	h.clock.Advance(policy.AckTimeout)
	if s, at := h.state(f0); s != R || at != 1 {
		t.Errorf("released flight after the ack timeout: State %v Attempt %d, want Ready 1", s, at)
	}
}
