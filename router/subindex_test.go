package router_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/switchyard/switchyard/router"
)

// TestSubscriptionIndexShrinks subscribes and unsubscribes thousands of
// distinct patterns on one session, as a dashboard switching views does,
// and ends subscriptions every other way a session loses one (a group
// leave, a group deleted, a subscribe failing after it was registered):
// the session's index holds only the live subscription afterwards, and
// the ended subscriptions are released.
func TestSubscriptionIndexShrinks(t *testing.T) {
	const views, batch = 3000, 100
	g := newGateway(t)
	c := g.dial(t)
	c.subscribe(t, "keep")

	// pipeline sends one op per pattern and waits for every reply.
	pipeline := func(op string, first int, want string) {
		t.Helper()
		for i := range batch {
			c.send(t, map[string]any{"op": op, "id": first + i, "pattern": fmt.Sprintf("dash.view%d", first+i)})
		}
		for range batch {
			if m := c.next(t); m["op"] != want {
				t.Fatalf("got %v, want %s", m, want)
			}
		}
	}
	var alive func() int // the first batch's subscriptions, and "keep"
	for first := 0; first < views; first += batch {
		pipeline("subscribe", first, "subscribed")
		if alive == nil {
			alive = router.TrackSubscriptions(g.rt)
		}
		pipeline("unsubscribe", first, "unsubscribed")
	}

	// A group member that leaves.
	c.subscribe(t, "orders.#", "group", "billing")
	c.mustOK(t, map[string]any{"op": "unsubscribe", "pattern": "orders.#", "group": "billing"}, "unsubscribed")
	// A group deleted under its member.
	c.subscribe(t, "audit.#", "group", "gone")
	if code, _, _ := g.httpDo(t, "DELETE", "/v1/groups/gone", nil); code != 204 {
		t.Fatalf("delete group: %d", code)
	}
	if m := c.nextOp(t, "unsubscribed"); m["reason"] != "group_deleted" {
		t.Fatalf("got %v", m)
	}
	// A subscribe refused by the engine after the session registered it.
	c.subscribe(t, "a.#", "group", "fixed")
	if m := c.call(t, map[string]any{"op": "subscribe", "pattern": "b.#", "group": "fixed"}); m["code"] != "group_conflict" {
		t.Fatalf("got %v, want group_conflict", m)
	}
	c.mustOK(t, map[string]any{"op": "unsubscribe", "pattern": "a.#", "group": "fixed"}, "unsubscribed")

	if subs, indexed := router.SessionIndexes(g.rt); subs != 1 || indexed != 1 {
		t.Fatalf("session holds %d subscriptions and indexes %d, want 1 and 1", subs, indexed)
	}
	waitUntil(t, "the ended subscriptions are collected", func() bool {
		runtime.GC()
		return alive() == 1 // "keep"
	})
}

// TestSubscriptionIndexShrinksOnRevoke: a subscription a refreshed token
// no longer allows leaves the session's index with it.
func TestSubscriptionIndexShrinksOnRevoke(t *testing.T) {
	g := newGateway(t, withAuth(t))
	tok, _ := lifeToken(t, "dana", time.Minute, []string{"a.#", "b.#"}, nil, nil)
	c := g.dialToken(t, tok)
	c.subscribe(t, "a.x")
	c.subscribe(t, "b.x")
	alive := router.TrackSubscriptions(g.rt)
	narrow, _ := lifeToken(t, "dana", time.Minute, []string{"b.#"}, nil, nil)
	if m := c.call(t, map[string]any{"op": "refresh", "token": narrow}); m["op"] != "refreshed" {
		t.Fatalf("refresh: %v", m)
	}
	if m := c.nextOp(t, "unsubscribed"); m["pattern"] != "a.x" || m["reason"] != "forbidden" {
		t.Fatalf("got %v, want a.x revoked", m)
	}
	if subs, indexed := router.SessionIndexes(g.rt); subs != 1 || indexed != 1 {
		t.Fatalf("session holds %d subscriptions and indexes %d, want 1 and 1", subs, indexed)
	}
	waitUntil(t, "the revoked subscription is collected", func() bool {
		runtime.GC()
		return alive() == 1
	})
}
