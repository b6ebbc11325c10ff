package jsengine_test

import (
	"context"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestRetainedUndoAcrossNodes: an undo through one node of a write made
// through the other puts the previous message back on both; an undo of a
// write the other node has replaced since changes nothing, on either.
func TestRetainedUndoAcrossNodes(t *testing.T) {
	url := natstest.URL(t)
	a, b := twoNodes(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url)})
	ctx := context.Background()
	set := func(e engine.Retainer, data string) engine.RetainedWrite {
		t.Helper()
		w, err := e.SetRetained(ctx, engine.RetainedMessage{Topic: "u.t", Data: []byte(data)}, engine.RetainLimits{})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	data := func(e engine.Retainer) string {
		t.Helper()
		var got string
		if err := e.Retained(ctx, "u.t", func(m engine.RetainedMessage) bool { got = string(m.Data); return true }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	set(a, "before")
	w := set(b, "failed")
	if !w.Had || string(w.Prev.Data) != "before" {
		t.Fatalf("b's write replaced %q (had %v), want a's \"before\"", w.Prev.Data, w.Had)
	}
	if ok, err := a.UndoRetained(ctx, w); err != nil || !ok {
		t.Fatalf("a's undo of b's write = %v, %v; want true", ok, err)
	}
	if ga, gb := data(a), data(b); ga != "before" || gb != "before" {
		t.Fatalf("after the undo a lists %q, b %q; want \"before\" on both", ga, gb)
	}

	w = set(a, "mine")
	set(b, "theirs")
	if ok, err := a.UndoRetained(ctx, w); err != nil || ok {
		t.Fatalf("a's undo of a write b replaced = %v, %v; want false", ok, err)
	}
	if ga, gb := data(a), data(b); ga != "theirs" || gb != "theirs" {
		t.Fatalf("after the undo a lists %q, b %q; want b's \"theirs\" on both", ga, gb)
	}
}
