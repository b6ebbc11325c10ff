package session

import (
	"slices"
	"testing"
)

// TestFallbackAfterGapWritten: a delta chosen while its base was
// queued, pushed after the queue dropped that base and wrote its gap (the
// stream had nothing else queued), must be written as its fallback frame:
// the client no longer holds the base, and the delta alone is undecodable.
func TestFallbackAfterGapWritten(t *testing.T) {
	q := NewQueue(Options{QueueMessages: 1, EncodeGap: testGap})
	if got := q.Push(msg(1, 0, 0, DropOld)); got != Queued {
		t.Fatalf("Push(base) = %v", got)
	}
	// The router chooses the delta of offset 1 against offset 0, queued.
	delta := dependent(1, "full1")
	// Meanwhile another stream's message evicts the base, and the writer
	// takes the gap at once.
	if got := q.Push(msg(2, 0, 0, DropOld)); got != Queued {
		t.Fatalf("Push(other) = %v", got)
	}
	if got, want := drain(q, 1<<20), []string{"m2:0", "g1:0-1"}; !slices.Equal(got, want) {
		t.Fatalf("drained %q, want %q", got, want)
	}
	// Then the delta is pushed.
	q.Push(delta)
	if got, want := drain(q, 1<<20), []string{"full1"}; !slices.Equal(got, want) {
		t.Fatalf("drained %q, want %q: a delta written after its base's gap", got, want)
	}
}
