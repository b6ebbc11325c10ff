package router

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

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
	rt.initDeltas(reg)
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "switchyard", Name: "bytes_in_total",
		Help: "WebSocket payload bytes received from clients."}, func() float64 {
		in, _ := rt.sessionBytes()
		return float64(in)
	}), prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "switchyard", Name: "bytes_out_total",
		Help: "WebSocket payload bytes written to clients."}, func() float64 {
		_, out := rt.sessionBytes()
		return float64(out)
	}))
	registerIdleMetrics(reg, rt)
	return newHookMetrics(reg)
}

// registerIdleMetrics registers the idle poller's figures: the sockets
// of this gateway's idle sessions parked in it now (the poller is the
// process's, shared by every gateway it embeds: parkedSessions counts
// this one's own), and the poller's fallbacks to a goroutine per idle
// session, which are the process's (session.IdlePollerStats).
func registerIdleMetrics(reg prometheus.Registerer, rt *Router) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "switchyard", Name: "sessions_parked",
		Help: "This gateway's idle sessions whose socket waits in the idle poller now, holding no goroutine (0 with --idle-park off or where epoll is missing)."}, func() float64 {
		return float64(rt.parkedSessions())
	}), prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "switchyard", Name: "idle_poller_fallbacks_total",
		Help: "Times the process's idle poller (shared by every gateway in the process) failed and resumed every parked session; idle sessions then wait on goroutines of their own (at most 1 per process)."}, func() float64 {
		_, fallbacks := session.IdlePollerStats()
		return float64(fallbacks)
	}))
}

// parkedSessions counts the gateway's sessions whose reader is parked in
// the idle poller now: native sessions' own, MQTT sessions' IdleSocket.
// It runs per scrape, as sessionBytes does.
func (rt *Router) parkedSessions() int {
	rt.mu.Lock()
	conns := make([]*conn, 0, len(rt.conns))
	for c := range rt.conns {
		conns = append(conns, c)
	}
	rt.mu.Unlock()
	n := 0
	for _, c := range conns {
		if c.sess != nil && c.sess.Parked() || c.mqtt != nil && c.mqtt.idle != nil && c.mqtt.idle.Parked() {
			n++
		}
	}
	return n
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
		connections:   newGauge("connections", "Open WebSocket sessions."),
		connectsTotal: newCounter("connects_total", "WebSocket sessions accepted."),
		subscriptions: newGaugeVec("subscriptions", "Active subscriptions by kind (plain or group).", "kind"),
		publishes:     newCounterVec("publishes_total", "Publish requests by transport and result (ok, duplicate, or the error code).", "transport", "result"),
		deliveries:    newCounterVec("deliveries_total", "Message frames queued to sessions, by subscription kind.", "kind"),
		queueDepth: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "outbound_queue_depth",
			Help:    "Outbound queue depth of each session, sampled every stats interval.",
			Buckets: []float64{0, 1, 8, 64, 256, 512, 1024, 4096}}),
		drops:        newCounterVec("drops_total", "Messages dropped by full outbound queues, by the subscription's on_full policy.", "policy"),
		gaps:         newCounterVec("gaps_total", "Gap frames sent, by reason.", "reason"),
		redeliveries: newCounter("redeliveries_total", "Consumer-group deliveries with attempt > 1."),
		deadLetters:  newCounterVec("dead_letters_total", "Dead letters recorded by this node, by reason (queue_full: drops of plain subscriptions; max_attempts letters are counted by the engine and listed at /v1/deadletters).", "reason"),
		rejected:     newCounterVec("rejected_frames_total", "Client requests answered with an error, by error code.", "code"),
		backpressure: newCounter("backpressure_total", "Publishes refused because a block-policy topic stayed full."),
		appendLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "append_seconds",
			Help:    "Time to append a publish to the log.",
			Buckets: prometheus.ExponentialBuckets(1e-6, 4, 12)}),
		deliveryLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Name: "publish_to_write_seconds",
			Help:    "Time from a record's append to the socket write that carried it, sampled.",
			Buckets: prometheus.ExponentialBuckets(1e-5, 4, 12)}),
		slowDisconnects:   newCounter("slow_consumer_disconnects_total", "Sessions closed with 1013 because their queue was full under the disconnect policy."),
		deadLettersLost:   newCounter("dead_letters_unrecorded_total", "queue_full dead letters that could not be recorded (buffer full or engine error)."),
		groupLag:          newGaugeVec("group_lag", "Records a consumer group has not yet committed, per topic partition (refreshed every stats interval).", "group", "topic", "partition"),
		deadLettersHeld:   newGaugeVec("dead_letters_stored", "Dead letters the engine holds (as listed at /v1/deadletters), by reason: max_attempts or queue_full (refreshed with group lag).", "reason"),
		publishesInFlight: newGauge("publishes_in_flight", "WebSocket publishes handed to the engine and not yet answered, over all sessions (each session holds at most --publish-pipeline)."),
		pipelineWaits:     newCounterVec("publish_pipeline_waits_total", "Times a session's reader stopped reading because its publishes in flight reached a bound: count (--publish-pipeline) or bytes (--publish-pipeline-bytes).", "bound"),
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

// Label values known in advance. initMetrics creates every series of them
// at zero, so a scrape of a fresh gateway shows each documented family and
// alerts can be written (and tested) before the first incident.
var (
	metricTransports      = []string{"ws", "http", "local", "mqtt"}
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
		codeTooManyConnections, codeTooManyTopics, codeUnsupportedMedia, codeUnknownSession,
	}
	metricAuthReasons     = []string{"missing", "invalid", "invalid_claims", "expired", "not_yet_valid"}
	metricForbiddenOps    = []string{"publish", "subscribe", "group", "admin", "refresh"}
	metricRefreshOutcomes = []string{"required", "ok", "refused"}
	metricPipelineBounds  = []string{"count", "bytes"}
	metricLimits          = []string{"connections", "connections_per_ip", "topics", "partitions", "http_publish_rate", "redrive_ids",
		limitPublishBatchRecords, limitPublishBatchBytes}
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
	build := newGaugeVec("build_info", "Always 1; the version label is the gateway's version (as /healthz reports it).", "version")
	build.WithLabelValues(rt.opts.Version).Set(1)
	rt.opts.Registry.MustRegister(build)
	rt.opts.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "switchyard", Name: "engine_ready",
		Help: "1 when the log engine (NATS JetStream with --engine nats) answers, checked at each scrape within 1s, and the last readiness probe of /readyz (a record appended and announced back by the live tail) in the last minute, if any, succeeded; 0 otherwise or while the gateway is shutting down.",
	}, func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), readyProbeTimeout)
		defer cancel()
		if rt.engineAnswers(ctx) != nil || rt.lastProbe() != nil {
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

// newCounter, newCounterVec, newGauge and newGaugeVec make a collector of
// the gateway's namespace (switchyard_<name>) with its help text and, for
// a vector, its label names.
func newCounter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "switchyard", Name: name, Help: help})
}

func newCounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "switchyard", Name: name, Help: help}, labels)
}

func newGauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "switchyard", Name: name, Help: help})
}

func newGaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "switchyard", Name: name, Help: help}, labels)
}
