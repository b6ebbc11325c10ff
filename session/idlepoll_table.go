//go:build linux

package session

// The idle poller's table of parked sockets (idlepoll_linux.go).
//
// A parked socket holds one slot; an epoll event names the slot and the
// generation it was armed with. Generations come from one counter of the
// table, not from the slot, so that a slot given up when the table shrinks
// and made again later never repeats a generation an event in flight may
// still carry: such an event finds another generation and is dropped.
//
// The table gives memory back: a new socket takes the lowest free slot, so
// that the slots in use gather at the start, and once fewer than a quarter
// of the slots are in use the free slots at the end are cut off and the
// slices made again at their new size (looked at after every eighth of
// the table's size in releases, so that the look costs O(1) a release,
// and when the last socket is released). A parked socket keeps its slot
// until it resumes (its epoll registration names the slot; moving it
// would take an EPOLL_CTL_MOD racing the socket's events and close), so
// the table keeps the slots up to the highest in use: it holds at most
// about 8 slots for each in use, or 128, or twice the highest slot in
// use, whichever is most. One socket parked last in a peak of N keeps
// about N slots (16 bytes each) until it resumes.

// pollSlot is a parked socket and the generation it was armed with.
type pollSlot struct {
	s   *parkState
	gen uint32
}

// minPollSlots is the size below which the table does not shrink.
const minPollSlots = 64

// slotTable is the idle poller's table. Not safe for concurrent use: the
// poller guards it with its mutex.
type slotTable struct {
	slots  []pollSlot
	free   []int32 // the free slots below len(slots), a min-heap
	used   int     // slots in use
	gen    uint32  // the last generation given
	sinceK int     // releases since the last look at shrinking
}

// take gives s the lowest free slot, with a new generation.
func (t *slotTable) take(s *parkState) (slot int32, gen uint32) {
	if len(t.free) > 0 {
		slot = heapPop(&t.free)
	} else {
		slot = int32(len(t.slots))
		t.slots = append(t.slots, pollSlot{})
	}
	t.gen++
	t.slots[slot] = pollSlot{s: s, gen: t.gen}
	t.used++
	return slot, t.gen
}

// release frees slot; an event armed with its generation finds none.
func (t *slotTable) release(slot int32) {
	t.slots[slot] = pollSlot{}
	heapPush(&t.free, slot)
	t.used--
	t.sinceK++
	if t.sinceK >= cap(t.slots)/8 || t.used == 0 {
		t.sinceK = 0
		t.shrink()
	}
}

// get returns the socket in slot if it holds generation gen, else nil.
func (t *slotTable) get(slot int32, gen uint32) *parkState {
	if slot < 0 || int(slot) >= len(t.slots) || t.slots[slot].gen != gen {
		return nil
	}
	return t.slots[slot].s
}

// shrink cuts off the free slots at the end when fewer than a quarter of
// the slots are in use and that halves the table at least.
func (t *slotTable) shrink() {
	c := cap(t.slots)
	if c <= minPollSlots || t.used*4 >= c {
		return
	}
	n := len(t.slots)
	if t.used == 0 {
		n = 0
	}
	for n > 0 && t.slots[n-1].s == nil {
		n--
	}
	if n > c/2 {
		return
	}
	size := max(n, minPollSlots/2)
	slots := make([]pollSlot, n, size)
	copy(slots, t.slots[:n])
	free := make([]int32, 0, max(n-t.used, 0))
	for _, f := range t.free {
		if int(f) < n {
			free = append(free, f)
		}
	}
	heapInit(free)
	t.slots, t.free = slots, free
}

// heapPush adds v to the min-heap h.
func heapPush(h *[]int32, v int32) {
	*h = append(*h, v)
	a := *h
	for i := len(a) - 1; i > 0; {
		p := (i - 1) / 2
		if a[p] <= a[i] {
			break
		}
		a[p], a[i] = a[i], a[p]
		i = p
	}
}

// heapPop removes and returns the least value of the non-empty min-heap h.
func heapPop(h *[]int32) int32 {
	a := *h
	v := a[0]
	last := len(a) - 1
	a[0] = a[last]
	a = a[:last]
	siftDown(a, 0)
	*h = a
	return v
}

func siftDown(a []int32, i int) {
	for {
		l := 2*i + 1
		if l >= len(a) {
			return
		}
		m := l
		if r := l + 1; r < len(a) && a[r] < a[l] {
			m = r
		}
		if a[i] <= a[m] {
			return
		}
		a[i], a[m] = a[m], a[i]
		i = m
	}
}

// heapInit makes a a min-heap.
func heapInit(a []int32) {
	for i := len(a)/2 - 1; i >= 0; i-- {
		siftDown(a, i)
	}
}
