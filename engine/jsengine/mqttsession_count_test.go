package jsengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestMQTTSessionCountFollowsEveryNode: MQTTSessionCount says nothing
// before the store is opened on a node; then each node's count follows
// the sessions stored and removed through either node, holds left out.
func TestMQTTSessionCountFollowsEveryNode(t *testing.T) {
	url := natstest.URL(t)
	a, b := twoNodes(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, ok := a.MQTTSessionCount(); ok {
		t.Fatal("a count before the store was opened")
	}
	waitCount := func(want int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for _, n := range []interface {
			MQTTSessionCount() (int, bool)
			LoadMQTTSession(context.Context, string, time.Time) (engine.MQTTSession, bool, error)
		}{a, b} {
			// A call syncs the node's view with the store first.
			if _, _, err := n.LoadMQTTSession(ctx, "none", time.Now()); err != nil {
				t.Fatal(err)
			}
			for {
				got, ok := n.MQTTSessionCount()
				if ok && got == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("count %d (%v), want %d", got, ok, want)
				}
				time.Sleep(5 * time.Millisecond) // the watch applies changes on its own goroutine
			}
		}
	}
	lim := engine.MQTTSessionLimits{}
	for _, s := range []engine.MQTTSession{
		{ClientID: "count-1", Owner: "o1", Node: a.NodeID(), Claim: true, Expiry: time.Minute},
		{ClientID: "count-hold", Owner: "o2", Node: a.NodeID(), Claim: true}, // a hold
	} {
		if err := a.SaveMQTTSession(ctx, s, lim); err != nil {
			t.Fatal(err)
		}
	}
	waitCount(1)
	if err := b.SaveMQTTSession(ctx, engine.MQTTSession{ClientID: "count-2", Owner: "o3", Node: b.NodeID(), Claim: true, Expiry: time.Minute}, lim); err != nil {
		t.Fatal(err)
	}
	waitCount(2)
	if err := b.DeleteMQTTSession(ctx, "count-1", ""); err != nil {
		t.Fatal(err)
	}
	waitCount(1)
}
