package client_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/client"
	"github.com/switchyard/switchyard/engine"
)

// TestLocalGapReportedWhenHandlerDrains drops a burst past MaxPending and
// publishes nothing after it: the drops must be reported once the handler
// has worked through what was queued, not only when a later record
// arrives.
func TestLocalGapReportedWhenHandlerDrains(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	gaps := make(chan client.Gap, 64)
	c := dial(t, g, &client.Options{OnGap: func(gp client.Gap) { gaps <- gp }})
	ctx := testCtx(t)
	release := make(chan struct{})
	var mu sync.Mutex
	var handled []int64
	sub, err := c.Subscribe(ctx, "burst", client.SubscribeOptions{MaxPending: 2, MaxPendingWait: -1}, func(m *client.Message) {
		if m.Offset == 0 {
			<-release
		}
		mu.Lock()
		handled = append(handled, m.Offset)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	for i := range n {
		if _, err := c.Publish(ctx, "burst", i); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "every drop", func() bool { return client.DroppedThrough(sub, "burst", 0) == n })
	close(release)
	var reported []string
	dropped := int64(0)
	timeout := time.After(wait)
	for dropped < n-3 {
		select {
		case gp := <-gaps:
			reported = append(reported, fmt.Sprintf("%d-%d %s", gp.From, gp.To, gp.Reason))
			dropped += gp.To - gp.From
		case <-timeout:
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("%d of %d drops reported (gaps %v); handled %v", dropped, n-3, reported, handled)
		}
	}
	if want := []string{fmt.Sprintf("3-%d client_queue_full", n)}; !slices.Equal(reported, want) {
		t.Fatalf("gaps %v, want %v", reported, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(handled, []int64{0, 1, 2}) {
		t.Fatalf("handled %v, want [0 1 2]", handled)
	}
}

// TestReplayIntoSmallMaxPendingDropsNothing replays many records into a
// subscription whose MaxPending is small and whose handler is slower than
// the socket but keeps up overall: the client must hold the socket back
// rather than drop.
func TestReplayIntoSmallMaxPendingDropsNothing(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	const n = 600
	const pongTimeout = 500 * time.Millisecond
	var (
		mu      sync.Mutex
		gaps    []client.Gap
		handled []int64
		seen    int64 // handled or reported missing
		once    sync.Once
	)
	done := make(chan struct{})
	account := func(k int64) { // with mu held
		if seen += k; seen >= n {
			once.Do(func() { close(done) })
		}
	}
	var lost []error
	c := dial(t, g, &client.Options{
		OnGap: func(gp client.Gap) {
			mu.Lock()
			defer mu.Unlock()
			gaps = append(gaps, gp)
			account(gp.To - gp.From)
		},
		// Pongs wait behind records while the client holds back: that
		// must not count as a dead connection. The pong timeout is what a
		// loaded machine answers within when nothing holds a pong back;
		// the first record's handler holds the client back for several of
		// them (below).
		PingInterval: 10 * time.Millisecond,
		PongTimeout:  pongTimeout,
		OnState: func(s client.State, err error) {
			if s == client.StateDisconnected {
				mu.Lock()
				defer mu.Unlock()
				lost = append(lost, err)
			}
		},
	})
	ctx := testCtx(t)
	for i := range n {
		if err := g.post("/v1/publish", map[string]any{"topic": "history", "data": i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Subscribe(ctx, "history", client.SubscribeOptions{From: client.Earliest(), MaxPending: 4}, func(m *client.Message) {
		// The application's work: slower than reading a socket, well
		// under a second for the whole replay; the first record's takes
		// three pong timeouts, during which pongs wait behind the records
		// the client does not read.
		if m.Offset == 0 {
			time.Sleep(3 * pongTimeout)
		}
		time.Sleep(500 * time.Microsecond)
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, m.Offset)
		account(1)
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(4 * wait):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("handled %d of %d records; gaps %+v", len(handled), n, gaps)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(gaps) != 0 || len(lost) != 0 {
		t.Fatalf("gaps %+v, connection losses %v; want none", gaps, lost)
	}
	for i, off := range handled {
		if off != int64(i) {
			t.Fatalf("record %d has offset %d", i, off)
		}
	}
}

// TestHandlerThatPublishesDuringReplay: a handler that waits for its own
// publish's reply while its subscription is full must not wait for a
// reader that waits for it: the replay finishes long before MaxPendingWait.
func TestHandlerThatPublishesDuringReplay(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	const n = 200
	var (
		mu   sync.Mutex
		seen int64
		once sync.Once
	)
	done := make(chan struct{})
	account := func(k int64) {
		mu.Lock()
		defer mu.Unlock()
		if seen += k; seen >= n {
			once.Do(func() { close(done) })
		}
	}
	c := dial(t, g, &client.Options{OnGap: func(gp client.Gap) { account(gp.To - gp.From) }})
	ctx := testCtx(t)
	for i := range n {
		if err := g.post("/v1/publish", map[string]any{"topic": "in", "data": i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	opts := client.SubscribeOptions{From: client.Earliest(), MaxPending: 2, MaxPendingWait: time.Hour}
	if _, err := c.Subscribe(ctx, "in", opts, func(m *client.Message) {
		if _, err := c.Publish(ctx, "out", m.Offset); err != nil {
			t.Errorf("Publish: %v", err)
		}
		account(1)
	}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(wait):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("%d of %d records handled or reported; the reader waits for the handler", seen, n)
	}
}
