package router_test

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

// TestSSEResumeAtLargestOffsetIsNoGap resumes at offset 2^63-1: the
// stream starts at the partition's end, with no gap and nothing replayed.
func TestSSEResumeAtLargestOffsetIsNoGap(t *testing.T) {
	g := newGateway(t)
	ctx := context.Background()
	for range 3 {
		if _, err := g.rt.Publish(ctx, engine.Message{Topic: "o", Data: []byte(`"x"`)}); err != nil {
			t.Fatal(err)
		}
	}
	from := fmt.Sprintf(`{"epoch":%q,"positions":[{"topic":"o","partition":0,"offset":%d}]}`, g.eng.Epoch(), int64(math.MaxInt64))
	s, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=o&from="+url.QueryEscape(from), nil)
	s.nextEvent(t, "welcome")
	s.nextEvent(t, "subscribed")
	if _, err := g.rt.Publish(ctx, engine.Message{Topic: "o", Data: []byte(`"y"`)}); err != nil {
		t.Fatal(err)
	}
	if ev := s.next(t); ev.event != "message" || num(ev.frame, "offset") != 3 {
		t.Fatalf("got %s %s, want the new record at offset 3", ev.event, ev.data)
	}
}
