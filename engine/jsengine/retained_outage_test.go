package jsengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestRetainedAfterOutage: the retained store is opened on first
// use, once (retainedStart's sync.Once): when that first use falls in an
// outage of NATS, its error is kept for the engine's life, and retained
// messages stay unavailable after NATS is back, while appends work again.
func TestRetainedAfterOutage(t *testing.T) {
	ns := natstest.NewServer(t)
	e := newNode(t, nodeOpts{url: ns.URL(), prefix: "r5retained"})
	ctx := context.Background()
	if _, err := e.Append(ctx, engine.Message{Topic: "o", Data: []byte(`0`)}); err != nil {
		t.Fatal(err)
	}
	ns.Stop()
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	err := e.SetRetained(octx, engine.RetainedMessage{Topic: "o", Data: []byte("during")}, engine.RetainLimits{})
	cancel()
	if err == nil {
		t.Fatal("SetRetained during the outage succeeded")
	}
	ns.Start()
	waitUntilFor(t, "an append after the outage", 20*time.Second, func() bool {
		_, err := e.Append(ctx, engine.Message{Topic: "o", Data: []byte(`1`), MsgID: "r5-after"})
		return err == nil
	})
	var last error
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = e.SetRetained(rctx, engine.RetainedMessage{Topic: "o", Data: []byte("after")}, engine.RetainLimits{})
		cancel()
		if last == nil {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("SetRetained 10 s after NATS came back and appends work again: %v", last)
}
