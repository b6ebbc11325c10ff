package router

import (
	"github.com/prometheus/client_golang/prometheus"
)

// GroupBounds bounds what clients may make the gateway hold in consumer
// groups: pull members (pull.go) and the leases of a session's group
// memberships (groupleases.go). The zero value of each field takes its
// default; a negative value removes the bound.
type GroupBounds struct {
	// MaxPullMembers bounds the pull members this node holds at once, one
	// per group polled here in the last minute (each leases up to 1000
	// records and pullLeasedBytes of them). Default 1000.
	MaxPullMembers int
	// MaxPullMembersPerClient bounds the pull members one client (its
	// token's subject, or its IP address without one) has made this node
	// hold: polling a group that has none here makes one. Default 64.
	MaxPullMembersPerClient int
	// MaxSessionLeases bounds the records one WebSocket session holds
	// leased over all its group memberships. Default 4 × the session's
	// queue bound (Session.QueueMessages), the number of reliable items a
	// session may have queued before it is closed with 1013.
	MaxSessionLeases int
	// MaxSessionLeaseBytes bounds, likewise, the bytes of those records.
	// Default 16 MiB.
	MaxSessionLeaseBytes int64
}

// Defaults of GroupBounds.
const (
	DefaultMaxPullMembers          = 1000
	DefaultMaxPullMembersPerClient = 64
	DefaultMaxSessionLeaseBytes    = 16 << 20
)

func (b GroupBounds) withDefaults(queueMessages int) GroupBounds {
	if b.MaxPullMembers == 0 {
		b.MaxPullMembers = DefaultMaxPullMembers
	}
	if b.MaxPullMembersPerClient == 0 {
		b.MaxPullMembersPerClient = DefaultMaxPullMembersPerClient
	}
	if b.MaxSessionLeases == 0 {
		b.MaxSessionLeases = 4 * queueMessages
	}
	if b.MaxSessionLeaseBytes == 0 {
		b.MaxSessionLeaseBytes = DefaultMaxSessionLeaseBytes
	}
	return b
}

// Limit labels of switchyard_limit_rejections_total for the group bounds.
const (
	limitPullMembers          = "pull_members"
	limitPullMembersPerClient = "pull_members_per_client"
	limitSessionLeases        = "session_leases"
)

// groupMetrics are the collectors of the bounds on consumer groups.
type groupMetrics struct {
	seekDrainTimeouts prometheus.Counter
	leasesReserved    prometheus.Gauge
}

func newGroupMetrics(rt *Router, reg prometheus.Registerer) *groupMetrics {
	const ns = "switchyard"
	m := &groupMetrics{
		seekDrainTimeouts: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "group_seek_drain_timeouts_total",
			Help: "Seeks that went ahead after waiting 5s for a member of the group on this node to write the deliveries already queued for it."}),
		leasesReserved: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "group_session_leases_reserved",
			Help: "Leases the WebSocket group memberships of this node may hold, summed over sessions (each session at most --max-session-leases)."}),
	}
	reg.MustRegister(m.seekDrainTimeouts, m.leasesReserved, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "pull_members",
		Help: "HTTP pull members this node holds (at most --max-pull-members)."}, func() float64 {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return float64(len(rt.pulls))
	}))
	for _, l := range []string{limitPullMembers, limitPullMembersPerClient, limitSessionLeases} {
		rt.lim.limited.WithLabelValues(l)
	}
	return m
}
