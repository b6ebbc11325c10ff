package router

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestStatsFiguresFromCollectors: the $sys.stats totals are the sums of
// the Prometheus series that count the same events: ok publishes over
// every transport, deliveries, drops, gaps and dead letters over every
// label, and the plain and group subscriptions (not the local ones).
func TestStatsFiguresFromCollectors(t *testing.T) {
	m := newMetrics(prometheus.NewRegistry())
	m.publishes.WithLabelValues("ws", "ok").Add(2)
	m.publishes.WithLabelValues("http", "ok").Inc()
	m.publishes.WithLabelValues("local", "ok").Inc()
	m.publishes.WithLabelValues("ws", "duplicate").Inc()
	m.publishes.WithLabelValues("http", codeBackpressure).Inc()
	m.deliveriesPlain.Add(5)
	m.deliveriesGroup.Inc()
	m.deliveriesLocal.Inc()
	m.drops.WithLabelValues("drop_old").Inc()
	m.drops.WithLabelValues("disconnect").Add(2)
	m.gaps.WithLabelValues("queue_full").Inc()
	m.gaps.WithLabelValues("retention").Inc()
	m.deadLetters.WithLabelValues("queue_full").Add(3)
	m.subscriptions.WithLabelValues("plain").Add(2)
	m.subscriptions.WithLabelValues("group").Inc()
	m.subscriptions.WithLabelValues("local").Add(7)
	got := m.statsFigures()
	want := statsFigures{publishes: 4, deliveries: 7, drops: 3, gaps: 2, deadLetters: 3, plainSubs: 2, groupSubs: 1}
	if got != want {
		t.Fatalf("statsFigures = %+v, want %+v", got, want)
	}
	m.subscriptions.WithLabelValues("plain").Dec()
	if got := m.statsFigures().plainSubs; got != 1 {
		t.Fatalf("plain subscriptions after one ended = %d, want 1", got)
	}
}

// BenchmarkStatsFigures is the cost of reading the $sys.stats totals,
// paid once per stats interval.
func BenchmarkStatsFigures(b *testing.B) {
	m := newMetrics(prometheus.NewRegistry())
	b.ReportAllocs()
	for b.Loop() {
		m.statsFigures()
	}
}
