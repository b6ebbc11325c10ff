package router_test

import (
	"net/url"
	"strings"
	"testing"
)

// TestSSERetentionGapHasNoID: a retention gap met while a
// Server-Sent Event stream replays is an event without an id, and record
// ids number the records only ("1, 2, 3, … in the order written"), as
// docs/protocol.md says. Before, the gap took an id and an event number:
// it is a stream item (subscription.replayGap sets its Stream), so the
// queue's FramePrefix put a position line before it, which the transport
// turned into an id, moving the stream's position for the partition to
// the gap's first, trimmed, offset.
func TestSSERetentionGapHasNoID(t *testing.T) {
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
