//go:build linux

package router_test

import "testing"

// TestSessionsParkedGauge: an idle WebSocket session's socket parks in the
// idle poller, and switchyard_sessions_parked counts it; the poller has
// not fallen back.
func TestSessionsParkedGauge(t *testing.T) {
	g := newGateway(t)
	base := metricValue(t, g.reg, "switchyard_sessions_parked", nil)
	_ = g.dial(t)
	waitUntil(t, "the idle session to park", func() bool {
		return metricValue(t, g.reg, "switchyard_sessions_parked", nil) >= base+1
	})
	if got := metricValue(t, g.reg, "switchyard_idle_poller_fallbacks_total", nil); got != 0 {
		t.Fatalf("idle poller fallbacks %v, want 0", got)
	}
}
