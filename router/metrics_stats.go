package router

// Readings of the Prometheus collectors and of the sessions' own counters
// behind $sys.stats and switchyard_bytes_{in,out}_total, so that each event
// is counted once.

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

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
