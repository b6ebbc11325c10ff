package session

import (
	"slices"
	"strconv"
	"testing"
)

// op is one step of a queue scenario: a push with its expected outcome, or
// a drain (in batches of at most max bytes, default large) with the frames
// expected.
type op struct {
	push   *Item
	want   Outcome
	drain  bool
	max    int
	frames []string
}

func push(it Item, want Outcome) op { return op{push: &it, want: want} }
func drained(frames ...string) op   { return op{drain: true, frames: frames} }
func drainedBy(max int, frames ...string) op {
	return op{drain: true, max: max, frames: frames}
}

func TestQueue(t *testing.T) {
	const Q, D, O = Queued, Dropped, Overflow
	tests := []struct {
		name  string
		limit int
		ops   []op
	}{
		{"drop_old evicts the oldest", 2, []op{
			push(msg(1, 0, 0, DropOld), Q),
			push(msg(1, 1, 0, DropOld), Q),
			push(msg(1, 2, 0, DropOld), Q),
			drained("g1:0-1", "m1:1", "m1:2"),
		}},
		{"drop_new drops the incoming", 2, []op{
			push(msg(1, 0, 0, DropNew), Q),
			push(msg(1, 1, 0, DropNew), Q),
			push(msg(1, 2, 0, DropNew), D),
			drained("m1:0", "m1:1", "g1:2-3"),
		}},
		{"disconnect overflows", 2, []op{
			push(msg(1, 0, 0, Disconnect), Q),
			push(msg(1, 1, 0, Disconnect), Q),
			push(msg(1, 2, 0, Disconnect), O),
			drained("m1:0", "m1:1"),
		}},
		{"reliable exceeds the bound up to four times", 1, []op{
			push(msg(1, 0, 0, DropNew), Q),
			push(msg(2, 0, 0, Reliable), Q),
			push(msg(2, 1, 0, Reliable), Q),
			push(msg(2, 2, 0, Reliable), Q),
			push(msg(2, 3, 0, Reliable), Q),
			push(msg(2, 4, 0, Reliable), O),
			push(msg(1, 1, 0, DropNew), D),
			drained("m1:0", "m2:0", "m2:1", "m2:2", "m2:3", "g1:1-2"),
		}},
		{"control is never dropped, overflows past four times", 1, []op{
			push(msg(1, 0, 0, DropOld), Q),
			push(ctl("a"), Q),
			push(ctl("b"), Q),
			push(ctl("c"), Q),
			push(ctl("d"), Q),
			push(ctl("e"), ControlFull),
			drained("c:a", "c:b", "c:c", "c:d", "m1:0"),
		}},
		{"higher priority evicts lower first", 3, []op{
			push(msg(1, 0, 0, DropNew), Q),
			push(msg(2, 0, 1, DropNew), Q),
			push(msg(3, 0, 2, DropNew), Q),
			push(msg(4, 0, 3, DropNew), Q), // evicts 1:0
			push(msg(5, 0, 3, DropNew), Q), // evicts 2:0
			push(msg(6, 0, 3, DropNew), Q), // evicts 3:0
			push(msg(7, 0, 3, DropNew), D), // nothing lower left
			drained("m4:0", "m5:0", "m6:0", "g1:0-1", "g2:0-1", "g3:0-1", "g7:0-1"),
		}},
		{"lower priority drop_old does not evict higher", 2, []op{
			push(msg(2, 0, 2, DropOld), Q),
			push(msg(2, 1, 2, DropOld), Q),
			push(msg(1, 0, 0, DropOld), D),
			drained("m2:0", "m2:1", "g1:0-1"),
		}},
		{"drop_old does not evict drop_new messages", 2, []op{
			push(msg(1, 0, 1, DropNew), Q),
			push(msg(1, 1, 1, DropNew), Q),
			push(msg(2, 0, 1, DropOld), D),
			drained("m1:0", "m1:1", "g2:0-1"),
		}},
		{"disconnect messages are not evicted by priority", 1, []op{
			push(msg(1, 0, 0, Disconnect), Q),
			push(msg(2, 0, 3, DropOld), D),
			drained("m1:0", "g2:0-1"),
		}},
		{"drop_old evicts from the middle of a lane", 3, []op{
			push(msg(1, 0, 0, Disconnect), Q),
			push(msg(2, 0, 0, DropOld), Q),
			push(msg(3, 0, 0, DropOld), Q),
			push(msg(4, 0, 0, DropOld), Q), // evicts 2:0, a tombstone
			drained("m1:0", "m3:0", "m4:0", "g2:0-1"),
		}},
		{"priority order across streams, control first", 8, []op{
			push(msg(1, 0, 0, DropOld), Q),
			push(msg(2, 0, 3, DropOld), Q),
			push(msg(3, 0, 1, DropOld), Q),
			push(msg(4, 0, 2, DropOld), Q),
			push(msg(5, 0, 9, DropOld), Q), // above 3 counts as 3
			push(ctl("x"), Q),
			push(ctl("y"), Q),
			drained("c:x", "c:y", "m2:0", "m5:0", "m4:0", "m3:0", "m1:0"),
		}},
		{"no reorder within a stream with mixed priorities", 8, []op{
			push(msg(1, 0, 0, DropOld), Q),
			push(msg(1, 1, 3, DropOld), Q), // joins lane 0 behind 1:0
			push(msg(2, 0, 2, DropOld), Q),
			push(msg(1, 2, 1, DropOld), Q),
			drained("m2:0", "m1:0", "m1:1", "m1:2"),
			// Once drained, the stream takes its item's priority again.
			push(msg(2, 1, 0, DropOld), Q),
			push(msg(1, 3, 3, DropOld), Q),
			drained("m1:3", "m2:1"),
		}},
		{"contiguous gaps merge", 1, []op{
			push(msg(1, 0, 0, DropNew), Q),
			push(msg(1, 1, 0, DropNew), D),
			push(msg(1, 2, 0, DropNew), D),
			push(msg(1, 3, 0, DropNew), D),
			drained("m1:0", "g1:1-4"),
		}},
		{"gaps merge across an out of order eviction", 3, []op{
			push(msg(1, 0, 0, DropNew), Q),
			push(msg(1, 1, 0, DropNew), Q),
			push(msg(1, 2, 0, DropNew), Q),
			push(msg(1, 3, 0, DropNew), D), // gap 3
			push(msg(2, 0, 1, DropNew), Q), // evicts 1:0
			push(msg(2, 1, 1, DropNew), Q), // evicts 1:1
			push(msg(2, 2, 1, DropNew), Q), // evicts 1:2: 0..3 merge
			drained("m2:0", "m2:1", "m2:2", "g1:0-4"),
		}},
		{"gaps of skipped offsets do not merge", 1, []op{
			push(msg(1, 0, 0, DropNew), Q),
			push(msg(1, 5, 0, DropNew), D),
			push(msg(1, 7, 0, DropNew), D),
			drained("m1:0", "g1:5-6", "g1:7-8"),
		}},
		{"gap written before the stream's next message", 1, []op{
			push(msg(1, 0, 0, DropNew), Q),
			push(msg(1, 1, 0, DropNew), D),
			push(msg(1, 2, 0, DropNew), D),
			drainedBy(4, "m1:0"), // no room for the gap in this batch
			push(msg(1, 3, 0, DropNew), Q),
			drainedBy(4, "g1:1-3"),
			drainedBy(4, "m1:3"),
		}},
		{"gap written before the next message in the same batch", 2, []op{
			push(msg(1, 0, 0, DropOld), Q),
			push(msg(1, 1, 0, DropOld), Q),
			push(msg(2, 0, 1, DropOld), Q), // evicts 1:0 from under 1:1
			drained("m2:0", "g1:0-1", "m1:1"),
		}},
		{"gap flushed at batch end when the stream is idle", 1, []op{
			push(msg(1, 0, 0, DropNew), Q),
			push(msg(2, 0, 0, DropNew), D),
			drained("m1:0", "g2:0-1"),
			drained(),
		}},
		{"gap after the stream's queued messages", 2, []op{
			push(msg(1, 0, 0, DropNew), Q),
			push(msg(1, 1, 0, DropNew), Q),
			push(msg(1, 2, 0, DropNew), D),
			drainedBy(4, "m1:0"),
			drainedBy(4, "m1:1"),
			drainedBy(4, "g1:2-3"),
			drained(),
		}},
		{"closed queue refuses and still drains", 2, []op{
			push(msg(1, 0, 0, DropOld), Q),
			{push: nil}, // Close
			push(msg(1, 1, 0, DropOld), Closed),
			push(ctl("late"), Closed),
			drained("m1:0"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := NewQueue(Options{QueueMessages: tt.limit, EncodeGap: testGap})
			for i, o := range tt.ops {
				switch {
				case o.drain:
					max := o.max
					if max == 0 {
						max = 1 << 20
					}
					if o.max > 0 {
						// One batch only.
						buf, n := q.AppendBatch(nil, max)
						var got []string
						if n > 0 {
							got = splitFrames(buf)
						}
						if !slices.Equal(got, o.frames) {
							t.Fatalf("op %d: batch = %q, want %q", i, got, o.frames)
						}
						continue
					}
					if got := drain(q, max); !slices.Equal(got, o.frames) {
						t.Fatalf("op %d: drained %q, want %q", i, got, o.frames)
					}
				case o.push == nil:
					q.Close()
				default:
					if got := q.Push(*o.push); got != o.want {
						t.Fatalf("op %d: Push(%s) = %v, want %v", i, o.push.Frame, got, o.want)
					}
				}
				checkInvariants(t, q)
			}
		})
	}
}

func splitFrames(b []byte) []string {
	var out []string
	for {
		i := slices.Index(b, '\n')
		if i < 0 {
			return append(out, string(b))
		}
		out = append(out, string(b[:i]))
		b = b[i+1:]
	}
}

// checkInvariants verifies the queue's counters against its rings.
func checkInvariants(t *testing.T, q *Queue) {
	t.Helper()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.msgs > q.limit {
		t.Fatalf("msgs %d over limit %d", q.msgs, q.limit)
	}
	msgs, others := 0, q.control.live
	perStream := map[Stream]int{}
	for l, r := range q.lanes {
		if r == nil {
			continue
		}
		live, ev, old := 0, 0, 0
		for i := 0; i < r.n; i++ {
			s := r.at(i)
			if s.dead {
				if i == 0 || i == r.n-1 {
					t.Fatalf("lane %d: dead slot at end %d of %d", l, i, r.n)
				}
				continue
			}
			live++
			perStream[s.it.Stream]++
			if st := q.streams[s.it.Stream]; st == nil || int(st.lane) != l {
				t.Fatalf("lane %d: item %s of a stream in another lane", l, s.it.Frame)
			}
			if s.it.isMessage() {
				msgs++
				switch s.it.Policy {
				case DropOld:
					old++
					ev++
				case DropNew:
					ev++
				}
			} else {
				others++
			}
		}
		if live != r.live || ev != r.evictable || old != r.dropOld {
			t.Fatalf("lane %d: counts live %d/%d evictable %d/%d dropOld %d/%d", l, r.live, live, r.evictable, ev, r.dropOld, old)
		}
	}
	if msgs != q.msgs || others != q.others {
		t.Fatalf("msgs %d/%d others %d/%d", q.msgs, msgs, q.others, others)
	}
	for s, st := range q.streams {
		if st.queued != perStream[s] {
			t.Fatalf("stream %v: queued %d, counted %d", s, st.queued, perStream[s])
		}
		if st.queued == 0 && len(st.gaps) == 0 && st != q.lastSt {
			t.Fatalf("stream %v kept with nothing to do", s)
		}
	}
}

// TestQueueControlBytes: control items are bounded in bytes as well as in
// items; one item is always taken into an empty control queue.
func TestQueueControlBytes(t *testing.T) {
	q := NewQueue(Options{EncodeGap: testGap, ControlBytes: 10})
	big := Item{Frame: []byte("c:0123456789abcdef")} // 18 bytes: over the bound alone
	if got := q.Push(big); got != Queued {
		t.Fatalf("first item: %v", got)
	}
	if got := q.Push(ctl("x")); got != ControlFull {
		t.Fatalf("past the bound: %v", got)
	}
	if st := q.Stats(); st.ControlBytes != len(big.Frame) || st.Queued != 1 {
		t.Fatalf("stats %+v", st)
	}
	drain(q, 1<<10)
	for i := range 3 {
		if got := q.Push(ctl("ab")); got != Queued { // 4 bytes each
			t.Fatalf("item %d: %v", i, got)
		}
		if i == 1 {
			if got := q.Push(ctl("abc")); got != ControlFull { // 8+5 > 10
				t.Fatalf("item past the bound: %v", got)
			}
		}
		if i == 1 {
			drain(q, 1<<10)
		}
	}
	if st := q.Stats(); st.ControlBytes != 4 {
		t.Fatalf("control bytes %d after draining, want 4", st.ControlBytes)
	}
}

// slotsHeld returns the ring slots q holds: control and every lane.
func slotsHeld(q *Queue) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return ringSlots(q)
}

// ringSlots is slotsHeld with q's lock held.
func ringSlots(q *Queue) int {
	n := len(q.control.buf)
	for _, r := range q.lanes {
		if r != nil {
			n += len(r.buf)
		}
	}
	return n
}

// TestQueueEmptyHoldsNoSlots: a queue drained empty holds no ring slots
// (an idle session costs none), whether its items left by draining or by
// eviction, and delivers in order when it fills again; a ring that grew
// past its first buffer keeps it.
func TestQueueEmptyHoldsNoSlots(t *testing.T) {
	q := NewQueue(Options{EncodeGap: testGap, QueueMessages: 2})
	if n := slotsHeld(q); n != 0 {
		t.Fatalf("new queue holds %d slots", n)
	}
	q.Push(ctl("welcome"))
	q.Push(msg(1, 0, 0, DropOld))
	if n := slotsHeld(q); n != 2*minRing {
		t.Fatalf("queue with a control item and a message holds %d slots, want %d", n, 2*minRing)
	}
	if got := drain(q, 1<<20); !slices.Equal(got, []string{"c:welcome", "m1:0"}) {
		t.Fatalf("drained %q", got)
	}
	if n := slotsHeld(q); n != 0 {
		t.Fatalf("drained queue holds %d slots", n)
	}

	// Emptied by eviction: a higher lane's message evicts the lower one.
	q.Push(msg(1, 1, 0, DropOld))
	q.Push(msg(2, 0, 1, DropOld))
	q.Push(msg(2, 1, 1, DropOld))
	if got := drain(q, 1<<20); !slices.Equal(got, []string{"m2:0", "m2:1", "g1:1-2"}) {
		t.Fatalf("drained %q", got)
	}
	if n := slotsHeld(q); n != 0 {
		t.Fatalf("queue drained after an eviction holds %d slots", n)
	}

	big := NewQueue(Options{EncodeGap: testGap})
	for i := range 2 * minRing {
		big.Push(msg(1, int64(i), 0, DropOld))
	}
	if got := drain(big, 1<<20); len(got) != 2*minRing {
		t.Fatalf("drained %d frames, want %d", len(got), 2*minRing)
	}
	if n := slotsHeld(big); n != 2*minRing {
		t.Fatalf("a grown ring holds %d slots after draining, want its %d", n, 2*minRing)
	}
}

// TestQueueShrink: Shrink gives back an empty queue's stream map and
// remembered stream, leaves a queue with items or pending gaps as it is,
// and the queue goes on in order, gaps included, after it.
func TestQueueShrink(t *testing.T) {
	q := NewQueue(Options{EncodeGap: testGap, QueueMessages: 1})
	q.Push(msg(1, 0, 0, DropOld))
	q.Shrink() // an item queued: nothing changes
	if q.streams == nil || q.lastSt == nil {
		t.Fatal("Shrink dropped the state of a queue with an item")
	}
	q.Push(msg(1, 1, 0, DropOld)) // evicts offset 0: a gap
	if got := drain(q, 1<<20); !slices.Equal(got, []string{"g1:0-1", "m1:1"}) {
		t.Fatalf("drained %q", got)
	}
	q.Shrink()
	if q.streams != nil || q.lastSt != nil {
		t.Fatalf("an empty queue keeps its stream map (%v) or remembered stream (%v)", q.streams != nil, q.lastSt != nil)
	}
	q.Push(msg(1, 2, 0, DropOld))
	q.Push(msg(1, 3, 0, DropOld))
	q.Shrink() // a gap pending and an item queued
	if got := drain(q, 1<<20); !slices.Equal(got, []string{"g1:2-3", "m1:3"}) {
		t.Fatalf("drained after Shrink %q", got)
	}
}

// lanesHeld returns the lanes q holds.
func lanesHeld(q *Queue) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for _, r := range q.lanes {
		if r != nil {
			n++
		}
	}
	return n
}

// TestQueueLanesOnFirstUse: a new queue holds no lanes; a push makes the
// lane of its priority only; Shrink gives back the empty lanes but keeps
// one that grew past its first buffer; the queue delivers highest
// priority first before and after.
func TestQueueLanesOnFirstUse(t *testing.T) {
	q := NewQueue(Options{EncodeGap: testGap, QueueMessages: 64})
	if n := lanesHeld(q); n != 0 {
		t.Fatalf("a new queue holds %d lanes, want 0", n)
	}
	q.Push(ctl("r1")) // a control item takes no lane
	q.Push(msg(1, 0, 2, DropOld))
	if n := lanesHeld(q); n != 1 {
		t.Fatalf("after a control item and a priority-2 message the queue holds %d lanes, want 1", n)
	}
	q.Push(msg(2, 0, 0, DropOld))
	q.Push(msg(3, 0, 9, DropOld)) // counts as priority 3
	if got := drain(q, 1<<20); !slices.Equal(got, []string{"c:r1", "m3:0", "m1:0", "m2:0"}) {
		t.Fatalf("drained %q", got)
	}
	if n := lanesHeld(q); n != 3 {
		t.Fatalf("before Shrink the queue holds %d lanes, want 3", n)
	}
	q.Shrink()
	if n := lanesHeld(q); n != 0 {
		t.Fatalf("after Shrink an empty queue holds %d lanes, want 0", n)
	}
	// A lane that grew keeps its buffer, and the queue keeps the lane.
	for i := range 2 * minRing {
		q.Push(msg(1, int64(1+i), 1, DropOld))
	}
	q.Push(msg(2, 1, 0, DropOld))
	q.Shrink() // items queued: nothing changes
	if n := lanesHeld(q); n != 2 {
		t.Fatalf("Shrink with items queued left %d lanes, want 2", n)
	}
	if got := drain(q, 1<<20); len(got) != 2*minRing+1 || got[0] != "m1:1" || got[len(got)-1] != "m2:1" {
		t.Fatalf("drained %q", got)
	}
	q.Shrink()
	if n := lanesHeld(q); n != 1 {
		t.Fatalf("after Shrink the queue holds %d lanes, want the grown one", n)
	}
	q.Push(msg(3, 1, 3, DropOld))
	q.Push(msg(1, 2*minRing+1, 1, DropOld))
	if got := drain(q, 1<<20); !slices.Equal(got, []string{"m3:1", "m1:" + strconv.Itoa(2*minRing+1)}) {
		t.Fatalf("drained after Shrink %q", got)
	}
}
