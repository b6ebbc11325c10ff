package router

// The metrics of the limits, bounds and HTTP server refusals; all router
// metrics are made and registered by registerMetrics (metrics.go).

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/session"
)

// limitMetrics count refused credentials, refused permissions and the
// limits of limits.go. They are registered on the Router's registry.
type limitMetrics struct {
	authFailures    *prometheus.CounterVec // reason
	forbidden       *prometheus.CounterVec // op: publish|subscribe|group|admin
	sessionsExpired prometheus.Counter
	reloadEnded     prometheus.Counter     // sessions a reload's re-check closed (recheck.go)
	reloadChecked   prometheus.Counter     // sessions whose credential a reload's re-check checked
	refreshes       *prometheus.CounterVec // outcome: required|ok|refused
	limited         *prometheus.CounterVec // limit
}

func newLimitMetrics(reg prometheus.Registerer) *limitMetrics {
	m := &limitMetrics{
		authFailures:    newCounterVec("auth_failures_total", "Requests and WebSocket upgrades refused with 401, by reason (missing, invalid, invalid_claims, expired, not_yet_valid).", "reason"),
		forbidden:       newCounterVec("forbidden_total", "Operations refused with forbidden because the credential does not grant them, by operation.", "op"),
		sessionsExpired: newCounter("sessions_expired_total", "WebSocket sessions closed with 1008 because their token expired."),
		reloadEnded:     newCounter("reload_sessions_ended_total", "Sessions closed with 1008 because a reload's keys no longer accept their credential."),
		reloadChecked:   newCounter("reload_sessions_checked_total", "Open sessions whose credential was checked again because a reload changed the keys."),
		refreshes:       newCounterVec("token_refreshes_total", "Token refresh events on open sessions: required (refresh_required sent), ok (refreshed), refused.", "outcome"),
		limited:         newCounterVec("limit_rejections_total", "Requests refused by a configured limit (connections, connections_per_ip, connect_rate_per_ip, connect_hook_per_ip, topics, partitions, http_publish_rate, redrive_ids, publish_batch_records, publish_batch_bytes).", "limit"),
	}
	reg.MustRegister(m.authFailures, m.forbidden, m.sessionsExpired, m.reloadEnded, m.reloadChecked, m.refreshes, m.limited)
	return m
}

// httpMetrics count HTTP requests refused before a handler answered them
// and connections closed by a server timeout (server.go).
type httpMetrics struct {
	timeouts *prometheus.CounterVec // phase: read_header|read|write
	refused  *prometheus.CounterVec // reason
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		timeouts: newCounterVec("http_timeouts_total", "HTTP connections closed by a server timeout, by phase (read_header: headers not sent in time; read: body not sent in time; write: response not taken in time).", "phase"),
		refused:  newCounterVec("http_refused_total", "HTTP requests refused before reaching their handler, by reason (content_type, origin, preflight_origin).", "reason"),
	}
	for _, p := range []string{"read_header", "read", "write"} {
		m.timeouts.WithLabelValues(p)
	}
	for _, r := range []string{"content_type", "origin", "preflight_origin"} {
		m.refused.WithLabelValues(r)
	}
	reg.MustRegister(m.timeouts, m.refused)
	return m
}

// boundMetrics are the counters of the bounds of bounds.go beyond
// switchyard_limit_rejections_total.
type boundMetrics struct {
	deadLettersSkipped prometheus.Counter
	drops              [3]prometheus.Counter // by session.Policy: drop_old, drop_new, disconnect
}

// boundLimits are the switchyard_limit_rejections_total labels of the
// bounds of bounds.go, created at zero like the gateway's other known series.
var boundLimits = []string{
	limitTopicBytes, limitTopicDepth, limitKeyBytes, limitMsgIDBytes, limitHeaders, limitHeaderBytes,
	limitFilterHeaders, limitFilterBytes, limitSessionFilterBytes, limitIDBytes,
	limitControlQueueBytes, limitMessageTimeout,
}

func newBoundMetrics(rt *Router) *boundMetrics {
	reg, m, lim := rt.opts.Registry, rt.m, rt.lim
	bm := &boundMetrics{
		deadLettersSkipped: newCounter("dead_letters_skipped_total", "queue_full drops not recorded as dead letters because the subscription's dead-letter rate was exceeded (the drops are still counted and reported as gaps)."),
	}
	for p := session.DropOld; p <= session.Disconnect; p++ {
		bm.drops[p] = m.drops.WithLabelValues(p.String())
	}
	for _, l := range boundLimits {
		lim.limited.WithLabelValues(l)
	}
	budget := rt.opts.Session.ReadBudget
	reg.MustRegister(bm.deadLettersSkipped, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "switchyard", Name: "inbound_partial_bytes",
		Help: "Bytes of read buffers held by inbound WebSocket messages still arriving (fragmented or partial), beyond each session's small pooled buffer.",
	}, func() float64 {
		if budget != nil {
			return float64(budget.Used())
		}
		var n int64
		for _, c := range rt.connList() {
			n += c.sess.Stats().Reading
		}
		return float64(n)
	}), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "switchyard", Name: "inbound_partial_limit_bytes",
		Help: "The gateway-wide bound on inbound_partial_bytes (--max-inbound-partial-bytes); 0: none.",
	}, func() float64 {
		if budget != nil {
			return float64(budget.Max())
		}
		return 0
	}), prometheus.NewCounterFunc(prometheus.CounterOpts{
		Namespace: "switchyard", Name: "inbound_partial_waits_total",
		Help: "Times a session's reader waited because inbound_partial_bytes had reached its bound.",
	}, func() float64 {
		if budget != nil {
			return float64(budget.Waits())
		}
		return 0
	}))
	return bm
}

// groupMetrics are the collectors of the bounds on consumer groups
// (group_bounds.go).
type groupMetrics struct {
	seekDrainTimeouts prometheus.Counter
	leasesReserved    prometheus.Gauge
	made              *groupLedger // the groups made through this gateway (group_count.go)
}

func newGroupMetrics(rt *Router, reg prometheus.Registerer) *groupMetrics {
	const ns = "switchyard"
	m := &groupMetrics{
		seekDrainTimeouts: newCounter("group_seek_drain_timeouts_total", "Seeks that went ahead after waiting 5s for a member of the group on this node to write the deliveries already queued for it."),
		leasesReserved:    newGauge("group_session_leases_reserved", "Leases the WebSocket group memberships of this node may hold, summed over sessions (each session at most --max-session-leases)."),
	}
	reg.MustRegister(m.seekDrainTimeouts, m.leasesReserved, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "pull_members",
		Help: "HTTP pull members this node holds (at most --max-pull-members)."}, func() float64 {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return float64(len(rt.pulls))
	}))
	m.made = newGroupLedger()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "groups_made",
		Help: "Consumer groups made through this gateway that still exist (at most --max-groups)."}, func() float64 { return float64(m.made.tally().n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "groups_made_bytes",
			Help: "Bytes charged for the consumer groups made through this gateway that still exist (at most --max-group-bytes)."}, func() float64 { return float64(m.made.tally().bytes) }))
	for _, l := range []string{limitPullMembers, limitPullMembersPerClient, limitSessionLeases, limitGroups, limitGroupBytes, limitGroupsPerClient, limitGroupBytesPerClient} {
		rt.lim.limited.WithLabelValues(l)
	}
	return m
}
