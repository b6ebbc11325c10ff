package main

import (
	"context"
	"io"
	"testing"
)

// TestSettleJudgesTheSampleItKeeps: the soak's verdict on goroutines is
// the figure the settle loop judged within bounds, not one counted again
// afterwards. A count taken just after a quiet one can catch a burst of
// timer callbacks that the engine's clock fired together (85 goroutines
// of memengine redelivery backoffs, each about to return, failed a CI run
// of TestSoakHostileShort with "105 after the load").
func TestSettleJudgesTheSampleItKeeps(t *testing.T) {
	r := newRunner(&config{inprocess: true, goroutineSlack: 10}, io.Discard)
	st := newSoak(r)
	st.stopProgress, st.stopSampling = func() {}, func() {}
	st.baseline = Sample{Goroutines: 9}
	counts := []int{15, 105} // quiet, then a burst at the next count
	st.goroutines = func() int {
		n := counts[0]
		if len(counts) > 1 {
			counts = counts[1:]
		}
		return n
	}
	st.settle(context.Background())
	if st.final.Goroutines > 19 {
		t.Fatalf("final goroutines %d, within the bound (19) when the settle loop judged them", st.final.Goroutines)
	}
	if st.leftStacks != "" {
		t.Errorf("stacks kept for a run within bounds")
	}
}
