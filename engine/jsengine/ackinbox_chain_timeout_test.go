package jsengine

// Chained records whose acknowledgements race their inbox's timeout:
// each answered once, none stored twice, offsets contiguous.

import (
	"testing"
	"time"
)

func TestChainAcksRaceTimeout(t *testing.T) {
	e := newChainEngine(t)
	const topic, n, parts = "rvjs.acktimeout", 1200, 3
	e.acks.mu.Lock()
	e.acks.timeout = 300 * time.Microsecond
	e.acks.mu.Unlock()
	got, failed := appendsStoredOnce(t, e, topic, n, parts, 11, n/2, func() {
		e.acks.mu.Lock()
		e.acks.timeout = pipelineAckTimeout
		e.acks.mu.Unlock()
	})
	if l := e.acks.len(); l != 0 {
		t.Errorf("%d records pending in the inbox", l)
	}
	errs := map[string][]int{}
	for i, g := range got {
		if g.err != nil {
			errs[g.err.Error()] = append(errs[g.err.Error()], i)
		}
	}
	for k, v := range errs {
		t.Logf("%d x %s: first %d last %d", len(v), k, v[0], v[len(v)-1])
	}
	t.Logf("%d of %d answered with an error (outcome unknown); %d re-appended", failed, n, e.reappends.Load())
}
