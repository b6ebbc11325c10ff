package session

import "testing"

// The table keeps just past the highest slot in use: a socket does not
// move to a lower slot while parked (its epoll registration names its
// slot), so one that parked last in a peak keeps the table up to it until
// it resumes; then the table shrinks.

// TestSlotTableShrinksWhenOneHighSlotStaysParked: after a peak, the one
// socket still parked is the one that parked last (the highest slot, as
// the longest-idle client of a burst would hold). The table keeps its
// slots up to that one, no more, while later traffic parks and resumes
// in the low slots; once it resumes, the table gives its memory back (at
// most about 8 slots for each in use, or 128).
func TestSlotTableShrinksWhenOneHighSlotStaysParked(t *testing.T) {
	const peak = 10000
	var tb slotTable
	slots := make([]int32, peak)
	for i := range slots {
		slots[i], _ = tb.take(new(parkState))
	}
	for i := range peak - 1 {
		tb.release(slots[i])
	}
	// Later traffic: sessions park and resume many times over.
	for range 4 * peak {
		s, _ := tb.take(new(parkState))
		if s >= slots[peak-1] {
			t.Fatalf("a socket took slot %d, above the highest in use %d", s, slots[peak-1])
		}
		tb.release(s)
	}
	if tb.used != 1 {
		t.Fatalf("%d slots in use, want 1", tb.used)
	}
	high := int(slots[peak-1]) + 1
	if c := cap(tb.slots); c > 2*high {
		t.Fatalf("with 1 socket parked in slot %d the table keeps %d slots, want at most %d", high-1, c, 2*high)
	}
	tb.release(slots[peak-1])
	for range peak / 8 {
		s, _ := tb.take(new(parkState))
		tb.release(s)
	}
	bound := 8*tb.used + 2*minPollSlots
	if c, fc := cap(tb.slots), cap(tb.free); c > bound || fc > 2*bound {
		t.Fatalf("with the high slot resumed the table keeps %d slots and %d free entries, want at most %d", c, fc, bound)
	}
}

// TestSlotTableShrinksAfterPeakReleasedInOrder: the sockets of a peak
// resumed in the order they parked (oldest first), all but the last 10,
// which hold the highest slots: the table keeps its slots up to them; once
// they resume and traffic goes on in the low slots, it shrinks.
func TestSlotTableShrinksAfterPeakReleasedInOrder(t *testing.T) {
	const peak, keep = 10000, 10
	var tb slotTable
	slots := make([]int32, peak)
	for i := range slots {
		slots[i], _ = tb.take(new(parkState))
	}
	for i := range peak - keep {
		tb.release(slots[i])
	}
	if c := cap(tb.slots); c > 2*peak {
		t.Fatalf("with %d sockets parked up to slot %d the table keeps %d slots, want at most %d", keep, slots[peak-1], c, 2*peak)
	}
	for _, s := range slots[peak-keep:] {
		tb.release(s)
	}
	for range peak / 8 {
		s, _ := tb.take(new(parkState))
		tb.release(s)
	}
	bound := 8*keep + 2*minPollSlots
	if c, fc := cap(tb.slots), cap(tb.free); c > bound || fc > 2*bound {
		t.Fatalf("after the peak of %d released oldest first the table keeps %d slots and %d free entries, want at most %d", peak, c, fc, bound)
	}
}
