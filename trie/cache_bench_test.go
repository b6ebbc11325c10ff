package trie

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// BenchmarkRemoveFilledCache times one Remove (and the Add that undoes
// it) after filled distinct topics were admitted to the match cache since
// the last Remove: what Remove pays to empty their slots. ns/remove counts
// the Remove alone; ns/op also the Matches that fill the cache.
func BenchmarkRemoveFilledCache(b *testing.B) {
	for _, filled := range []int{0, 64, 1024, 4096} {
		b.Run(fmt.Sprintf("filled=%d", filled), func(b *testing.B) {
			tr := New[int]()
			topics := make([]string, filled)
			for j := range topics {
				topics[j] = fmt.Sprintf("fill.t%d", j)
				if err := tr.Add(topics[j], j); err != nil {
					b.Fatal(err)
				}
			}
			if err := tr.Add("fill.gone", -1); err != nil {
				b.Fatal(err)
			}
			var inRemove time.Duration
			b.ReportAllocs()
			for b.Loop() {
				for _, topic := range topics {
					tr.Match(topic, func(string, []int) {})
					tr.Match(topic, func(string, []int) {})
				}
				start := time.Now()
				tr.Remove("fill.gone", -1)
				inRemove += time.Since(start)
				if err := tr.Add("fill.gone", -1); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(inRemove.Nanoseconds())/float64(b.N), "ns/remove")
		})
	}
}

// BenchmarkMassDisconnect removes every subscription of 10,000 sessions
// with 3 subscriptions each, one session after another, while the topics
// they subscribed to keep being published: after each session, publish
// more of the 4,096 hot topics, each twice, which admits them to the match
// cache again. One op is the whole disconnect.
func BenchmarkMassDisconnect(b *testing.B) {
	const sessions, perSession, hot = 10_000, 3, 4096
	for _, publish := range []int{8, 64} {
		b.Run(fmt.Sprintf("publish=%d", publish), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, 4))
			topics := make([]string, hot)
			for j := range topics {
				topics[j] = fmt.Sprintf("md.room%d.msg", j)
			}
			subs := make([][perSession]string, sessions)
			for s := range subs {
				for k := range perSession {
					subs[s][k] = topics[rng.IntN(hot)]
				}
			}
			var inRemove time.Duration
			next := 0
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				tr := New[int]()
				for s := range subs {
					for _, p := range subs[s] {
						if err := tr.Add(p, s); err != nil {
							b.Fatal(err)
						}
					}
				}
				for _, topic := range topics { // a full cache
					tr.Match(topic, func(string, []int) {})
					tr.Match(topic, func(string, []int) {})
				}
				b.StartTimer()
				for s := range subs {
					start := time.Now()
					for _, p := range subs[s] {
						tr.Remove(p, s)
					}
					inRemove += time.Since(start)
					for range publish {
						topic := topics[next%hot]
						next++
						tr.Match(topic, func(string, []int) {})
						tr.Match(topic, func(string, []int) {})
					}
				}
			}
			b.ReportMetric(float64(inRemove.Nanoseconds())/float64(b.N*sessions*perSession), "ns/remove")
		})
	}
}
