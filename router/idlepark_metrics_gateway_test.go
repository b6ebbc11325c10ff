//go:build linux

package router_test

import "testing"

// TestSessionsParkedGaugeCountsOwnGateway: switchyard_sessions_parked is
// documented as 0 with --idle-park off; a gateway with parking off, in a
// process that embeds another gateway with parking on, reports the other
// gateway's parked sessions as its own.
func TestSessionsParkedGaugeCountsOwnGateway(t *testing.T) {
	on := newGateway(t)
	off := newGateway(t, func(c *gwConfig) { c.router.Session.NoIdlePark = true })
	_ = on.dial(t)
	waitUntil(t, "the idle session to park", func() bool {
		return metricValue(t, on.reg, "switchyard_sessions_parked", nil) >= 1
	})
	if got := metricValue(t, off.reg, "switchyard_sessions_parked", nil); got != 0 {
		t.Fatalf("switchyard_sessions_parked %v on a gateway with --idle-park off and no session, want 0", got)
	}
}
