package trie

import (
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"
)

// widePattern is the pattern of user i in a wide Trie: every user has an
// inbox of their own under one shared prefix.
func widePattern(i int) string { return "user." + strconv.Itoa(i) + ".inbox" }

// wide returns a Trie with a match cache holding n patterns widePattern(i),
// each with subscriber i, so that the node after "user" has n children.
func wide(tb testing.TB, n int) *Trie[int] {
	tb.Helper()
	tr := New[int]()
	for i := range n {
		if err := tr.Add(widePattern(i), i); err != nil {
			tb.Fatal(err)
		}
	}
	return tr
}

// restore makes snap, an earlier snapshot of tr, current again under a new
// generation, undoing every write since in O(1).
func restore[T comparable](tr *Trie[T], snap *tree[T]) {
	next := *snap
	next.gen = tr.cur.Load().gen + 1
	tr.cur.Store(&next)
}

// TestAddCostIndependentOfWidth checks that subscribing to a pattern of
// one's own does not cost in proportion to the sibling patterns other
// subscribers hold: the bytes an Add and Remove of a new user's inbox
// allocate grow at most slowly from 1,024 to 65,536 existing users.
func TestAddCostIndependentOfWidth(t *testing.T) {
	const (
		small, large = 1 << 10, 1 << 16
		runs         = 64
		maxRatio     = 8 // 64 times the siblings; a per-add copy would be near 64
	)
	perWrite := func(n int) float64 {
		tr := wide(t, n)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		for i := range runs {
			p := widePattern(n + i)
			if err := tr.Add(p, n+i); err != nil {
				t.Fatal(err)
			}
			if !tr.Remove(p, n+i) {
				t.Fatalf("Remove(%q) found nothing", p)
			}
		}
		runtime.ReadMemStats(&after)
		if tr.Patterns() != n {
			t.Fatalf("Patterns() = %d, want %d", tr.Patterns(), n)
		}
		return float64(after.TotalAlloc-before.TotalAlloc) / runs
	}
	s, l := perWrite(small), perWrite(large)
	t.Logf("bytes allocated per Add+Remove: %.0f with %d siblings, %.0f with %d", s, small, l, large)
	if l > maxRatio*s {
		t.Errorf("an Add+Remove allocates %.0f bytes with %d siblings but %.0f with %d: cost grows with other patterns",
			s, small, l, large)
	}
}

// BenchmarkSubscribeWide adds a pattern of its own under a prefix shared
// with n existing patterns (user.<id>.inbox, one per user), the cost each
// new user pays. Every 1000 adds it restores the initial snapshot, untimed.
func BenchmarkSubscribeWide(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run("existing="+short(n), func(b *testing.B) {
			const batch = 1000
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			tr := wide(b, n)
			runtime.GC()
			runtime.ReadMemStats(&after)
			snap := tr.cur.Load()
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				if i > 0 && i%batch == 0 {
					b.StopTimer()
					restore(tr, snap)
					b.StartTimer()
				}
				if err := tr.Add(widePattern(n+i), n+i); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(n), "bytes/sub")
			runtime.KeepAlive(tr)
		})
	}
}

// BenchmarkUnsubscribeWide removes one of n patterns under a shared prefix.
// Every 1000 removes it restores the initial snapshot, untimed.
func BenchmarkUnsubscribeWide(b *testing.B) {
	for _, n := range []int{10_000, 100_000, 1_000_000} {
		b.Run("existing="+short(n), func(b *testing.B) {
			const batch = 1000
			tr := wide(b, n)
			snap := tr.cur.Load()
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				if i > 0 && i%batch == 0 {
					b.StopTimer()
					restore(tr, snap)
					b.StartTimer()
				}
				if !tr.Remove(widePattern(i%batch), i%batch) {
					b.Fatal("Remove found nothing")
				}
				i++
			}
		})
	}
}

// short names a count the way benchmark names show it: 10k, 1M.
func short(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n >= 1000 && n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}

// BenchmarkSubscribeShared adds a new subscriber to a pattern that n others
// subscribe to already (a broadcast topic every session follows). Every
// 1000 adds it restores the initial snapshot, untimed; the subscribers it
// adds are new each time, so the writer-side state a restore leaves stale
// holds none of them.
func BenchmarkSubscribeShared(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		b.Run("existing="+short(n), func(b *testing.B) {
			const batch = 1000
			tr := New[int]()
			for i := range n {
				if err := tr.Add("broadcast", i); err != nil {
					b.Fatal(err)
				}
			}
			snap := tr.cur.Load()
			b.ReportAllocs()
			b.ResetTimer()
			i := 0
			for b.Loop() {
				if i > 0 && i%batch == 0 {
					b.StopTimer()
					restore(tr, snap)
					b.StartTimer()
				}
				if err := tr.Add("broadcast", n+i); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// TestTrieManySubscribers checks the Trie against the model for patterns
// with enough subscribers that their leaves keep an index, through adds,
// duplicate adds and removes that cross the index's thresholds both ways.
func TestTrieManySubscribers(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	tr, m := New[int](), model{}
	patterns := []string{"a.b", "a.*", "a.#"}
	indexed, built, dropped := false, 0, 0 // whether a.b's leaf has its index, and how often that changed
	for step := range 20_000 {
		p, v := patterns[rng.IntN(len(patterns))], rng.IntN(3*indexFrom)
		// Phases of mostly adds and mostly removes, so that leaves grow
		// past indexFrom and shrink below indexFrom/2 again.
		if rng.IntN(100) < 20+70*(step/2000%2) {
			i := slices.Index(m[p], v)
			if got := tr.Remove(p, v); got != (i >= 0) {
				t.Fatalf("step %d: Remove(%q, %d) = %v, want %v", step, p, v, got, i >= 0)
			}
			if i >= 0 {
				m[p] = slices.Delete(m[p], i, i+1)
				if len(m[p]) == 0 {
					delete(m, p)
				}
			}
		} else {
			if err := tr.Add(p, v); err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(m[p], v) {
				m[p] = append(m[p], v)
			}
		}
		if tr.Len() != m.len() || tr.Patterns() != len(m) {
			t.Fatalf("step %d: Len %d Patterns %d, want %d %d", step, tr.Len(), tr.Patterns(), m.len(), len(m))
		}
		var buf [MaxSegments]string
		if l := tr.cur.Load().root.find(split("a.b", &buf), tr.cur.Load().seed); l != nil && l.has != nil {
			if len(l.has) != len(l.subs) {
				t.Fatalf("step %d: index of a.b holds %d subscribers, the leaf %d", step, len(l.has), len(l.subs))
			}
			if !indexed {
				built++
			}
			indexed = true
		} else {
			if indexed {
				dropped++
			}
			indexed = false
		}
		if step%97 == 0 {
			if got, want := collect(t, tr, "a.b"), m.match("a.b"); !equalMatch(got, want) {
				t.Fatalf("step %d: Match(a.b) = %v, want %v", step, got, want)
			}
		}
	}
	if built < 2 || dropped < 2 {
		t.Fatalf("the index of a.b was built %d and dropped %d times; the test needs both at least twice", built, dropped)
	}
}
