package router_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestMQTTGroupTooLargeAtJoin: a group keeps a record over a new member's
// Maximum Packet Size while it has no member; the member's join has the
// engine deliver it at once, and the session nacks it through its acker.
// The acker must name the member the join made, read safely: the join
// records the member ID only once the engine's Join returns, after the
// delivery, so a nack read before that is a data race (and names member
// "", whoever holds the lease). The record is then dead-lettered after
// its two attempts.
func TestMQTTGroupTooLargeAtJoin(t *testing.T) {
	g := newGateway(t, withMQTT, withTooLargePolicy(2, time.Millisecond))
	a := connectSmall(t, g, "rvj-a", 0, "$share/rvj/rvj/+")
	a.unsubscribe(t, 9, "$share/rvj/rvj/+") // the group stays, with no member
	g.dial(t).publish(t, "rvj.a", strings.Repeat("x", 1000))
	connectSmall(t, g, "rvj-b", 256, "$share/rvj/rvj/+")
	waitUntil(t, "the too-large record to be dead-lettered", func() bool {
		return len(groupDeadLetters(t, g, "rvj")) > 0
	})
	if dls := groupDeadLetters(t, g, "rvj"); len(dls) != 1 || dls[0].Attempts != 2 {
		t.Fatalf("dead letters %+v, want one after 2 attempts", dls)
	}
}

// TestMQTTGroupQoS0AtJoin: as TestMQTTGroupTooLargeAtJoin, with a QoS 0
// shared subscription: the join delivers the record the group kept, and
// the session's acker acks it, once queued, as the member the join made,
// read safely; the group then has it consumed.
func TestMQTTGroupQoS0AtJoin(t *testing.T) {
	g := newGateway(t, withMQTT)
	a := connectSmall(t, g, "rvq-a", 0, "$share/rvq/rvq/+")
	a.unsubscribe(t, 9, "$share/rvq/rvq/+") // the group stays, with no member
	g.dial(t).publish(t, "rvq.a", "kept")
	c, _ := dialSession(t, g, 5, "tcp", "rvq-b", true, 0)
	c.subscribe(t, "$share/rvq/rvq/+", 0)
	c.expectPayloads(t, `"kept"`) // a native publish is JSON
	waitUntil(t, "the QoS 0 delivery to be acked", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		gi, err := g.eng.Group(ctx, "rvq")
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range gi.Partitions {
			if p.Lag != 0 || p.InFlight != 0 {
				return false
			}
		}
		return len(gi.Partitions) > 0
	})
}
