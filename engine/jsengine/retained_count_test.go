package jsengine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestRetainedCountOneNode: engine.Retainer allows a bound to be
// passed only "across nodes" by writers racing for the last room; on one
// node, SetRetained checks the bound against its view and then puts
// without holding anything, so writers of one engine racing for the last
// room all store: the count bound is passed on a single gateway.
func TestRetainedCountOneNode(t *testing.T) {
	url := natstest.URL(t)
	e := newNode(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url)})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lim := engine.RetainLimits{MaxCount: 1}
	// Open the store first, so the writers race on the put alone.
	if _, _, err := e.RetainedStats(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 16
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_ = e.SetRetained(ctx, engine.RetainedMessage{Topic: fmt.Sprintf("r5.t%d", i), Data: []byte("x")}, lim)
		}()
	}
	close(start)
	wg.Wait()
	count, _, err := e.RetainedStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if count > lim.MaxCount {
		t.Fatalf("%d retained messages stored by one engine with MaxCount %d", count, lim.MaxCount)
	}
}
