package memengine_test

import (
	"context"
	"errors"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
)

// TestNodesOneNode: the in-memory engine is one node, "": a request
// reaches its handler only, and none once the handler is stopped.
func TestNodesOneNode(t *testing.T) {
	e := memengine.New(memengine.Options{})
	defer e.Close(context.Background())
	ctx := context.Background()
	if e.NodeID() != "" {
		t.Fatalf("NodeID %q", e.NodeID())
	}
	stop, err := e.ServeNodes(func(req []byte) []byte { return append([]byte("re:"), req...) })
	if err != nil {
		t.Fatal(err)
	}
	answers, asked, err := e.AskNodes(ctx, []byte("x"))
	if err != nil || asked != 1 || len(answers) != 1 || string(answers[0].Data) != "re:x" {
		t.Fatalf("AskNodes: %v %d %v", answers, asked, err)
	}
	if ans, err := e.AskNode(ctx, "", []byte("y")); err != nil || string(ans) != "re:y" {
		t.Fatalf("AskNode: %q %v", ans, err)
	}
	if _, err := e.AskNode(ctx, "other", []byte("y")); !errors.Is(err, engine.ErrUnknownNode) {
		t.Fatalf("AskNode(other): %v", err)
	}
	if _, _, err := e.AskNodes(ctx, make([]byte, engine.MaxNodeMessageBytes+1)); !errors.Is(err, engine.ErrNodeMessageTooLarge) {
		t.Fatalf("a large request: %v", err)
	}
	stop()
	if answers, _, err := e.AskNodes(ctx, []byte("x")); err != nil || len(answers) != 0 {
		t.Fatalf("after stop: %v %v", answers, err)
	}
}
