package router

import (
	"github.com/prometheus/client_golang/prometheus"
)

// groupMetrics are the collectors of the bounds on consumer groups: seeks
// (groupseek.go), pull members (pull.go) and the leases of a session's
// memberships (groupleases.go).
type groupMetrics struct {
	seekDrainTimeouts prometheus.Counter
}

func newGroupMetrics(reg prometheus.Registerer) *groupMetrics {
	const ns = "switchyard"
	m := &groupMetrics{
		seekDrainTimeouts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "group_seek_drain_timeouts_total",
			Help: "Seeks that went ahead after waiting 5s for a member of the group on this node to write the deliveries already queued for it."}),
	}
	reg.MustRegister(m.seekDrainTimeouts)
	return m
}
