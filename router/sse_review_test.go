package router_test

import (
	"net/url"
	"strings"
	"testing"
)

// TestReviewSSERetentionGapHasNoID shows that a retention gap met while a
// Server-Sent Event stream replays is written with an event id and takes
// an event number, although docs/protocol.md says every frame other than a
// record is an event "with the frame as data and no id", and that record
// ids number the records "1, 2, 3, … in the order written": the gap is a
// stream item (subscription.replayGap sets its Stream), so the queue's
// FramePrefix puts a position line before it and the transport turns that
// into an id, advancing the stream's position for the partition to the
// gap's first, trimmed, offset.
func TestReviewSSERetentionGapHasNoID(t *testing.T) {
	g := newGateway(t)
	if code, _, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "short", "retention": map[string]any{"max_messages": 3}}); code != 201 {
		t.Fatal("create failed")
	}
	pub := g.dial(t)
	for i := range 10 {
		pub.publish(t, "short", i)
	}
	from := `{"epoch":"` + g.eng.Epoch() + `","positions":[{"topic":"short","partition":0,"offset":2}]}`
	s, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=short&from="+url.QueryEscape(from), nil)
	s.nextEvent(t, "welcome")
	s.nextEvent(t, "subscribed")
	gap := s.nextEvent(t, "gap")
	if gap.frame["reason"] != "retention" {
		t.Fatalf("gap: %s", gap.data)
	}
	m := s.nextEvent(t, "message")
	if gap.id != "" || !strings.HasSuffix(m.id, ".1") {
		t.Fatalf("the retention gap has id %q and the first record id %q; want no id for the gap and <stream>.1 for the record", gap.id, m.id)
	}
}
