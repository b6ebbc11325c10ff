package router_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/switchyard/switchyard/router"
)

// TestSubsIndexCrossingOverWire: a session subscribes past the size at
// which it indexes its subscriptions by key, with one pattern plain and in
// two groups, then unsubscribes back below it and subscribes again: at
// every size a subscribe of a key it holds is refused, an unsubscribe of
// one it does not hold is refused, each subscription delivers a record
// once, and an ack finds the group's subscription.
func TestSubsIndexCrossingOverWire(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	pub := g.dial(t)
	type key struct{ pattern, group string }
	keys := []key{{"x.0", ""}, {"x.0", "g1"}, {"x.0", "g2"}}
	for i := 1; i <= 8; i++ {
		keys = append(keys, key{fmt.Sprintf("x.%d", i), ""})
	}
	subscribe := func(k key) map[string]any {
		req := map[string]any{"op": "subscribe", "pattern": k.pattern}
		if k.group != "" {
			req["group"] = k.group
		}
		return c.call(t, req)
	}
	unsubscribe := func(k key) map[string]any {
		req := map[string]any{"op": "unsubscribe", "pattern": k.pattern}
		if k.group != "" {
			req["group"] = k.group
		}
		return c.call(t, req)
	}
	held := map[key]bool{}
	check := func(when string) {
		t.Helper()
		for _, k := range keys {
			if !held[k] {
				continue
			}
			if m := subscribe(k); m["op"] != "error" || m["code"] != "bad_request" {
				t.Fatalf("%s: subscribe again to %v: %v, want already subscribed", when, k, m)
			}
		}
		// One record on x.0: once to each of its subscriptions held.
		var want []string
		for _, k := range keys[:3] {
			if held[k] {
				want = append(want, k.group)
			}
		}
		pub.publish(t, "x.0", when)
		var got []string
		for range want {
			m := c.nextOp(t, "message")
			grp, _ := m["group"].(string)
			got = append(got, grp)
			if m["data"] != when {
				t.Fatalf("%s: message %v", when, m)
			}
			if grp != "" {
				c.mustOK(t, map[string]any{"op": "ack", "group": grp, "topic": "x.0", "partition": m["partition"], "offset": m["offset"]}, "acked")
			}
		}
		c.noFrame(t)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: x.0 delivered to %q, want %q", when, got, want)
		}
	}
	for i, k := range keys {
		if m := subscribe(k); m["op"] != "subscribed" {
			t.Fatalf("subscribe %v: %v", k, m)
		}
		held[k] = true
		if i == 7 || i == 8 || i == 9 {
			check(fmt.Sprintf("with %d", i+1))
		}
	}
	check("all")
	// Down below the threshold, one of the groups first.
	for _, k := range []key{{"x.0", "g2"}, {"x.8", ""}, {"x.7", ""}, {"x.6", ""}, {"x.5", ""}} {
		if m := unsubscribe(k); m["op"] != "unsubscribed" {
			t.Fatalf("unsubscribe %v: %v", k, m)
		}
		held[k] = false
		if m := unsubscribe(k); m["op"] != "error" || m["code"] != "not_subscribed" {
			t.Fatalf("unsubscribe %v again: %v, want not_subscribed", k, m)
		}
	}
	check("six left")
	for _, k := range []key{{"x.0", "g2"}, {"x.5", ""}, {"x.6", ""}, {"x.7", ""}} {
		if m := subscribe(k); m["op"] != "subscribed" {
			t.Fatalf("subscribe %v anew: %v", k, m)
		}
		held[k] = true
		if k.group != "" {
			// The group kept its place: the record it missed comes now.
			m := c.nextOp(t, "message")
			if m["group"] != k.group || m["data"] != "six left" {
				t.Fatalf("after joining %v again: %v, want the record the group missed", k, m)
			}
			c.mustOK(t, map[string]any{"op": "ack", "group": k.group, "topic": "x.0", "partition": m["partition"], "offset": m["offset"]}, "acked")
		}
	}
	check("ten again")
}

// TestSubsIndexRevokeManyOverWire: a refresh that revokes most of a
// session's subscriptions, held in its key index, ends each once and
// keeps the rest findable by key; the session's index holds only those.
func TestSubsIndexRevokeManyOverWire(t *testing.T) {
	g := newGateway(t, withAuth(t))
	tok, _ := lifeToken(t, "dana", time.Minute, []string{"a.#", "b.#"}, nil, nil)
	c := g.dialToken(t, tok)
	for i := range 7 {
		c.subscribe(t, fmt.Sprintf("a.%d", i))
	}
	for i := range 4 {
		c.subscribe(t, fmt.Sprintf("b.%d", i))
	}
	narrow, _ := lifeToken(t, "dana", time.Minute, []string{"b.#"}, nil, nil)
	if m := c.call(t, map[string]any{"op": "refresh", "token": narrow}); m["op"] != "refreshed" {
		t.Fatalf("refresh: %v", m)
	}
	revoked := map[string]int{}
	for range 7 {
		m := c.nextOp(t, "unsubscribed")
		if m["reason"] != "forbidden" {
			t.Fatalf("got %v, want a revocation", m)
		}
		revoked[m["pattern"].(string)]++
	}
	c.noFrame(t)
	for i := range 7 {
		if p := fmt.Sprintf("a.%d", i); revoked[p] != 1 {
			t.Fatalf("%s revoked %d times, want once (%v)", p, revoked[p], revoked)
		}
	}
	if subs, indexed := router.SessionIndexes(g.rt); subs != 4 || indexed != 4 {
		t.Fatalf("session holds %d subscriptions and indexes %d, want 4 and 4", subs, indexed)
	}
	for i := range 4 {
		if m := c.call(t, map[string]any{"op": "subscribe", "pattern": fmt.Sprintf("b.%d", i)}); m["code"] != "bad_request" {
			t.Fatalf("subscribe b.%d again: %v, want already subscribed", i, m)
		}
		if m := c.call(t, map[string]any{"op": "unsubscribe", "pattern": fmt.Sprintf("a.%d", i)}); m["code"] != "not_subscribed" {
			t.Fatalf("unsubscribe revoked a.%d: %v, want not_subscribed", i, m)
		}
	}
	c.mustOK(t, map[string]any{"op": "unsubscribe", "pattern": "b.0"}, "unsubscribed")
}
