package trie

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
)

const (
	benchSubs = 100_000
	benchFan  = 10 // values per topic segment: 10^4 topics
)

// benchFixture is a Trie of benchSubs subscriptions over the benchFan^4
// topics region.service.entity.event: 70% literal patterns, 20% with one
// '*' and 10% ending in '#'.
type benchFixture struct {
	tr       *Trie[int]
	topics   []string // every topic, shuffled
	patterns []string // the pattern of subscriber i
	bytesSub float64  // heap retained per subscription
}

func newBenchFixture(b *testing.B, cache bool) *benchFixture {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	words := [4]string{"region", "service", "entity", "event"}
	seg := func(level, i int) string { return fmt.Sprintf("%s%d", words[level], i) }

	f := &benchFixture{tr: newTrie[int](cache)}
	for i := range benchFan * benchFan * benchFan * benchFan {
		f.topics = append(f.topics, fmt.Sprintf("%s.%s.%s.%s",
			seg(0, i/1000), seg(1, i/100%10), seg(2, i/10%10), seg(3, i%10)))
	}
	rng.Shuffle(len(f.topics), func(i, j int) { f.topics[i], f.topics[j] = f.topics[j], f.topics[i] })

	f.patterns = make([]string, benchSubs)
	for i := range f.patterns {
		var s [4]string
		for level := range s {
			s[level] = seg(level, rng.IntN(benchFan))
		}
		switch k := rng.IntN(10); {
		case k < 7:
			f.patterns[i] = s[0] + "." + s[1] + "." + s[2] + "." + s[3]
		case k < 9:
			s[rng.IntN(4)] = "*"
			f.patterns[i] = s[0] + "." + s[1] + "." + s[2] + "." + s[3]
		default:
			p := s[0]
			for level := 1; level <= rng.IntN(3); level++ {
				p += "." + s[level]
			}
			f.patterns[i] = p + ".#"
		}
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i, p := range f.patterns {
		if err := f.tr.Add(p, i); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	f.bytesSub = float64(after.HeapAlloc-before.HeapAlloc) / benchSubs
	return f
}

// BenchmarkMatchCold matches every topic in turn, in shuffled order, so that
// consecutive calls share little of the trie.
func BenchmarkMatchCold(b *testing.B) { benchVariants(b, benchMatchCold) }

func benchMatchCold(b *testing.B, cache bool) {
	f := newBenchFixture(b, cache)
	b.ReportAllocs()
	var pats, subs int
	i := 0
	for b.Loop() {
		f.tr.Match(f.topics[i%len(f.topics)], func(_ string, s []int) {
			pats++
			subs += len(s)
		})
		i++
	}
	b.ReportMetric(float64(pats)/float64(i), "patterns/op")
	b.ReportMetric(float64(subs)/float64(i), "subs/op")
	b.ReportMetric(f.bytesSub, "bytes/sub")
}

// BenchmarkMatchWarm matches one topic over and over.
func BenchmarkMatchWarm(b *testing.B) { benchVariants(b, benchMatchWarm) }

func benchMatchWarm(b *testing.B, cache bool) {
	f := newBenchFixture(b, cache)
	b.ReportAllocs()
	topic := f.topics[0]
	subs := 0
	for b.Loop() {
		f.tr.Match(topic, func(_ string, s []int) { subs += len(s) })
	}
	if subs == 0 {
		b.Fatal("nothing matched")
	}
}

// BenchmarkAdd adds a subscriber to an existing pattern of the fixture; every
// 1000 adds it removes them again (untimed), so the Trie stays near its
// initial size.
func BenchmarkAdd(b *testing.B) { benchVariants(b, benchAdd) }

func benchAdd(b *testing.B, cache bool) {
	const batch = 1000
	f := newBenchFixture(b, cache)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i > 0 && i%batch == 0 {
			b.StopTimer()
			for j := i - batch; j < i; j++ {
				f.tr.Remove(f.patterns[j%benchSubs], benchSubs+j)
			}
			b.StartTimer()
		}
		if err := f.tr.Add(f.patterns[i%benchSubs], benchSubs+i); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkRemove removes subscribers that it adds, untimed, in batches of
// 1000.
func BenchmarkRemove(b *testing.B) { benchVariants(b, benchRemove) }

func benchRemove(b *testing.B, cache bool) {
	const batch = 1000
	f := newBenchFixture(b, cache)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if i%batch == 0 {
			b.StopTimer()
			for j := i; j < i+batch; j++ {
				f.tr.Add(f.patterns[j%benchSubs], benchSubs+j)
			}
			b.StartTimer()
		}
		if !f.tr.Remove(f.patterns[i%benchSubs], benchSubs+i) {
			b.Fatal("Remove found nothing")
		}
		i++
	}
}

// BenchmarkMatchParallel runs cold matches on every P while a writer adds and
// removes a subscription once per writeEvery matches, the way subscribe and
// unsubscribe interleave with publishing in the gateway.
func BenchmarkMatchParallel(b *testing.B) { benchVariants(b, benchMatchParallel) }

func benchMatchParallel(b *testing.B, cache bool) {
	const writeEvery = 256
	f := newBenchFixture(b, cache)
	b.ReportAllocs()

	writes := make(chan struct{}, 64)
	var wg sync.WaitGroup
	wg.Go(func() { // exits when writes is closed, after RunParallel
		i := 0
		for range writes {
			p, v := f.patterns[i%benchSubs], -1-i
			f.tr.Add(p, v)
			f.tr.Remove(p, v)
			i++
		}
	})
	var next sync.Mutex // hands each goroutine its own start offset
	start := 0
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		next.Lock()
		i := start
		start += 997
		next.Unlock()
		subs := 0
		for pb.Next() {
			f.tr.Match(f.topics[i%len(f.topics)], func(_ string, s []int) { subs += len(s) })
			i++
			if i%writeEvery == 0 {
				select {
				case writes <- struct{}{}:
				default: // the writer is busy; skip this write
				}
			}
		}
	})
	close(writes)
	wg.Wait()
}

// benchVariants runs bench on a Trie with and without the match cache.
func benchVariants(b *testing.B, bench func(b *testing.B, cache bool)) {
	b.Run("cache", func(b *testing.B) { bench(b, true) })
	b.Run("nocache", func(b *testing.B) { bench(b, false) })
}
