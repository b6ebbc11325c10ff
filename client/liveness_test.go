package client_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/client"
	"github.com/switchyard/switchyard/engine"
)

// TestSilentCutIsDetected cuts the connection without a close (no FIN, no
// RST: the proxy just stops forwarding). The client must notice by itself
// within its ping interval and pong timeout, reconnect and resume: what
// was published during the cut arrives, in order and once.
func TestSilentCutIsDetected(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	p := newLinkProxy(t, g.srv.Listener.Addr().String())
	states := make(chan client.State, 16)
	lostErr := make(chan error, 16)
	const pingInterval, pongTimeout = 100 * time.Millisecond, 500 * time.Millisecond
	c := dial(t, &testGateway{URL: "ws://" + p.Addr() + "/v1/ws"}, &client.Options{
		PingInterval: pingInterval,
		PongTimeout:  pongTimeout,
		Reconnect:    client.ReconnectPolicy{MinDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond},
		OnState: func(s client.State, err error) {
			if s == client.StateDisconnected {
				lostErr <- err
			}
			states <- s
		},
	})
	ctx := testCtx(t)
	var mu sync.Mutex
	var got []int64
	if _, err := c.Subscribe(ctx, "feed", client.SubscribeOptions{}, func(m *client.Message) {
		mu.Lock()
		got = append(got, m.Offset)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	for i := range 5 {
		if _, err := c.Publish(ctx, "feed", i); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "deliveries before the cut", func() bool { return count() == 5 })

	if n := p.Silence(); n != 1 {
		t.Fatalf("cut %d links, want 1", n)
	}
	cut := time.Now()
	for i := range 5 { // published during the cut, straight to the gateway
		if err := g.post("/v1/publish", map[string]any{"topic": "feed", "data": 5 + i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-lostErr:
		t.Logf("noticed %v after the cut: %v", time.Since(cut).Round(time.Millisecond), err)
	case <-time.After(wait):
		t.Fatalf("the silent cut went unnoticed for %v (ping interval %v, pong timeout %v)", wait, pingInterval, pongTimeout)
	}
	waitState(t, states, client.StateConnected)
	if _, err := c.Publish(ctx, "feed", 10); err != nil && !errors.Is(err, client.ErrConnectionLost) {
		t.Fatal(err)
	}
	eventually(t, "every record after the reconnect", func() bool { return count() >= 11 })
	mu.Lock()
	defer mu.Unlock()
	for i, off := range got {
		if off != int64(i) {
			t.Fatalf("deliveries %v: want offsets 0 to 10 in order and once", got)
		}
	}
}
