package router

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard/switchyard/engine"
	hookc "github.com/switchyard/switchyard/router/internal/hooks"
	"github.com/switchyard/switchyard/session"
)

// registerMetrics makes the router's collectors and registers them on
// Options.Registry, in this one place: the gateway's own (metrics), the
// limits' (limitMetrics), the HTTP server's (httpMetrics), the bounds'
// (boundMetrics), the consumer groups' (groupMetrics) and the hooks'
// (returned for newHooks; declared in router/internal/hooks beside the
// client whose state two of its gauges read). It runs once, from New,
// before anything counts. The collectors that read a component's own
// state are registered with it: SSE resumption (sse_resume.go,
// sse_open.go), presence churn (presence_churn.go) and JWKS (auth.go).
func (rt *Router) registerMetrics() *hookc.Metrics {
	reg := rt.opts.Registry
	rt.m = newMetrics(reg)
	rt.lim = newLimitMetrics(reg)
	rt.httpm = newHTTPMetrics(reg)
	rt.initMetrics()
	rt.bm = newBoundMetrics(rt)
	rt.gm = newGroupMetrics(rt, reg)
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "switchyard", Name: "bytes_in_total",
		Help: "WebSocket payload bytes received from clients."}, func() float64 {
		in, _ := rt.sessionBytes()
		return float64(in)
	}), prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "switchyard", Name: "bytes_out_total",
		Help: "WebSocket payload bytes written to clients."}, func() float64 {
		_, out := rt.sessionBytes()
		return float64(out)
	}))
	return newHookMetrics(reg)
}

// sessionBytes returns the payload bytes read from and written to clients
// since the start: those of the sessions that ended and those the open
// sessions count themselves (session.Stats), so each byte is counted once,
// by its session. A session that ends meanwhile is in exactly one of the
// two, so the totals never go back.
func (rt *Router) sessionBytes() (in, out uint64) {
	rt.mu.Lock()
	in, out = rt.m.endedBytesIn, rt.m.endedBytesOut
	conns := make([]*conn, 0, len(rt.conns))
	for c := range rt.conns {
		conns = append(conns, c)
	}
	rt.mu.Unlock()
	for _, c := range conns {
		st := c.sess.Stats()
		in += st.BytesIn
		out += st.BytesOut
	}
	return in, out
}

// metrics are the gateway's Prometheus collectors. Labels are bounded: no
// per-session or per-topic labels (topic-level figures are in /v1/topics and
// the $sys.topics summary).
type metrics struct {
	connections     prometheus.Gauge
	connectsTotal   prometheus.Counter
	subscriptions   *prometheus.GaugeVec   // kind: plain|group
	publishes       *prometheus.CounterVec // transport: ws|http, result: ok|duplicate|error code
	deliveries      *prometheus.CounterVec // kind: plain|group
	deliveriesPlain prometheus.Counter
	deliveriesGroup prometheus.Counter
	deliveriesLocal prometheus.Counter
	// Payload bytes of the sessions that ended (removeConn), guarded by
	// Router.mu; bytes_in_total and bytes_out_total add the open ones'
	// (Router.sessionBytes).
	endedBytesIn, endedBytesOut uint64
	queueDepth                  prometheus.Histogram
	drops                       *prometheus.CounterVec // policy
	gaps                        *prometheus.CounterVec // reason
	redeliveries                prometheus.Counter
	deadLetters                 *prometheus.CounterVec // reason
	rejected                    *prometheus.CounterVec // code
	backpressure                prometheus.Counter
	appendLatency               prometheus.Histogram
	deliveryLatency             prometheus.Histogram
	slowDisconnects             prometheus.Counter
	deadLettersLost             prometheus.Counter
	groupLag                    *prometheus.GaugeVec // group, topic, partition
	deadLettersHeld             *prometheus.GaugeVec // reason
	// Pipelined publish (publish.go).
	publishesInFlight prometheus.Gauge
	pipelineWaits     *prometheus.CounterVec // bound: count|bytes
}

func newMetrics(reg prometheus.Registerer) *metrics {
	const ns = "switchyard"
	m := &metrics{
		connections: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "connections",
			Help: "Open WebSocket sessions."}),
		connectsTotal: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "connects_total",
			Help: "WebSocket sessions accepted."}),
		subscriptions: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "subscriptions",
			Help: "Active subscriptions by kind (plain or group)."}, []string{"kind"}),
		publishes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "publishes_total",
			Help: "Publish requests by transport and result (ok, duplicate, or the error code)."}, []string{"transport", "result"}),
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "deliveries_total",
			Help: "Message frames queued to sessions, by subscription kind."}, []string{"kind"}),
		queueDepth: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "outbound_queue_depth",
			Help:    "Outbound queue depth of each session, sampled every stats interval.",
			Buckets: []float64{0, 1, 8, 64, 256, 512, 1024, 4096}}),
		drops: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "drops_total",
			Help: "Messages dropped by full outbound queues, by the subscription's on_full policy."}, []string{"policy"}),
		gaps: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "gaps_total",
			Help: "Gap frames sent, by reason."}, []string{"reason"}),
		redeliveries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "redeliveries_total",
			Help: "Consumer-group deliveries with attempt > 1."}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "dead_letters_total",
			Help: "Dead letters recorded by this node, by reason (queue_full: drops of plain subscriptions; max_attempts letters are counted by the engine and listed at /v1/deadletters)."}, []string{"reason"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "rejected_frames_total",
			Help: "Client requests answered with an error, by error code."}, []string{"code"}),
		backpressure: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "backpressure_total",
			Help: "Publishes refused because a block-policy topic stayed full."}),
		appendLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "append_seconds",
			Help:    "Time to append a publish to the log.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12)}),
		deliveryLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "publish_to_write_seconds",
			Help:    "Time from a record's append to the socket write that carried it, sampled.",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 12)}),
		slowDisconnects: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "slow_consumer_disconnects_total",
			Help: "Sessions closed with 1013 because their queue was full under the disconnect policy."}),
		deadLettersLost: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "dead_letters_unrecorded_total",
			Help: "queue_full dead letters that could not be recorded (buffer full or engine error)."}),
		groupLag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "group_lag",
			Help: "Records a consumer group has not yet committed, per topic partition (refreshed every stats interval)."},
			[]string{"group", "topic", "partition"}),
		deadLettersHeld: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Name: "dead_letters_stored",
			Help: "Dead letters the engine holds (as listed at /v1/deadletters), by reason: max_attempts or queue_full (refreshed with group lag)."},
			[]string{"reason"}),
		publishesInFlight: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "publishes_in_flight",
			Help: "WebSocket publishes handed to the engine and not yet answered, over all sessions (each session holds at most --publish-pipeline)."}),
		pipelineWaits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "publish_pipeline_waits_total",
			Help: "Times a session's reader stopped reading because its publishes in flight reached a bound: count (--publish-pipeline) or bytes (--publish-pipeline-bytes)."}, []string{"bound"}),
	}
	m.deliveriesPlain = m.deliveries.WithLabelValues("plain")
	m.deliveriesGroup = m.deliveries.WithLabelValues("group")
	m.deliveriesLocal = m.deliveries.WithLabelValues("local")
	reg.MustRegister(m.connections, m.connectsTotal, m.subscriptions, m.publishes, m.deliveries,
		m.queueDepth, m.drops, m.gaps, m.redeliveries, m.deadLetters,
		m.rejected, m.backpressure, m.appendLatency, m.deliveryLatency, m.slowDisconnects, m.deadLettersLost, m.groupLag, m.deadLettersHeld,
		m.publishesInFlight, m.pipelineWaits,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// limitMetrics count refused credentials, refused permissions and the
// limits this file enforces. They are registered on the Router's registry.
type limitMetrics struct {
	authFailures    *prometheus.CounterVec // reason
	forbidden       *prometheus.CounterVec // op: publish|subscribe|group|admin
	sessionsExpired prometheus.Counter
	refreshes       *prometheus.CounterVec // outcome: required|ok|refused
	limited         *prometheus.CounterVec // limit
}

func newLimitMetrics(reg prometheus.Registerer) *limitMetrics {
	const ns = "switchyard"
	m := &limitMetrics{
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "auth_failures_total",
			Help: "Requests and WebSocket upgrades refused with 401, by reason (missing, invalid, invalid_claims, expired, not_yet_valid)."},
			[]string{"reason"}),
		forbidden: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "forbidden_total",
			Help: "Operations refused with forbidden because the credential does not grant them, by operation."},
			[]string{"op"}),
		sessionsExpired: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "sessions_expired_total",
			Help: "WebSocket sessions closed with 1008 because their token expired."}),
		refreshes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "token_refreshes_total",
			Help: "Token refresh events on open sessions: required (refresh_required sent), ok (refreshed), refused."},
			[]string{"outcome"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "limit_rejections_total",
			Help: "Requests refused by a configured limit (connections, connections_per_ip, connect_rate_per_ip, connect_hook_per_ip, topics, partitions, http_publish_rate, redrive_ids)."},
			[]string{"limit"}),
	}
	reg.MustRegister(m.authFailures, m.forbidden, m.sessionsExpired, m.refreshes, m.limited)
	return m
}

// httpMetrics count HTTP requests refused before a handler answered them
// and connections closed by a server timeout.
type httpMetrics struct {
	timeouts *prometheus.CounterVec // phase: read_header|read|write
	refused  *prometheus.CounterVec // reason
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	const ns = "switchyard"
	m := &httpMetrics{
		timeouts: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "http_timeouts_total",
			Help: "HTTP connections closed by a server timeout, by phase (read_header: headers not sent in time; read: body not sent in time; write: response not taken in time)."},
			[]string{"phase"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "http_refused_total",
			Help: "HTTP requests refused before reaching their handler, by reason (content_type, origin, preflight_origin)."},
			[]string{"reason"}),
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

// boundMetrics are the counters of the bounds here beyond
// switchyard_limit_rejections_total.
type boundMetrics struct {
	deadLettersSkipped prometheus.Counter
	drops              [3]prometheus.Counter // by session.Policy: drop_old, drop_new, disconnect
}

// boundLimits are the switchyard_limit_rejections_total labels of the
// bounds here, created at zero like the gateway's other known series.
var boundLimits = []string{
	limitTopicBytes, limitTopicDepth, limitKeyBytes, limitMsgIDBytes, limitHeaders, limitHeaderBytes,
	limitFilterHeaders, limitFilterBytes, limitSessionFilterBytes, limitIDBytes,
	limitControlQueueBytes, limitMessageTimeout,
}

func newBoundMetrics(rt *Router) *boundMetrics {
	reg, m, lim := rt.opts.Registry, rt.m, rt.lim
	bm := &boundMetrics{
		deadLettersSkipped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "switchyard", Name: "dead_letters_skipped_total",
			Help: "queue_full drops not recorded as dead letters because the subscription's dead-letter rate was exceeded (the drops are still counted and reported as gaps)."}),
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

// groupMetrics are the collectors of the bounds on consumer groups.
type groupMetrics struct {
	seekDrainTimeouts prometheus.Counter
	leasesReserved    prometheus.Gauge
	made              *groupLedger // the groups made through this gateway (groupcount.go)
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

// Label values known in advance. initMetrics creates every series of them
// at zero, so a scrape of a fresh gateway shows each documented family and
// alerts can be written (and tested) before the first incident.
var (
	metricTransports      = []string{"ws", "http", "local"}
	metricPublishResult   = []string{"ok", "duplicate"}
	metricSubKinds        = []string{"plain", "group", "local"}
	metricDropPolicies    = []string{"drop_old", "drop_new", "disconnect"}
	metricGapReasons      = []string{"queue_full", "retention"}
	metricDLReasons       = []string{"queue_full"}
	metricStoredDLReasons = []string{"max_attempts", "queue_full"}
	metricErrorCodes      = []string{
		codeBadRequest, codeInvalidTopic, codeInvalidPattern, codeUnknownTopic, codeUnauthorized,
		codeForbidden, codeRateLimited, codeBackpressure, codeTooLarge, codeTooManySubs,
		codeNotSubscribed, codeGroupConflict, codeShuttingDown, codeInternal, codeTopicExists,
		codeUnknownGroup, codeNotInFlight, codeUnavailable, codeNotFound, codeMethodNotAllowed,
		codeTooManyConnections, codeTooManyTopics, codeUnsupportedMedia,
	}
	metricAuthReasons     = []string{"missing", "invalid", "invalid_claims", "expired", "not_yet_valid"}
	metricForbiddenOps    = []string{"publish", "subscribe", "group", "admin", "refresh"}
	metricRefreshOutcomes = []string{"required", "ok", "refused"}
	metricPipelineBounds  = []string{"count", "bytes"}
	metricLimits          = []string{"connections", "connections_per_ip", "topics", "partitions", "http_publish_rate", "redrive_ids"}
)

// readyProbeTimeout bounds the engine check behind switchyard_engine_ready,
// which runs at each scrape: short enough that an unreachable NATS does
// not stall Prometheus (whose scrape timeout defaults to 10 s).
const readyProbeTimeout = time.Second

// initMetrics creates the series of every known label value at zero and
// registers switchyard_engine_ready. It runs once, from New.
func (rt *Router) initMetrics() {
	m, lim := rt.m, rt.lim
	for _, t := range metricTransports {
		for _, r := range metricPublishResult {
			m.publishes.WithLabelValues(t, r)
		}
		for _, c := range metricErrorCodes {
			m.publishes.WithLabelValues(t, c)
		}
	}
	touch(m.subscriptions, metricSubKinds)
	touch(m.drops, metricDropPolicies)
	touch(m.gaps, metricGapReasons)
	touch(m.deadLetters, metricDLReasons)
	touch(m.deadLettersHeld, metricStoredDLReasons)
	touch(m.rejected, metricErrorCodes)
	touch(lim.authFailures, metricAuthReasons)
	touch(lim.forbidden, metricForbiddenOps)
	touch(lim.refreshes, metricRefreshOutcomes)
	touch(lim.limited, metricLimits)
	touch(m.pipelineWaits, metricPipelineBounds)
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "switchyard", Name: "build_info",
		Help: "Always 1; the version label is the gateway's version (as /healthz reports it)."}, []string{"version"})
	build.WithLabelValues(rt.opts.Version).Set(1)
	rt.opts.Registry.MustRegister(build)
	rt.opts.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "switchyard", Name: "engine_ready",
		Help: "1 when the log engine (NATS JetStream with --engine nats) answers the readiness check /readyz makes, 0 when it does not or the gateway is shutting down; checked at each scrape within 1s.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), readyProbeTimeout)
		defer cancel()
		if rt.Ready(ctx) != nil {
			return 0
		}
		return 1
	}))
	if ev, ok := rt.eng.(deadLetterEvictor); ok {
		rt.opts.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: "switchyard", Name: "dead_letters_evicted_total",
			Help: "Dead letters the engine dropped at a bound to make room for newer ones, oldest first: queue_full letters past the newest 10,000, a group's past --max-group-dead-letters, any past --max-dead-letters or --max-dead-letter-bytes (JetStream: those this node dropped).",
		}, func() float64 { return float64(ev.EvictedDeadLetters()) }))
	}
}

// deadLetterEvictor is an engine that counts the queue_full dead letters it
// dropped at its cap (both engines do; a wrapper may not).
type deadLetterEvictor interface {
	EvictedDeadLetters() int64
}

// BuildVersion returns the main module's version from the build
// information ("v1.2.3" for a tagged module build, a pseudo-version for
// `go install` of a commit), or "(devel)" for a build from a checkout.
// Binaries override it with -ldflags "-X main.version=...".
func BuildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

// refreshDeadLetters sets switchyard_dead_letters_stored from the engine's
// dead-letter list (itself bounded by the engine). A failed listing leaves
// the last figures.
func (rt *Router) refreshDeadLetters(ctx context.Context) {
	dls, err := rt.eng.DeadLetters(ctx, engine.DeadLetterFilter{})
	if err != nil {
		return
	}
	counts := make(map[string]int, len(metricStoredDLReasons))
	for _, r := range metricStoredDLReasons {
		counts[r] = 0
	}
	for _, d := range dls {
		counts[d.Reason]++
	}
	for r, n := range counts {
		rt.m.deadLettersHeld.WithLabelValues(r).Set(float64(n))
	}
}

// touch creates the series of a one-label vector for each of values, so
// they are exported at zero before the first event.
func touch[M any](vec interface{ WithLabelValues(...string) M }, values []string) {
	for _, v := range values {
		vec.WithLabelValues(v)
	}
}

// statsFigures are the totals of $sys.stats, read from the collectors that
// count them.
type statsFigures struct {
	publishes, deliveries, drops, gaps, deadLetters int64
	plainSubs, groupSubs                            int64
}

// statsFigures reads the $sys.stats totals from the Prometheus series:
// publishes are publishes_total{result="ok"} over the transports, and the
// deliveries, drops, gaps and dead letters the sums over all labels. It
// runs once per stats interval, off the delivery path.
func (m *metrics) statsFigures() statsFigures {
	return statsFigures{
		publishes:   seriesSum(m.publishes, "result", "ok"),
		deliveries:  seriesSum(m.deliveries, "", ""),
		drops:       seriesSum(m.drops, "", ""),
		gaps:        seriesSum(m.gaps, "", ""),
		deadLetters: seriesSum(m.deadLetters, "", ""),
		plainSubs:   seriesSum(m.subscriptions, "kind", "plain"),
		groupSubs:   seriesSum(m.subscriptions, "kind", "group"),
	}
}

// seriesSum adds up the counter or gauge series of c whose label has
// value (every series when label is "").
func seriesSum(c prometheus.Collector, label, value string) int64 {
	ch := make(chan prometheus.Metric, 16)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	var sum float64
	var pb dto.Metric
	for m := range ch {
		pb.Reset()
		if m.Write(&pb) != nil || !hasLabel(&pb, label, value) {
			continue
		}
		sum += pb.GetCounter().GetValue() + pb.GetGauge().GetValue()
	}
	return int64(sum)
}

// hasLabel reports whether pb has the label with value; any series does
// when label is "".
func hasLabel(pb *dto.Metric, label, value string) bool {
	if label == "" {
		return true
	}
	for _, lp := range pb.GetLabel() {
		if lp.GetName() == label {
			return lp.GetValue() == value
		}
	}
	return false
}
