package jsengine_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

// TestTailRestartSettlesWhenStreamEndWasPurged: a tail that stopped while
// records were stored, then purged with their topic before it saw them,
// is started again once; the new consumer finds nothing after the tail's
// sequence, which is all there is to announce, and the heartbeat must
// leave it alone from then on. The stream's last sequence stays that of
// the purged record, which no consumer delivers: the keeper saw the tail
// behind for good and restarted it every other beat for as long as no new
// record was stored.
func TestTailRestartSettlesWhenStreamEndWasPurged(t *testing.T) {
	a, b, _ := keptTail(t, "purged")
	var beats atomic.Int64
	a.SetBeforeMemberBeat(func() { beats.Add(1) })
	ctx := context.Background()

	a.StopTailConsumer()
	for i := 1; i <= 5; i++ {
		if _, err := b.Append(ctx, engine.Message{Topic: "purged", Data: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.DeleteTopic(ctx, "purged"); err != nil {
		t.Fatal(err)
	}
	from := beats.Load()
	waitUntil(t, "eight more heartbeats", func() bool { return beats.Load() >= from+8 })
	if n := a.TailRestarts(); n > 1 {
		t.Errorf("tail restarted %d times over 8 heartbeats with nothing left to announce, want at most once", n)
	}
}
