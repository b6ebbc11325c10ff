package memengine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
)

// TestMemberByteWindow: a member's MaxLeasedBytes holds back records once
// it holds that many bytes leased (one record may take it past), and an
// ack lets the next through.
func TestMemberByteWindow(t *testing.T) {
	e := newEngine(t, enginetest.Config{})
	ctx := context.Background()
	data := []byte(`"` + strings.Repeat("x", 98) + `"`) // 100 bytes
	for range 10 {
		if _, err := e.Append(ctx, engine.Message{Topic: "bytes", Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	c := &counter{}
	if _, err := e.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "bytes", MaxInFlight: 10, MaxLeasedBytes: 250}, c); err != nil {
		t.Fatal(err)
	}
	if c.n.Load() != 3 { // 0, 100, 200 bytes held: room each time
		t.Fatalf("%d delivered under a 250-byte window of 100-byte records, want 3", c.n.Load())
	}
	if err := e.Ack(ctx, "g", "", engine.Position{Topic: "bytes", Offset: 0}); err != nil {
		t.Fatal(err)
	}
	if c.n.Load() != 4 {
		t.Fatalf("%d delivered after one ack, want 4", c.n.Load())
	}
	if _, err := e.Join(ctx, engine.JoinRequest{Group: "h", Pattern: "bytes", MaxLeasedBytes: -1}, c); err == nil {
		t.Fatal("a negative byte window was accepted")
	}
}
