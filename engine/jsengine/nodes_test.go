package jsengine_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestNodesAsk: two nodes on one prefix answer a broadcast each, once,
// naming themselves; AskNode reaches the node named; a node that stopped
// serving or an unknown node is engine.ErrUnknownNode; an answer over the
// bound is refused.
func TestNodesAsk(t *testing.T) {
	url := natstest.URL(t)
	a, b := twoNodes(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url)})
	if a.NodeID() == "" || a.NodeID() == b.NodeID() {
		t.Fatalf("node ids %q %q", a.NodeID(), b.NodeID())
	}
	echo := func(name string) engine.NodeHandler {
		return func(req []byte) []byte {
			if string(req) == "big" {
				return make([]byte, engine.MaxNodeMessageBytes+1)
			}
			return append([]byte(name+":"), req...)
		}
	}
	stopA, err := a.ServeNodes(echo("a"))
	if err != nil {
		t.Fatal(err)
	}
	defer stopA()
	stopB, err := b.ServeNodes(echo("b"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	var got []string
	for i := 0; len(got) != 2; i++ { // until a has seen b's live key
		if i > 200 {
			t.Fatalf("answers %v, want two", got)
		}
		actx, acancel := context.WithTimeout(ctx, time.Second)
		answers, asked, err := a.AskNodes(actx, []byte("hi"))
		acancel()
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		for _, an := range answers {
			got = append(got, an.Node+"="+string(an.Data))
		}
		if len(answers) > asked {
			t.Fatalf("%d answers from %d nodes asked", len(answers), asked)
		}
	}
	slices.Sort(got)
	want := []string{a.NodeID() + "=a:hi", b.NodeID() + "=b:hi"}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("answers %v, want %v", got, want)
	}

	if ans, err := a.AskNode(ctx, b.NodeID(), []byte("x")); err != nil || !bytes.Equal(ans, []byte("b:x")) {
		t.Fatalf("AskNode(b): %q %v", ans, err)
	}
	if _, err := a.AskNode(ctx, b.NodeID(), []byte("big")); !errors.Is(err, engine.ErrNodeMessageTooLarge) {
		t.Fatalf("AskNode of a large answer: %v", err)
	}
	if _, err := a.AskNode(ctx, "nosuchnode", []byte("x")); !errors.Is(err, engine.ErrUnknownNode) {
		t.Fatalf("AskNode(unknown): %v", err)
	}
	if _, err := a.AskNode(ctx, b.NodeID(), make([]byte, engine.MaxNodeMessageBytes+1)); !errors.Is(err, engine.ErrNodeMessageTooLarge) {
		t.Fatalf("AskNode of a large request: %v", err)
	}
	stopB()
	if _, err := a.AskNode(ctx, b.NodeID(), []byte("x")); !errors.Is(err, engine.ErrUnknownNode) {
		t.Fatalf("AskNode(b) after b stopped serving: %v", err)
	}
	// b still counts as live, so the broadcast waits for it until ctx
	// ends, and returns a's answer.
	actx, acancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer acancel()
	answers, asked, err := a.AskNodes(actx, []byte("hi"))
	if err != nil || asked != 2 || len(answers) != 1 || answers[0].Node != a.NodeID() {
		t.Fatalf("AskNodes with b silent: %v %d %v", answers, asked, err)
	}
}
