package session

import (
	"slices"
	"testing"
)

// fallbackRef is the Ref of a test item whose frame depends on the one
// before it.
type fallbackRef string

func (f fallbackRef) FallbackFrame() []byte { return []byte(f) }

func dependent(off int64, full string) Item {
	it := msg(1, off, 0, DropOld)
	it.Frame = append([]byte("d"), it.Frame...)
	it.Ref = fallbackRef(full)
	return it
}

// TestFallbackAfterDrop: an item whose Ref is a Fallback is written as its
// fallback frame when messages of its stream before it were dropped, and
// as itself otherwise.
func TestFallbackAfterDrop(t *testing.T) {
	q := NewQueue(Options{QueueMessages: 2, EncodeGap: testGap})
	for _, it := range []Item{msg(1, 0, 0, DropOld), dependent(1, "full1"), dependent(2, "full2")} {
		if got := q.Push(it); got != Queued {
			t.Fatalf("Push(%s) = %v", it.Frame, got)
		}
	}
	// The push of 2 evicted 0, which 1 depended on; 2 depends on 1, which
	// is written.
	if got, want := drain(q, 1<<20), []string{"g1:0-1", "full1", "dm1:2"}; !slices.Equal(got, want) {
		t.Fatalf("drained %q, want %q", got, want)
	}
	for _, it := range []Item{dependent(3, "full3"), dependent(4, "full4")} {
		it.Dropped = q.drops.Load() // chosen after the drop
		q.Push(it)
	}
	if got, want := drain(q, 1<<20), []string{"dm1:3", "dm1:4"}; !slices.Equal(got, want) {
		t.Fatalf("drained %q, want %q", got, want)
	}
}
