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
	sub, err := c.Subscribe(ctx, "burst", client.SubscribeOptions{MaxPending: 2}, func(m *client.Message) {
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
