package router

// Metrics of the resume state of open Server-Sent Event streams. Each open
// stream keeps its positions (at most SSEOptions.MaxPositions, about
// ssePosBytes and its topic each) and the changes of its last
// sseUndoEvents message events (16 bytes each): at most about 660 KiB a
// stream with the defaults and short topic names, bounded in number by the connection limits
// (--max-connections, --max-connections-per-ip). The gauges report what
// the open streams hold; an ended stream's state counts in
// switchyard_sse_resume_bytes instead, within SSEOptions.ResumeBytes.
//
// Concurrency: the gauges are read at scrape time, taking sseResume.mu
// and then each open state's mu, in the order sse_resume.go sets.

import "github.com/prometheus/client_golang/prometheus"

// openTally returns the open streams and the bytes of their resume state.
func (r *sseResume) openTally() (streams int, bytes int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, st := range r.states {
		st.mu.Lock()
		if st.endedAt.IsZero() {
			streams++
			bytes += st.bytes + int64(cap(st.undo))*16
		}
		st.mu.Unlock()
	}
	return streams, bytes
}

// registerSSEOpen registers the gauges of the open streams' resume state.
func registerSSEOpen(r *sseResume, reg prometheus.Registerer) {
	const ns = "switchyard"
	reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "sse_open_streams",
			Help: "Server-Sent Event streams open, each keeping resume state (at most --sse-max-positions positions and its last 16,384 events' changes)."},
			func() float64 { n, _ := r.openTally(); return float64(n) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "sse_open_resume_bytes",
			Help: "Bytes of resume state (positions and the changes of recent events) the open Server-Sent Event streams hold."},
			func() float64 { _, b := r.openTally(); return float64(b) }))
}
