package router_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
)

// TestSessionLeasesComeBackWhenDeadLettered: a session that reads but
// never acks, in several groups with wide windows over several topics,
// gets each membership's lease window; as those records time out and are
// dead-lettered after their last attempt, their leases are the session's
// again, so new records keep coming, window after window, at the pace of
// the ack timeouts.
func TestSessionLeasesComeBackWhenDeadLettered(t *testing.T) {
	const (
		queue      = 16
		groups     = 3
		records    = 8 * queue // per group: room for several windows
		ackTimeout = 10 * time.Second
		backoff    = time.Second
	)
	clock := enginetest.NewFakeClock(time.Unix(1_700_000_000, 0))
	g := newGateway(t, func(c *gwConfig) {
		c.router.Session.QueueMessages = queue
		c.engine.Clock = clock
		c.engine.Policy = engine.GroupPolicy{AckTimeout: ackTimeout, BackoffMin: backoff, BackoffMax: backoff, MaxAttempts: 2}
	})
	pub := g.dial(t)
	topics := []string{"drip.a", "drip.b", "drip.c"}
	for i := range topics { // the topics exist before the group
		pub.publish(t, topics[i], i)
	}
	c := g.dial(t)
	for i := range groups {
		if m := c.call(t, map[string]any{"op": "subscribe", "pattern": "drip.*", "group": fmt.Sprintf("drip-%d", i), "max_in_flight": 1000}); m["op"] != "subscribed" {
			t.Fatalf("subscribe %d: %v", i, m)
		}
	}
	// The records come while the memberships hold their windows.
	for i := len(topics); i < records; i++ {
		pub.publish(t, topics[i%len(topics)], i)
	}
	// read takes every delivery the engine has made so far (the router's
	// group delivery counter is the barrier) and counts, per group, the
	// records delivered for the first time.
	firsts := map[any]int{}
	attempts := map[int64]int{}
	read := 0
	readAll := func() {
		t.Helper()
		want := int(metricValue(t, g.reg, "switchyard_deliveries_total", map[string]string{"kind": "group"}))
		for read < want {
			var m map[string]any
			if len(c.backlog) > 0 {
				m, c.backlog = c.backlog[0], c.backlog[1:]
			} else {
				select {
				case m = <-c.frames:
				case <-time.After(waitTimeout):
					c.closeMu.Lock()
					err := c.closeErr
					c.closeMu.Unlock()
					t.Fatalf("read %d of %d group deliveries; no frame within %v (connection: %v)", read, want, waitTimeout, err)
				}
			}
			if m["op"] != "message" {
				continue
			}
			read++
			attempts[num(m, "attempt")]++
			if num(m, "attempt") == 1 {
				firsts[m["group"]]++
			}
		}
	}
	// advance moves the clock by d one backoff at a time, taking what each
	// step delivered before the next. The timers drift apart over the
	// rounds (a record's ack timeout starts when it is delivered), so one
	// jump of an ack timeout and a backoff can both time a record out and
	// deliver its next attempt, and the one after it once the lease comes
	// back: each lease's frames queued at once, past what the session
	// queue holds (four times its bound), and the session is closed as a
	// slow consumer whenever its writer lags the jump. In real time the
	// client reads each delivery long before its ack timeout; one backoff
	// at a time, a lease makes at most one delivery per step.
	advance := func(d time.Duration) {
		t.Helper()
		for step := time.Duration(0); step < d; step += backoff {
			clock.Advance(backoff)
			readAll()
		}
	}
	readAll()
	window := firsts["drip-0"]
	if window == 0 || window >= records {
		t.Fatalf("drip-0 delivered %d of %d records before the first timeout; want a window", window, records)
	}
	t.Logf("first window: %v records first delivered per group", firsts)
	// Every record runs out of its two attempts within two ack timeouts
	// and a backoff of its first delivery; a session that gets its leases
	// back meets every record of drip-0 for the first time within a few
	// rounds more than records/window.
	for round := 1; firsts["drip-0"] < records; round++ {
		if round > 4*records/window {
			_, grp, _ := g.httpDo(t, "GET", "/v1/groups/drip-0", nil)
			t.Fatalf("after %d ack timeouts drip-0 has delivered %d of %d records (deliveries by attempt %v): the leases of dead-lettered records did not come back; group %v",
				round-1, firsts["drip-0"], records, attempts, grp)
		}
		advance(ackTimeout + backoff)
	}
	t.Logf("every record delivered; deliveries by attempt %v; first deliveries %v", attempts, firsts)
}

// TestManyGroupMembershipsFitTheSessionLeases: a session in many groups
// whose windows are small (the default max_in_flight of 1, on topics of a
// few partitions) reserves what each window can hold, not the session's
// queue bound each, so an application with dozens of groups is not
// refused; a wide window over a wildcard still reserves its share.
func TestManyGroupMembershipsFitTheSessionLeases(t *testing.T) {
	const groups = 60
	g := newGateway(t)
	pub := g.dial(t)
	pub.publish(t, "many", 1)
	c := g.dial(t)
	for i := range groups {
		m := c.call(t, map[string]any{"op": "subscribe", "pattern": "many", "group": fmt.Sprintf("many-%d", i)})
		if m["op"] != "subscribed" {
			t.Fatalf("subscribe %d of %d: %v", i, groups, m)
		}
	}
	parts := topicPartitions(t, g, "many")
	if got, most := metricValue(t, g.reg, "switchyard_group_session_leases_reserved", nil), float64(groups*parts); got > most {
		t.Errorf("%d memberships of window 1 over %d partitions reserve %v leases, want at most %v", groups, parts, got, most)
	}
}

// topicPartitions returns the partition count of topic, as the HTTP API
// tells it.
func topicPartitions(t *testing.T, g *gateway, topic string) int {
	t.Helper()
	code, body, _ := g.httpDo(t, "GET", "/v1/topics/"+topic, nil)
	if code != 200 {
		t.Fatalf("topic %s: %d %v", topic, code, body)
	}
	return int(num(body, "partitions"))
}
