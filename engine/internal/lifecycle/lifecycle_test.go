package lifecycle_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/internal/lifecycle"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var t0 = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

func TestGuardAfterFunc(t *testing.T) {
	const d = time.Second
	tests := []struct {
		name    string
		closeAt time.Duration // when to close the Guard; < 0: never
		advance time.Duration // total clock movement
		wantRun bool
	}{
		{name: "open and due", closeAt: -1, advance: d, wantRun: true},
		{name: "open not yet due", closeAt: -1, advance: d - time.Nanosecond, wantRun: false},
		{name: "closed before scheduling due", closeAt: 0, advance: d, wantRun: false},
		{name: "closed just before due", closeAt: d - time.Nanosecond, advance: d, wantRun: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := enginetest.NewFakeClock(t0)
			var g lifecycle.Guard
			var runs atomic.Int32
			g.AfterFunc(clock, d, func() { runs.Add(1) })
			if tt.closeAt >= 0 {
				clock.Advance(tt.closeAt)
				if !g.Close(nil) {
					t.Fatal("Close of an open Guard = false")
				}
				clock.Advance(tt.advance - tt.closeAt)
			} else {
				clock.Advance(tt.advance)
			}
			if got := runs.Load() == 1; got != tt.wantRun {
				t.Errorf("f ran %d times, want run = %v", runs.Load(), tt.wantRun)
			}
			g.Close(nil)
			g.Wait()
		})
	}
}

func TestGuardAfterFuncTimerStops(t *testing.T) {
	clock := enginetest.NewFakeClock(t0)
	var g lifecycle.Guard
	ran := false
	tm := g.AfterFunc(clock, time.Second, func() { ran = true })
	if !tm.Stop() {
		t.Fatal("Stop of a pending timer = false")
	}
	clock.Advance(time.Hour)
	if ran {
		t.Error("f ran after its timer was stopped")
	}
}

func TestGuardClose(t *testing.T) {
	tests := []struct {
		name     string
		then     bool // pass a non-nil then
		closes   int
		wantThen int
	}{
		{name: "once with then", then: true, closes: 1, wantThen: 1},
		{name: "twice with then", then: true, closes: 2, wantThen: 1},
		{name: "nil then", then: false, closes: 2, wantThen: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g lifecycle.Guard
			calls := 0
			var then func()
			if tt.then {
				then = func() {
					calls++
					// then runs in the closing critical section: the Guard
					// is already closed for anyone who asks afterwards.
				}
			}
			for i := range tt.closes {
				if got, want := g.Close(then), i == 0; got != want {
					t.Errorf("Close #%d = %v, want %v", i+1, got, want)
				}
			}
			if calls != tt.wantThen {
				t.Errorf("then called %d times, want %d", calls, tt.wantThen)
			}
			if g.Enter() {
				t.Error("Enter after Close = true")
				g.Exit()
			}
			g.Wait()
		})
	}
}

// TestGuardCloseThenBlocksEnter checks that Close calls then while holding
// the Guard closed to Enter, and that an Enter racing Close either succeeds
// before then runs or fails after.
func TestGuardCloseThenBlocksEnter(t *testing.T) {
	var g lifecycle.Guard
	var thenRan atomic.Bool
	var enteredAfterThen atomic.Bool
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				if !g.Enter() {
					return
				}
				if thenRan.Load() {
					enteredAfterThen.Store(true)
				}
				g.Exit()
			}
		})
	}
	g.Close(func() { thenRan.Store(true) })
	wg.Wait()
	g.Wait()
	if enteredAfterThen.Load() {
		t.Error("Enter succeeded after Close's then had run")
	}
}

func TestGuardEnterExit(t *testing.T) {
	var g lifecycle.Guard
	if !g.Enter() {
		t.Fatal("Enter on an open Guard = false")
	}
	if !g.Enter() {
		t.Fatal("second Enter on an open Guard = false")
	}
	g.Exit()
	g.Exit()
	g.Close(nil)
	if g.Enter() {
		t.Fatal("Enter on a closed Guard = true")
	}
	g.Wait() // nothing running: returns at once
}

// TestGuardWait checks that Wait, called after Close, waits for a span or a
// callback that started before Close, and only for that.
func TestGuardWait(t *testing.T) {
	tests := []struct {
		name string
		// start begins a span that lasts until release is closed and sets
		// finished as it ends; it returns once the span is inside the Guard.
		start func(t *testing.T, g *lifecycle.Guard, release <-chan struct{}, finished *atomic.Bool)
	}{
		{
			name: "Enter/Exit span",
			start: func(t *testing.T, g *lifecycle.Guard, release <-chan struct{}, finished *atomic.Bool) {
				if !g.Enter() {
					t.Fatal("Enter on an open Guard = false")
				}
				go func() {
					defer g.Exit()
					<-release
					finished.Store(true)
				}()
			},
		},
		{
			name: "AfterFunc callback",
			start: func(t *testing.T, g *lifecycle.Guard, release <-chan struct{}, finished *atomic.Bool) {
				clock := enginetest.NewFakeClock(t0)
				started := make(chan struct{})
				g.AfterFunc(clock, time.Second, func() {
					close(started)
					<-release
					finished.Store(true)
				})
				// FakeClock runs due callbacks on the Advance goroutine.
				go clock.Advance(time.Second)
				<-started
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var g lifecycle.Guard
				release := make(chan struct{})
				var finished, waited atomic.Bool
				tt.start(t, &g, release, &finished)
				if !g.Close(nil) {
					t.Fatal("Close = false")
				}
				go func() {
					g.Wait()
					waited.Store(true)
				}()
				synctest.Wait() // every goroutine of the bubble is blocked
				if waited.Load() {
					t.Fatal("Wait returned while a span was still running")
				}
				close(release)
				synctest.Wait()
				if !waited.Load() {
					t.Fatal("Wait did not return after the span ended")
				}
				if !finished.Load() {
					t.Fatal("span did not finish")
				}
			})
		})
	}
}

func TestTimeout(t *testing.T) {
	const d = 250 * time.Millisecond
	tests := []struct {
		name     string
		advance  time.Duration
		stop     bool
		close    bool // close the Guard before the Timeout passes
		wantDone bool
	}{
		{name: "passes", advance: d, wantDone: true},
		{name: "passes late", advance: 2 * d, wantDone: true},
		{name: "not yet", advance: d - time.Nanosecond, wantDone: false},
		{name: "stopped", advance: d, stop: true, wantDone: false},
		{name: "guard closed first", advance: d, close: true, wantDone: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := enginetest.NewFakeClock(t0)
			var g lifecycle.Guard
			to := g.Timeout(clock, d)
			if tt.stop {
				to.Stop()
			}
			if tt.close {
				g.Close(nil)
			}
			clock.Advance(tt.advance)
			select {
			case <-to.Done():
				if !tt.wantDone {
					t.Error("Done closed, want open")
				}
			default:
				if tt.wantDone {
					t.Error("Done open, want closed")
				}
			}
			to.Stop() // stopping after it passed is harmless
			g.Close(nil)
			g.Wait()
		})
	}
}

func TestTimeoutNilStop(t *testing.T) {
	var to *lifecycle.Timeout
	to.Stop() // must not panic
}

// obs is an engine.Observer with an identity for comparisons.
type obs struct{ id int }

func (*obs) Appended(*engine.Record) {}
func (*obs) TopicDeleted(string)     {}

func ids(list []engine.Observer) []int {
	out := make([]int, len(list))
	for i, o := range list {
		out[i] = o.(*obs).id
	}
	return out
}

func TestObservers(t *testing.T) {
	a, b, c := &obs{1}, &obs{2}, &obs{3}
	type step struct {
		add  *obs // add this observer; its stop goes into stops
		stop int  // otherwise call stops[stop-1]
		want []int
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{name: "empty", steps: nil},
		{name: "add in order", steps: []step{
			{add: a, want: []int{1}},
			{add: b, want: []int{1, 2}},
			{add: c, want: []int{1, 2, 3}},
		}},
		{name: "unregister middle", steps: []step{
			{add: a, want: []int{1}},
			{add: b, want: []int{1, 2}},
			{add: c, want: []int{1, 2, 3}},
			{stop: 2, want: []int{1, 3}},
		}},
		{name: "unregister twice", steps: []step{
			{add: a, want: []int{1}},
			{add: b, want: []int{1, 2}},
			{stop: 1, want: []int{2}},
			{stop: 1, want: []int{2}},
			{stop: 2, want: []int{}},
			{stop: 2, want: []int{}},
		}},
		{name: "same observer twice is two registrations", steps: []step{
			{add: a, want: []int{1}},
			{add: a, want: []int{1, 1}},
			{stop: 1, want: []int{1}},
			{stop: 1, want: []int{1}}, // a second stop must not remove the other
			{stop: 2, want: []int{}},
		}},
		{name: "re-add after unregister", steps: []step{
			{add: a, want: []int{1}},
			{stop: 1, want: []int{}},
			{add: a, want: []int{1}},
			{stop: 1, want: []int{1}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var reg lifecycle.Observers
			if got := reg.List(); len(got) != 0 {
				t.Fatalf("List of a new Observers = %v, want empty", ids(got))
			}
			var stops []func()
			for i, s := range tt.steps {
				if s.add != nil {
					stops = append(stops, reg.Add(s.add))
				} else {
					stops[s.stop-1]()
				}
				if got := ids(reg.List()); !slices.Equal(got, s.want) {
					t.Fatalf("step %d: List = %v, want %v", i, got, s.want)
				}
			}
		})
	}
}

// TestObserversSnapshot checks that a List result is not changed by later
// registrations or unregistrations.
func TestObserversSnapshot(t *testing.T) {
	var reg lifecycle.Observers
	stopA := reg.Add(&obs{1})
	stopB := reg.Add(&obs{2})
	snap := reg.List()
	stopC := reg.Add(&obs{3})
	stopA()
	stopD := reg.Add(&obs{4})
	if got := ids(snap); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("snapshot = %v after later changes, want [1 2]", got)
	}
	snap2 := reg.List()
	stopB()
	stopC()
	stopD()
	if got := ids(snap2); !slices.Equal(got, []int{2, 3, 4}) {
		t.Errorf("second snapshot = %v after later changes, want [2 3 4]", got)
	}
	if got := reg.List(); len(got) != 0 {
		t.Errorf("List after every stop = %v, want empty", ids(got))
	}
}

// TestObserversConcurrent registers and unregisters from many goroutines
// while others read the list; run it with -race. No registration may be
// lost, and a snapshot must never change under its reader.
func TestObserversConcurrent(t *testing.T) {
	const (
		writers = 8
		rounds  = 200
		readers = 4
	)
	var reg lifecycle.Observers
	base := &obs{-1}
	stopBase := reg.Add(base)

	done := make(chan struct{})
	var readersWG sync.WaitGroup
	errs := make(chan error, readers+writers)
	for range readers {
		readersWG.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				snap := reg.List()
				before := ids(snap)
				if !slices.Contains(before, -1) {
					errs <- fmt.Errorf("List %v lost the base observer", before)
					return
				}
				if after := ids(snap); !slices.Equal(before, after) {
					errs <- fmt.Errorf("snapshot changed under its reader: %v then %v", before, after)
					return
				}
			}
		})
	}

	var writersWG sync.WaitGroup
	for w := range writers {
		writersWG.Go(func() {
			for r := range rounds {
				o := &obs{w*rounds + r}
				stop := reg.Add(o)
				if !slices.Contains(reg.List(), engine.Observer(o)) {
					errs <- fmt.Errorf("observer %d missing right after Add", o.id)
					return
				}
				stop()
				if slices.Contains(reg.List(), engine.Observer(o)) {
					errs <- fmt.Errorf("observer %d present after stop", o.id)
					return
				}
				stop()
			}
		})
	}
	writersWG.Wait()
	close(done)
	readersWG.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := ids(reg.List()); !slices.Equal(got, []int{-1}) {
		t.Errorf("List after all writers = %v, want [-1]", got)
	}
	stopBase()
	if got := reg.List(); len(got) != 0 {
		t.Errorf("List after stopping base = %v, want empty", ids(got))
	}
}
