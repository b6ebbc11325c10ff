package jsengine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestRetainedAcrossNodes: a retained message stored through one node is
// what the other lists as soon as SetRetained returned (no wait), and the
// bounds count the messages of both nodes.
func TestRetainedAcrossNodes(t *testing.T) {
	url := natstest.URL(t)
	a, b := twoNodes(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url)})
	ctx := context.Background()
	// b opens its view before a writes, so what b sees next is a change
	// its watcher must have applied, not its first load.
	if n, _, err := b.RetainedStats(ctx); err != nil || n != 0 {
		t.Fatalf("RetainedStats on b = %d, %v; want 0", n, err)
	}
	for i, topic := range []string{"r.one", "r.two"} {
		if err := a.SetRetained(ctx, engine.RetainedMessage{Topic: topic, Data: []byte("v")}, engine.RetainLimits{}); err != nil {
			t.Fatal(err)
		}
		var got []string
		if err := b.Retained(ctx, "r.*", func(m engine.RetainedMessage) bool { got = append(got, m.Topic); return true }); err != nil {
			t.Fatal(err)
		}
		if len(got) != i+1 {
			t.Fatalf("b lists %q after a stored %s, want %d", got, topic, i+1)
		}
	}
	err := b.SetRetained(ctx, engine.RetainedMessage{Topic: "r.three", Data: []byte("v")}, engine.RetainLimits{MaxCount: 2})
	if !errors.Is(err, engine.ErrRetainedFull) {
		t.Fatalf("b past a bound a's messages fill: %v, want ErrRetainedFull", err)
	}
	if err := b.SetRetained(ctx, engine.RetainedMessage{Topic: "r.one"}, engine.RetainLimits{}); err != nil {
		t.Fatal(err)
	}
	if n, _, err := a.RetainedStats(ctx); err != nil || n != 1 {
		t.Fatalf("RetainedStats on a after b removed one = %d, %v; want 1", n, err)
	}
}
