package router_test

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/session"
)

// TestQueueFullDeadLettersRateLimited: subscribers that never read cost a
// bounded number of dead-letter writes, however much they drop, while
// their drop counters and gap frames stay exact.
func TestQueueFullDeadLettersRateLimited(t *testing.T) {
	const (
		subs  = 8
		n     = 300
		queue = 4
	)
	pad := strings.Repeat("p", 16<<10) // n records are ~5 MiB: past the socket buffers
	g := newGateway(t, func(c *gwConfig) { c.router.Session = session.Options{QueueMessages: queue} })
	start := time.Now()
	stuck := make([]*client, subs)
	for i := range stuck {
		stuck[i] = g.dialPaused(t)
		stuck[i].send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "#"})
	}
	waitSubscribed(t, g, "#", subs)
	pub := g.dial(t)
	for i := range n {
		pub.publish(t, "dl.flood", map[string]any{"i": i, "pad": pad})
	}
	// Every subscriber saw every record as a message or inside a gap,
	// exactly once.
	for i, c := range stuck[:2] {
		c.resume()
		c.nextOp(t, "welcome")
		c.nextOp(t, "subscribed")
		seen := make([]int, n)
		for covered := 0; covered < n; {
			m := c.next(t)
			switch m["op"] {
			case "message":
				seen[num(m, "offset")]++
				covered++
			case "gap":
				if m["reason"] != "queue_full" {
					t.Fatalf("gap %v", m)
				}
				for o := num(m, "from"); o < num(m, "to"); o++ {
					seen[o]++
					covered++
				}
			default:
				t.Fatalf("subscriber %d: frame %v", i, m)
			}
		}
		for o, k := range seen {
			if k != 1 {
				t.Fatalf("subscriber %d: offset %d seen %d times", i, o, k)
			}
		}
	}
	drops := counterSum(t, g, "switchyard_drops_total")
	if drops < subs {
		t.Fatalf("only %v drops: the subscribers' queues did not overflow", drops)
	}
	// Every drop is either a dead letter (recorded, or counted as
	// unrecorded when the buffer to the engine is full) or skipped by its
	// subscription's bucket; recording is asynchronous.
	var written, skipped float64
	waitUntil(t, "every drop is accounted for", func() bool {
		written = metricValue(t, g.reg, "switchyard_dead_letters_total", map[string]string{"reason": "queue_full"}) +
			counterSum(t, g, "switchyard_dead_letters_unrecorded_total")
		skipped = counterSum(t, g, "switchyard_dead_letters_skipped_total")
		drops = counterSum(t, g, "switchyard_drops_total")
		return written+skipped == drops
	})
	elapsed := time.Since(start).Seconds()
	bound := subs * (router.DefaultDeadLetterBurst + router.DefaultDeadLetterRate*(elapsed+1))
	if written > bound {
		t.Fatalf("%v dead-letter writes for %v drops; the bound is %v", written, drops, bound)
	}
	t.Logf("%d subscribers: %v drops, %v dead letters, %v skipped in %.2fs", subs, drops, written, skipped, elapsed)
}
