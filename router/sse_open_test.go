package router_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

// TestSSEOpenResumeStateIsMeasured: the resume state of open SSE streams
// (their positions and the changes of their last events) is reported by
// two gauges, streams and bytes, that grow with the streams and their
// partitions, and that let go of a stream once it ends (its state then
// counts in switchyard_sse_resume_bytes, within --sse-resume-bytes).
func TestSSEOpenResumeStateIsMeasured(t *testing.T) {
	g := newGateway(t)
	const topics = 20
	for i := range topics {
		if _, err := g.rt.Publish(context.Background(), engine.Message{Topic: fmt.Sprintf("open.%d", i), Data: []byte(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	var streams []*sseStream
	for range 2 {
		s, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=open.*&from=earliest", nil)
		s.nextEvent(t, "welcome")
		s.nextEvent(t, "subscribed")
		for range topics {
			s.nextEvent(t, "message")
		}
		streams = append(streams, s)
	}
	if got := metricValue(t, g.reg, "switchyard_sse_open_streams", nil); got != 2 {
		t.Errorf("switchyard_sse_open_streams = %v, want 2", got)
	}
	open := metricValue(t, g.reg, "switchyard_sse_open_resume_bytes", nil)
	if min := float64(2 * topics * len("open.0")); open < min {
		t.Errorf("switchyard_sse_open_resume_bytes = %v for 2 streams of %d positions each, want at least %v", open, topics, min)
	}
	t.Logf("2 open streams of %d positions hold %v bytes of resume state", topics, open)
	for _, s := range streams {
		s.close()
	}
	waitUntil(t, "the streams to end", func() bool {
		return metricValue(t, g.reg, "switchyard_sse_open_streams", nil) == 0
	})
	if got := metricValue(t, g.reg, "switchyard_sse_open_resume_bytes", nil); got != 0 {
		t.Errorf("switchyard_sse_open_resume_bytes = %v with no stream open, want 0", got)
	}
}
