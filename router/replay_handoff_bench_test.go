package router

import (
	"strconv"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

// BenchmarkBelowFloor is the check a live delivery makes against the
// offsets its catch-up ended at: "none" for a subscription that did not
// replay (or whose floors were all passed), "floors" for one that replayed
// a wildcard over 1,000 partitions, some of them not passed yet.
func BenchmarkBelowFloor(b *testing.B) {
	rec := &engine.Record{Topic: "bench.500", Offset: 5}
	b.Run("none", func(b *testing.B) {
		s := &subscription{}
		b.ReportAllocs()
		for b.Loop() {
			if s.belowFloor(rec) {
				b.Fatal("dropped")
			}
		}
	})
	b.Run("floors", func(b *testing.B) {
		s := &subscription{}
		next := make(map[partKey]int64, 1000)
		for i := range 1000 {
			next[partKey{"bench." + strconv.Itoa(i), 0}] = 1
		}
		s.floors.Store(newFloorSet(next))
		b.ReportAllocs()
		for b.Loop() {
			if s.belowFloor(rec) {
				b.Fatal("dropped")
			}
		}
		if s.floors.Load() == nil {
			b.Fatal("floors dropped while some were not passed")
		}
	})
}
