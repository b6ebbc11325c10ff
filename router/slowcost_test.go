package router_test

import (
	"context"
	"io"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/session"
)

// TestMeasureSlowConsumerCost measures what subscribers that never read
// cost a publisher, against subscribers that read: the publisher's rate
// with 200 subscribers on '#' of each kind, and with non-readers whose
// every drop is a dead letter (the behaviour before dead letters were
// rate-limited). It is a measurement, not a check: it runs only with
// SWITCHYARD_MEASURE=1 and logs its figures.
func TestMeasureSlowConsumerCost(t *testing.T) {
	if os.Getenv("SWITCHYARD_MEASURE") == "" {
		t.Skip("a measurement; set SWITCHYARD_MEASURE=1 to run it")
	}
	const (
		subs   = 200
		warm   = 10000 // publishes before timing: the non-readers' queues are full by then
		n      = 20000 // timed publishes
		window = 64
	)
	payload := strings.Repeat("p", 512)
	for _, tt := range []struct {
		name   string
		read   bool
		dlRate float64
	}{
		{"readers", true, 0},
		{"non-readers, dead letters rate-limited", false, 0},
		{"non-readers, every drop a dead letter", false, math.Inf(1)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newGateway(t, func(c *gwConfig) {
				c.router.Session = session.Options{QueueMessages: 64}
				c.router.Bounds.DeadLetterRate = tt.dlRate
			})
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			for range subs {
				c := g.dialPaused(t)
				c.send(t, map[string]any{"op": "subscribe", "pattern": "#"})
				if tt.read {
					go func() { // discards everything; ends when the test closes the connection
						for {
							_, r, err := c.conn.Reader(ctx)
							if err != nil {
								return
							}
							if _, err := io.Copy(io.Discard, r); err != nil {
								return
							}
						}
					}()
				}
			}
			waitSubscribed(t, g, "#", subs)
			pub := g.dial(t)
			publish := func(count int) time.Duration {
				start := time.Now()
				for i := 0; i < count; i += window {
					for j := 0; j < window; j++ {
						pub.send(t, map[string]any{"op": "publish", "topic": "cost.a", "data": payload})
					}
					for j := 0; j < window; j++ {
						pub.nextOp(t, "published")
					}
				}
				return time.Since(start)
			}
			publish(warm)
			d := publish(n)
			t.Logf("%s: %.0f publishes/s; drops %.0f, dead letters %.0f (+%.0f unrecorded), skipped %.0f",
				tt.name, float64(n)/d.Seconds(), counterSum(t, g, "switchyard_drops_total"),
				counterSum(t, g, "switchyard_dead_letters_total"), counterSum(t, g, "switchyard_dead_letters_unrecorded_total"),
				counterSum(t, g, "switchyard_dead_letters_skipped_total"))
		})
	}
}
