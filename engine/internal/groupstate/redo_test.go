package groupstate_test

import (
	"slices"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/groupstate"
)

func redoOffsets(w *groupstate.Window) []int64 {
	var out []int64
	for _, f := range w.Redo {
		out = append(out, f.Rec.Offset)
	}
	return out
}

// TestWindowRedeliver: a redriven record below the committed offset gets a
// Ready flight in Redo (in offset order, once while pending); a Done one
// inside the window is Ready again; a pending one, or one past Next, gets
// nothing new; the committed offset never moves back.
func TestWindowRedeliver(t *testing.T) {
	w := window(5, D, I, D) // committed 5, next 8
	for _, off := range []int64{3, 1, 3} {
		w.Redeliver(rec(off, nil))
	}
	if got := redoOffsets(w); !slices.Equal(got, []int64{1, 3}) {
		t.Fatalf("Redo offsets %v, want [1 3]", got)
	}
	if f := w.Redeliver(rec(5, nil)); f == nil || f.State != R || f.Attempt != 0 || w.Flights[0] != f {
		t.Fatalf("Done flight at offset 5 not reopened: %+v", f)
	}
	if f := w.Redeliver(rec(6, nil)); f != nil {
		t.Errorf("in-flight offset 6 got a new flight %+v", f)
	}
	if f := w.Redeliver(rec(9, nil)); f != nil {
		t.Errorf("offset 9 past Next got a flight %+v", f)
	}
	if w.Committed != 5 || w.Next != 8 {
		t.Fatalf("window moved to [%d, %d), want [5, 8)", w.Committed, w.Next)
	}
	out, _, _ := w.Load(nil)
	if out != 4 { // two in Redo, offsets 5 and 6
		t.Errorf("outstanding %d, want 4: Redo counts in the window", out)
	}
	w.Redo[0].Ack()
	w.Advance()
	if got := redoOffsets(w); !slices.Equal(got, []int64{3}) {
		t.Errorf("after acking offset 1 and Advance: Redo %v, want [3]", got)
	}
	w.Drop()
	if len(w.Redo) != 0 {
		t.Errorf("Drop left Redo %v", redoOffsets(w))
	}
}

// TestMachineRedeliverAttempts: a redriven flight starts at attempt 1, is
// found by InFlightAt, and is dead-lettered again after its attempts.
func TestMachineRedeliverAttempts(t *testing.T) {
	p := policy
	p.MaxAttempts = 2
	h := newHarness(p)
	m, c := member("a")
	w := &groupstate.Window{Committed: 10, Next: 10}
	h.locked(func() {
		w.Redeliver(rec(4, nil))
		h.ma.DeliverReady(h.p, w, m)
	})
	got := c.deliveries()
	if len(got) != 1 || got[0].Record.Offset != 4 || got[0].Attempt != 1 {
		t.Fatalf("deliveries %+v, want offset 4 attempt 1", got)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		h.locked(func() {
			f := w.InFlightAt(4)
			if f == nil {
				t.Fatalf("attempt %d: offset 4 not in flight", attempt)
			}
			h.ma.Fail(h.p, f, "no", false)
			h.ma.DeliverReady(h.p, w, m)
		})
	}
	if len(h.dls) != 1 || h.dls[0].Record.Offset != 4 || h.dls[0].Attempts != 2 {
		t.Fatalf("dead letters %+v, want offset 4 after 2 attempts", h.dls)
	}
	h.locked(w.Advance)
	if len(w.Redo) != 0 || w.Committed != 10 {
		t.Errorf("after the dead letter: Redo %v, committed %d; want none, 10", redoOffsets(w), w.Committed)
	}
}

// TestRedeliverWhileStoring: a record redriven while its dead letter is
// still being stored is Ready again, with no attempts, once the store
// succeeds, instead of Done.
func TestRedeliverWhileStoring(t *testing.T) {
	p := policy
	p.MaxAttempts = 1
	h := newHarness(p)
	h.dlErr = groupstate.ErrPending
	m, _ := member("a")
	w := &groupstate.Window{Committed: 0, Next: 1, Flights: []*groupstate.Flight{{Rec: rec(0, nil)}}}
	h.locked(func() {
		h.ma.DeliverReady(h.p, w, m)
		h.ma.Fail(h.p, w.Flights[0], "no", false)
	})
	if st, _ := h.state(w.Flights[0]); st != S || len(h.pending) != 1 {
		t.Fatalf("state %v with %d stores pending, want Storing with 1", st, len(h.pending))
	}
	var f *groupstate.Flight
	h.locked(func() { f = w.Redeliver(&engine.Record{Topic: "t", Offset: 0}) })
	if f != w.Flights[0] {
		t.Fatalf("Redeliver of a Storing flight returned %p, want the flight", f)
	}
	h.locked(func() { h.pending[0](nil) })
	if st, a := h.state(f); st != R || a != 0 {
		t.Errorf("after the letter was stored: state %v attempt %d, want Ready 0", st, a)
	}
}

// TestSkipKeepsRedo: retention skipping the whole window keeps the
// redeliveries below it: the records are in their flights already.
func TestSkipKeepsRedo(t *testing.T) {
	w := window(5, D, R)
	w.Redeliver(rec(2, nil))
	w.SkipTo(20)
	if w.Committed != 20 || len(w.Flights) != 0 {
		t.Fatalf("after SkipTo(20): committed %d with %d flights, want 20 and none", w.Committed, len(w.Flights))
	}
	if got := redoOffsets(w); !slices.Equal(got, []int64{2}) {
		t.Errorf("Redo %v after SkipTo, want [2]", got)
	}
}
