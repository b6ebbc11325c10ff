package session

import "testing"

// TestSlotTableShrinksAfterPeak: after a peak of parked sockets the table
// gives its memory back once most of it is free, keeping the slots in use
// (the lowest, which new sockets take first), and an event armed with the
// generation of a slot that was given up finds nothing, even once the
// table has grown back over it.
func TestSlotTableShrinksAfterPeak(t *testing.T) {
	const peak, keep = 10000, 10
	var tb slotTable
	sessions := make([]*parkState, peak)
	slots := make([]int32, peak)
	gens := make([]uint32, peak)
	for i := range sessions {
		sessions[i] = new(parkState)
		slots[i], gens[i] = tb.take(sessions[i])
	}
	if c := cap(tb.slots); c < peak {
		t.Fatalf("table of %d slots for %d sockets", c, peak)
	}
	for i := peak - 1; i >= keep; i-- {
		tb.release(slots[i])
	}
	if tb.used != keep {
		t.Fatalf("%d slots in use, want %d", tb.used, keep)
	}
	bound := 8*keep + 2*minPollSlots
	if c, fc := cap(tb.slots), cap(tb.free); c > bound || fc > 2*bound {
		t.Fatalf("after the peak of %d the table keeps %d slots and %d free entries for %d sockets", peak, c, fc, keep)
	}
	for i := range keep {
		if got := tb.get(slots[i], gens[i]); got != sessions[i] {
			t.Fatalf("slot %d lost its socket in the shrink", slots[i])
		}
	}
	// Grown back over the slots given up: the old events find nothing.
	for range peak - keep {
		tb.take(new(parkState))
	}
	for i := keep; i < peak; i++ {
		if got := tb.get(slots[i], gens[i]); got != nil {
			t.Fatalf("an event of slot %d's old generation %d found a socket", slots[i], gens[i])
		}
	}
}

// TestSlotTableTakesLowestFree: a new socket takes the lowest free slot,
// so that the slots in use gather at the start of the table.
func TestSlotTableTakesLowestFree(t *testing.T) {
	var tb slotTable
	for range 8 {
		tb.take(new(parkState))
	}
	for _, s := range []int32{6, 2, 4} {
		tb.release(s)
	}
	for _, want := range []int32{2, 4, 6, 8} {
		if got, _ := tb.take(new(parkState)); got != want {
			t.Fatalf("took slot %d, want %d", got, want)
		}
	}
}
