package jsengine_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// runObs records the runs of the tail's announcement batch: the offsets
// announced in each run, closed by the batch's End. It holds the tail on
// the records whose offsets are in hold until release is closed. Safe for
// concurrent use.
type runObs struct {
	hold    map[int64]chan struct{} // offset -> release; set before Watch
	entered chan int64              // the held offset, when the tail reaches it

	mu    sync.Mutex // guards following
	made  int        // values registered with a batch
	plain int        // records announced without a context
	cur   []int64    // offsets announced since the last End
	runs  [][]int64  // offsets of each ended run
	nobat int        // AppendedContext calls without a batch
}

func (o *runObs) Appended(*engine.Record) {
	o.mu.Lock()
	o.plain++
	o.mu.Unlock()
}

func (o *runObs) TopicDeleted(string) {}

func (o *runObs) AppendedContext(ctx context.Context, r *engine.Record) {
	b := engine.BatchOf(ctx)
	o.mu.Lock()
	if b == nil {
		o.nobat++
	} else {
		b.Value(o, o.newValue)
		o.cur = append(o.cur, r.Offset)
	}
	o.mu.Unlock()
	if release, ok := o.hold[r.Offset]; ok {
		o.entered <- r.Offset
		<-release
	}
}

// newValue is the observer's registration with a Batch; caller holds mu.
func (o *runObs) newValue() (any, func()) {
	o.made++
	return o, func() {
		o.mu.Lock()
		o.runs = append(o.runs, o.cur)
		o.cur = nil
		o.mu.Unlock()
	}
}

func (o *runObs) state() (runs [][]int64, cur []int64, made, plain, nobat int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.runs), slices.Clone(o.cur), o.made, o.plain, o.nobat
}

func offsets(from, to int64) []int64 {
	var s []int64
	for off := from; off < to; off++ {
		s = append(s, off)
	}
	return s
}

// TestTailAnnouncesInRuns: records the tail finds waiting behind each
// other are announced in one run of its engine.Batch, ended once no more
// are at hand, at most jsengine.MaxTailRun records long; records still
// queued when the engine closes are announced and their run ended before
// Close returns. Node a observes; node b appends, so that a's tail is held
// on one record (the observer blocks) while the next ones queue behind it.
func TestTailAnnouncesInRuns(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	a, b := twoNodes(t, nodeOpts{url: url, prefix: prefix})
	ctx := context.Background()
	const topic = "tail.runs"
	if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	long := int64(jsengine.MaxTailRun + 5)
	// Held: the first record; the first of a run longer than MaxTailRun;
	// the first of the records queued as a closes.
	first, second, third := int64(0), int64(6), 6+1+long
	o := &runObs{
		hold:    map[int64]chan struct{}{first: make(chan struct{}), second: make(chan struct{}), third: make(chan struct{})},
		entered: make(chan int64, 1),
	}
	released := map[int64]bool{}
	release := func(off int64) {
		if !released[off] {
			released[off] = true
			close(o.hold[off])
		}
	}
	t.Cleanup(func() { // a's Close waits for its tail
		for off := range o.hold {
			release(off)
		}
	})
	defer a.Watch(o)()

	next := int64(0)
	appendN := func(n int64) {
		t.Helper()
		for range n {
			if _, err := b.Append(ctx, engine.Message{Topic: topic, Data: fmt.Appendf(nil, "%d", next)}); err != nil {
				t.Fatal(err)
			}
			next++
		}
	}
	held := func(off int64) {
		t.Helper()
		select {
		case got := <-o.entered:
			if got != off {
				t.Fatalf("tail held on offset %d, want %d", got, off)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("the tail did not reach offset %d", off)
		}
	}
	queued := func(n int) {
		t.Helper()
		waitUntil(t, fmt.Sprintf("%d messages queued for a's tail", n), func() bool { return a.TailQueued() == n })
	}
	ended := func(want [][]int64) {
		t.Helper()
		waitUntil(t, "the runs to end", func() bool {
			runs, _, _, _, _ := o.state()
			return len(runs) >= len(want)
		})
		if runs, cur, _, _, _ := o.state(); !slices.EqualFunc(runs, want, slices.Equal) || len(cur) != 0 {
			t.Fatalf("runs %v (then %v not ended), want %v", runs, cur, want)
		}
	}

	appendN(1)
	held(first)
	appendN(second - 1)
	queued(int(second - 1))
	release(first)
	want := [][]int64{offsets(first, second)}
	ended(want)

	appendN(1)
	held(second)
	appendN(long)
	queued(int(long))
	release(second)
	want = append(want, offsets(second, second+jsengine.MaxTailRun), offsets(second+jsengine.MaxTailRun, third))
	ended(want)

	appendN(3)
	held(third)
	queued(2)
	closed := make(chan error, 1)
	go func() { closed <- a.Close(ctx) }()
	release(third)
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Close did not return")
	}
	want = append(want, offsets(third, third+3))
	ended(want)

	if _, _, made, plain, nobat := o.state(); made != 1 || plain != 0 || nobat != 0 {
		t.Fatalf("value made %d times (want once), %d records announced without a context, %d without a batch", made, plain, nobat)
	}
}
