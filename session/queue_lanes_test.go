package session

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The lanes of a queue come from a pool shared by all queues and go back
// to it when the writer parks (Shrink). These tests check that a lane is
// never shared between queues or kept after it went back, and that the
// policies and gap bookkeeping hold across a lane's return.

// TestLanesPoolSharedByQueues runs several queues at once, each with
// producers on every priority and one consumer that drains and shrinks as
// a parking writer does, so that lanes go to the pool and come back to
// other queues all the time: every queue delivers exactly its own frames,
// byte for byte, each producer's in order.
func TestLanesPoolSharedByQueues(t *testing.T) {
	const queues, producers, perProducer = 4, 4, 400
	qs := make([]*Queue, queues)
	for i := range qs {
		qs[i] = NewQueue(Options{EncodeGap: testGap, QueueMessages: producers * perProducer})
	}
	frame := func(qi, p, off int) []byte {
		// A payload long enough that a frame from another queue or a
		// zeroed slot cannot pass for one of this queue's.
		return []byte(fmt.Sprintf("q%d.p%d:%d:%s", qi, p, off, strings.Repeat(strconv.Itoa(qi), 24)))
	}
	deadline := time.Now().Add(20 * time.Second)
	var wg sync.WaitGroup
	got := make([][]string, queues)
	for qi, q := range qs {
		var pw sync.WaitGroup
		for p := range producers {
			pw.Add(1)
			go func() {
				defer pw.Done()
				for off := range perProducer {
					it := Item{Frame: frame(qi, p, off), Stream: Stream{Sub: uint64(p + 1), Topic: "t"},
						Offset: int64(off), Priority: uint8(p), Policy: DropOld}
					if out := q.Push(it); out != Queued {
						t.Errorf("queue %d producer %d offset %d: %v", qi, p, off, out)
						return
					}
				}
			}()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			producing := make(chan struct{})
			go func() { pw.Wait(); close(producing) }()
			var buf []byte
			for {
				var n int
				buf, n = q.AppendBatch(buf[:0], 128)
				// Shrink after every batch: with the producers pushing
				// meanwhile it often meets a queue just emptied or just
				// filled again; it must give back only what is empty.
				q.Shrink()
				if n > 0 {
					got[qi] = append(got[qi], strings.Split(string(buf), "\n")...)
					continue
				}
				select {
				case <-producing:
					if !q.Pending() {
						return
					}
				default:
				}
				if time.Now().After(deadline) {
					t.Errorf("queue %d: not drained in time", qi)
					return
				}
				select {
				case <-q.Ready():
				case <-producing:
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
	for qi := range qs {
		next := make([]int, producers)
		for _, f := range got[qi] {
			var q, p, off int
			if _, err := fmt.Sscanf(f, "q%d.p%d:%d:", &q, &p, &off); err != nil || q != qi || p < 0 || p >= producers {
				t.Fatalf("queue %d delivered %q, not one of its frames", qi, f)
			}
			if want := string(frame(qi, p, off)); f != want {
				t.Fatalf("queue %d delivered %q, want %q", qi, f, want)
			}
			if off != next[p] {
				t.Fatalf("queue %d producer %d: offset %d after %d", qi, p, off, next[p]-1)
			}
			next[p]++
		}
		for p, n := range next {
			if n != perProducer {
				t.Fatalf("queue %d producer %d: %d frames delivered, want %d", qi, p, n, perProducer)
			}
		}
	}
}

// TestLanesPoliciesAcrossShrink: after the lanes went back to the pool,
// the lanes made anew still evict lower priorities first, drop-new and
// disconnect refuse as before, and a drop's gap comes before the stream's
// next message; a lane of another queue made meanwhile holds nothing of
// this one's.
func TestLanesPoliciesAcrossShrink(t *testing.T) {
	var dropped []string
	q := NewQueue(Options{EncodeGap: testGap, QueueMessages: 2,
		OnDrop: func(it *Item) { dropped = append(dropped, string(it.Frame)) }})
	other := NewQueue(Options{EncodeGap: testGap, QueueMessages: 8})
	for round := range 3 {
		base := int64(10 * round)
		q.Push(msg(1, base, 0, DropOld))
		q.Push(msg(2, base, 1, DropOld))
		if got := drain(q, 1<<20); !slices.Equal(got, []string{"m2:" + itoa(base), "m1:" + itoa(base)}) {
			t.Fatalf("round %d: drained %q", round, got)
		}
		q.Shrink()
		if n := lanesHeld(q); n != 0 {
			t.Fatalf("round %d: %d lanes held after Shrink", round, n)
		}
		// Another queue takes lanes from the pool meanwhile.
		other.Push(msg(9, base, 0, DropOld))
		other.Push(msg(9, base+1, 1, DropOld))

		q.Push(msg(1, base+1, 0, DropOld))
		q.Push(msg(1, base+2, 0, DropOld))
		if out := q.Push(msg(3, base+1, 3, DropNew)); out != Queued { // evicts m1:base+1
			t.Fatalf("round %d: push over a lower lane = %v, want queued", round, out)
		}
		if out := q.Push(msg(4, base+1, 0, DropNew)); out != Dropped {
			t.Fatalf("round %d: drop-new on a full queue = %v, want dropped", round, out)
		}
		if out := q.Push(msg(5, base+1, 0, Disconnect)); out != Overflow {
			t.Fatalf("round %d: disconnect on a full queue = %v, want overflow", round, out)
		}
		want := []string{"m3:" + itoa(base+1), "g1:" + itoa(base+1) + "-" + itoa(base+2), "m1:" + itoa(base+2), "g4:" + itoa(base+1) + "-" + itoa(base+2)}
		if got := drain(q, 1<<20); !slices.Equal(got, want) {
			t.Fatalf("round %d: drained %q, want %q", round, got, want)
		}
		q.Shrink()
		// m9 keeps its stream's lane (0) while it has items queued.
		if got := drain(other, 1<<20); !slices.Equal(got, []string{"m9:" + itoa(base), "m9:" + itoa(base+1)}) {
			t.Fatalf("round %d: the other queue drained %q", round, got)
		}
		other.Shrink()
		checkInvariants(t, q)
		checkInvariants(t, other)
	}
	want := []string{"m1:1", "m4:1", "m1:11", "m4:11", "m1:21", "m4:21"}
	if !slices.Equal(dropped, want) {
		t.Fatalf("OnDrop saw %q, want %q", dropped, want)
	}
	if st := q.Stats(); st.Dropped != 6 || st.Gaps != 6 {
		t.Fatalf("stats %+v, want 6 dropped and 6 gaps", st)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestLanesShrinkKeepsPendingGaps: Shrink with a gap pending (nothing
// queued) leaves the queue as it is, and the gap goes out after.
func TestLanesShrinkKeepsPendingGaps(t *testing.T) {
	q := NewQueue(Options{EncodeGap: testGap, QueueMessages: 1})
	q.Push(msg(1, 0, 2, DropOld))
	q.Push(msg(1, 1, 2, DropOld)) // evicts offset 0
	q.Push(msg(2, 0, 2, DropNew)) // dropped
	if got := drain(q, 1<<20); !slices.Equal(got, []string{"g1:0-1", "m1:1", "g2:0-1"}) {
		t.Fatalf("drained %q", got)
	}
	q.Push(msg(2, 1, 0, DropOld))
	q.Push(msg(2, 2, 0, DropNew)) // dropped: a gap pending behind m2:1
	q.Shrink()                    // items queued: nothing given back
	if got := drain(q, 1<<20); !slices.Equal(got, []string{"m2:1", "g2:2-3"}) {
		t.Fatalf("drained %q", got)
	}
	q.Shrink()
	if n := lanesHeld(q); n != 0 || q.Pending() {
		t.Fatalf("after draining: %d lanes, pending %v", n, q.Pending())
	}
}

// TestLanesOnDropItemPerQueue: two queues dropping from goroutines of
// their own each hand OnDrop their own item, whole, never the other
// queue's nor a zeroed one.
func TestLanesOnDropItemPerQueue(t *testing.T) {
	const n = 2000
	var wg sync.WaitGroup
	for qi := range 2 {
		var bad []string
		q := NewQueue(Options{EncodeGap: testGap, QueueMessages: 1,
			OnDrop: func(it *Item) {
				if want := fmt.Sprintf("m%d:%d", qi+1, it.Offset); string(it.Frame) != want || it.Stream.Sub != uint64(qi+1) {
					bad = append(bad, fmt.Sprintf("%q (sub %d, offset %d)", it.Frame, it.Stream.Sub, it.Offset))
				}
			}})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for off := range int64(n) {
				q.Push(msg(uint64(qi+1), off, uint8(off%numLanes), DropOld))
				if off%7 == 0 {
					drain(q, 1<<20)
					q.Shrink()
				}
			}
			if len(bad) > 0 {
				t.Errorf("queue %d: OnDrop saw %d foreign items, first %s", qi, len(bad), bad[0])
			}
		}()
	}
	wg.Wait()
}
