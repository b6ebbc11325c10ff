package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestPresenceMemberDropTold: a slow presence member that the gateway
// drops without a close frame says how in the run's problem: where the
// stream stopped and the reason the gateway counted. The gateway's write
// timeout is 1 s here, shorter than the member's stall, so the write
// blocked behind it is cut in the middle of a frame.
func TestPresenceMemberDropTold(t *testing.T) {
	if testing.Short() {
		t.Skip("runs presence churn for seconds")
	}
	gw, err := startTortureGateway(&tortureConfig{engine: "memory", keepalive: time.Second, writeTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := gw.stop(); err != nil {
			t.Error(err)
		}
	})
	h, err := newHostile(gw.nodes[0].wsURL)
	if err != nil {
		t.Fatal(err)
	}
	h.httpc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(h.httpc.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	loop := h.looper(ctx)
	loop(h.actor("presence_slow_members"), 1, h.presenceMember)
	loop(h.actor("presence_churners"), hostilePresenceChurners, h.presenceChurner)
	var problems []string
	for ctx.Err() == nil && len(problems) == 0 {
		pause(ctx, 100*time.Millisecond)
		problems = h.problems(false)
	}
	cancel()
	h.wait()
	if len(problems) == 0 {
		t.Fatal("the slow member was not dropped within 30 s")
	}
	p := problems[0]
	t.Log(p)
	for _, want := range []string{"slow presence member was closed: unexpected EOF, no close frame, in the middle of a frame", "write_timeout 1"} {
		if !strings.Contains(p, want) {
			t.Errorf("the problem does not say %q", want)
		}
	}
}
