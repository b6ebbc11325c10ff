package router

import (
	"testing"

	"github.com/switchyard/switchyard/engine"
)

// TestFloorsPassedAreDropped: live records below a partition's floor are
// dropped, the first at or above it passes the floor, and once every floor
// is passed the subscription keeps none; a deleted topic's floors go at
// once.
func TestFloorsPassedAreDropped(t *testing.T) {
	s := &subscription{}
	s.floors.Store(newFloorSet(map[partKey]int64{{"a", 0}: 3, {"a", 1}: 2, {"b", 0}: 5, {"c", 0}: 0}))
	rec := func(topic string, part int, off int64) *engine.Record {
		return &engine.Record{Topic: topic, Partition: part, Offset: off}
	}
	for _, c := range []struct {
		r    *engine.Record
		drop bool
	}{
		{rec("a", 0, 2), true}, {rec("a", 0, 3), false}, {rec("a", 0, 1), true},
		{rec("a", 1, 2), false}, {rec("c", 0, 0), false}, {rec("d", 0, 0), false},
	} {
		if got := s.belowFloor(c.r); got != c.drop {
			t.Fatalf("%s/%d@%d: dropped %v, want %v", c.r.Topic, c.r.Partition, c.r.Offset, got, c.drop)
		}
	}
	if s.floors.Load() == nil {
		t.Fatal("floors dropped while b/0 was not passed")
	}
	s.dropFloors("b")
	if f := s.floors.Load(); f != nil {
		t.Fatalf("floors kept after the last unpassed one's topic was deleted: %v", f.m)
	}
	if s.belowFloor(rec("b", 0, 0)) {
		t.Fatal("a record of the new incarnation of b was dropped")
	}
}
