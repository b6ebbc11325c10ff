package jsengine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestTailThatStoppedIsRestarted: a node whose live tail stopped
// delivering (its ordered consumer gave up while the connection flapped)
// starts it again from the heartbeat and announces every record stored
// meanwhile, in order, to its observers. It announced nothing more for
// the rest of its life before (the fault scenario lossy-gateway-links: a
// gateway's plain subscriber was sent no record at all).
func TestTailThatStoppedIsRestarted(t *testing.T) {
	a, b, obs := keptTail(t, "kept")
	ctx := context.Background()

	a.StopTailConsumer()
	const n = 20
	for i := 1; i <= n; i++ {
		if _, err := b.Append(ctx, engine.Message{Topic: "kept", Data: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "every record on a", func() bool { recs, _ := obs.snapshot(); return len(recs) == n+1 })
	recs, _ := obs.snapshot()
	for i, r := range recs {
		if r.Offset != int64(i) {
			t.Fatalf("record %d announced at offset %d", i, r.Offset)
		}
	}
	if a.TailRestarts() == 0 {
		t.Errorf("no tail restart counted")
	}
}

// TestCountersCountTailRestarts: the engine's counters (engine.Counted)
// include its tail restarts.
func TestCountersCountTailRestarts(t *testing.T) {
	a, b, _ := keptTail(t, "counted")
	a.StopTailConsumer()
	if _, err := b.Append(context.Background(), engine.Message{Topic: "counted", Data: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "a tail restart", func() bool { return a.TailRestarts() >= 1 })
	for _, c := range a.Counters() {
		if c.Name == "tail_restarts" {
			if c.Value != a.TailRestarts() {
				t.Errorf("tail_restarts %d, want %d", c.Value, a.TailRestarts())
			}
			return
		}
	}
	t.Errorf("no tail_restarts among %+v", a.Counters())
}

// keptTail starts two nodes whose heartbeat beats every half second,
// watches a's tail with obs, and returns once a has announced the first
// record b appended to topic.
func keptTail(t *testing.T, topic string) (a, b *jsengine.Engine, obs *tailObs) {
	t.Helper()
	url := natstest.URL(t)
	o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), ttl: 1500 * time.Millisecond}
	a, b = twoNodes(t, o)
	obs = &tailObs{}
	t.Cleanup(a.Watch(obs))
	if _, err := b.Append(context.Background(), engine.Message{Topic: topic, Data: []byte(`0`)}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first record on a", func() bool { recs, _ := obs.snapshot(); return len(recs) == 1 })
	return a, b, obs
}
