package router_test

import (
	"testing"
)

// TestDeltaStaleBaseEvicted: the bases are bounded in count and
// bytes for the whole router; a base whose partition nobody follows any
// more must give way to a partition delta subscribers receive now, or one
// idle partition turns deltas off for every other, for good.
func TestDeltaStaleBaseEvicted(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bound func(*gwConfig)
	}{
		{"count", func(c *gwConfig) { c.router.Bounds.MaxDeltaBases = 1 }},
		{"bytes", func(c *gwConfig) {
			c.router.Bounds.MaxDeltaBaseBytes = len(mustJSON(t, dashboardState(0))) * 3 / 2
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGateway(t, tc.bound)
			pub := g.dial(t)
			old := g.dial(t)
			old.subscribe(t, "dash.old", "delta", "fossil")
			var ro deltaReader
			for v := range 2 {
				pub.publish(t, "dash.old", dashboardState(v))
				sameJSON(t, ro.take(t, old.nextOp(t, "message")), dashboardState(v))
			}
			if ro.deltas != 1 {
				t.Fatalf("dash.old: %d deltas, want 1", ro.deltas)
			}
			old.mustOK(t, map[string]any{"op": "unsubscribe", "pattern": "dash.old"}, "unsubscribed")

			c := g.dial(t)
			c.subscribe(t, "dash.new", "delta", "fossil")
			var r deltaReader
			for v := range 4 {
				pub.publish(t, "dash.new", dashboardState(v))
				sameJSON(t, r.take(t, c.nextOp(t, "message")), dashboardState(v))
			}
			if r.deltas != 3 {
				t.Fatalf("dash.new: %d deltas of 4 messages, want 3 (the base of dash.old, followed by nobody, holds the bound)", r.deltas)
			}
		})
	}
}

// TestDeltaEvictedBaseStartsFull: two partitions taking turns under
// a bound of one base evict each other's; every message still decodes,
// and once one partition alone is published deltas come back.
func TestDeltaEvictedBaseStartsFull(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.Bounds.MaxDeltaBases = 1 })
	c := g.dial(t)
	c.subscribe(t, "dash.*", "delta", "fossil")
	pub := g.dial(t)
	var r deltaReader
	for v := range 12 {
		topic := []string{"dash.a", "dash.b"}[v%2]
		pub.publish(t, topic, dashboardState(v))
		sameJSON(t, r.take(t, c.nextOp(t, "message")), dashboardState(v))
	}
	if r.deltas != 0 {
		t.Fatalf("%d deltas while two partitions evicted each other's base", r.deltas)
	}
	for v := 12; v < 16; v++ {
		pub.publish(t, "dash.a", dashboardState(v))
		sameJSON(t, r.take(t, c.nextOp(t, "message")), dashboardState(v))
	}
	if r.deltas != 3 {
		t.Fatalf("%d deltas on one partition after the turns, want 3", r.deltas)
	}
}
