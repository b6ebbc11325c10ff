package router

// Checks of the idle MQTT session's smaller state from inside the
// package: mqttSubs against a map and the done channel made by its first
// waiter (the struct's size: mqtt_idle_size_internal_test.go).

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
)

// sessionAllocBytes is what the heap gives one mqttSession: its size
// class.
func sessionAllocBytes() uint64 {
	const n = 1000
	keep := make([]*mqttSession, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range keep {
		keep[i] = new(mqttSession)
	}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return (after.TotalAlloc - before.TotalAlloc) / n
}

// TestMQTTSubsMatchesMap runs random sets and takes off against a map:
// every get, every entry ranged over, the crossing of mqttFewSubs both
// ways, a name holding a filter and a pattern, a zero entry on a name
// that has none.
func TestMQTTSubsMatchesMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	fs := make([]*mqttFilter, 4)
	ps := make([]*mqttPattern, 4)
	for i := range fs {
		fs[i], ps[i] = &mqttFilter{subID: i}, &mqttPattern{}
	}
	names := make([]string, 3*mqttFewSubs)
	for i := range names {
		names[i] = fmt.Sprintf("n/%d", i)
	}
	for round := range 20 {
		var m mqttSubs
		want := map[string]mqttSubEntry{}
		for step := range 2000 {
			name := names[rng.IntN(len(names))]
			var e mqttSubEntry
			switch rng.IntN(4) {
			case 0: // take off
			case 1:
				e.f = fs[rng.IntN(len(fs))]
			case 2:
				e.p = ps[rng.IntN(len(ps))]
			case 3:
				e.f, e.p = fs[rng.IntN(len(fs))], ps[rng.IntN(len(ps))]
			}
			m.set(name, e)
			if e == (mqttSubEntry{}) {
				delete(want, name)
			} else {
				want[name] = e
			}
			got := maps.Collect(m.all())
			if len(got) != len(want) || !maps.Equal(got, want) {
				t.Fatalf("round %d step %d: all() = %d entries, want %d", round, step, len(got), len(want))
			}
			n := 0
			for range m.all() {
				n++
			}
			if n != len(want) {
				t.Fatalf("round %d step %d: all() yields %d entries, want %d (a name twice?)", round, step, n, len(want))
			}
			for _, k := range names {
				if g := m.get(k); g != want[k] {
					t.Fatalf("round %d step %d: get(%q) = %v, want %v", round, step, k, g, want[k])
				}
			}
			if m.many == nil && len(m.few) > mqttFewSubs {
				t.Fatalf("round %d step %d: %d entries in the slice", round, step, len(m.few))
			}
		}
	}
}

// TestMQTTSessionEndedRaces races waiters made before, at and after the
// end: every one is released, none waits on a channel nobody closes.
func TestMQTTSessionEndedRaces(t *testing.T) {
	for range 200 {
		s := &mqttSession{}
		start := make(chan struct{})
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				select {
				case <-s.ended():
				case <-time.After(waitFor):
					errs <- fmt.Errorf("a waiter was not released within %v", waitFor)
				}
			}()
		}
		early := s.ended() // before the end
		close(start)
		s.markEnded()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		select {
		case <-early:
		default:
			t.Fatal("a waiter made before the end is not released")
		}
		select {
		case <-s.ended():
		default:
			t.Fatal("a waiter made after the end is not released")
		}
	}
}

// waitFor bounds the waits of this file's tests.
const waitFor = 10 * time.Second
