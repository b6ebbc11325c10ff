package router

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// metrics are the gateway's Prometheus collectors. Labels are bounded: no
// per-session or per-topic labels (topic-level figures are in /v1/topics and
// $sys.topics).
type metrics struct {
	connections     prometheus.Gauge
	connectsTotal   prometheus.Counter
	subscriptions   *prometheus.GaugeVec   // kind: plain|group
	publishes       *prometheus.CounterVec // transport: ws|http, result: ok|duplicate|error code
	deliveries      *prometheus.CounterVec // kind: plain|group
	deliveriesPlain prometheus.Counter
	deliveriesGroup prometheus.Counter
	deliveriesLocal prometheus.Counter
	bytesIn         prometheus.Counter
	bytesOut        prometheus.Counter
	queueDepth      prometheus.Histogram
	drops           *prometheus.CounterVec // policy
	gaps            *prometheus.CounterVec // reason
	redeliveries    prometheus.Counter
	deadLetters     *prometheus.CounterVec // reason
	rejected        *prometheus.CounterVec // code
	backpressure    prometheus.Counter
	appendLatency   prometheus.Histogram
	deliveryLatency prometheus.Histogram
	slowDisconnects prometheus.Counter
	deadLettersLost prometheus.Counter
	groupLag        *prometheus.GaugeVec // group, topic, partition
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
		bytesIn: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "bytes_in_total",
			Help: "WebSocket payload bytes received from clients."}),
		bytesOut: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "bytes_out_total",
			Help: "WebSocket payload bytes written to clients."}),
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
	}
	m.deliveriesPlain = m.deliveries.WithLabelValues("plain")
	m.deliveriesGroup = m.deliveries.WithLabelValues("group")
	m.deliveriesLocal = m.deliveries.WithLabelValues("local")
	reg.MustRegister(m.connections, m.connectsTotal, m.subscriptions, m.publishes, m.deliveries,
		m.bytesIn, m.bytesOut, m.queueDepth, m.drops, m.gaps, m.redeliveries, m.deadLetters,
		m.rejected, m.backpressure, m.appendLatency, m.deliveryLatency, m.slowDisconnects, m.deadLettersLost, m.groupLag,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
