package router_test

import (
	"fmt"
	"testing"
	"time"
)

// TestGroupFilter: a group fixed to a header filter never delivers what the
// filter rejects; those records are committed without delivery.
func TestGroupFilter(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	c.subscribe(t, "regional", "group", "eu-only", "filter", map[string]any{"headers": map[string]string{"region": "eu"}})
	pub := g.dial(t)
	for i, region := range []string{"us", "eu", "us", "eu"} {
		pub.publish(t, "regional", i, "headers", map[string]string{"region": region})
	}
	for _, want := range []float64{1, 3} {
		m := c.nextOp(t, "message")
		if m["data"] != want {
			t.Fatalf("got %v, want data %v", m, want)
		}
		c.mustOK(t, map[string]any{"op": "ack", "group": "eu-only", "topic": "regional", "partition": 0, "offset": m["offset"]}, "acked")
	}
	c.noFrame(t)
	_, grp, _ := g.httpDo(t, "GET", "/v1/groups/eu-only", nil)
	if p := grp["partitions"].([]any)[0].(map[string]any); num(p, "committed") != 4 {
		t.Fatalf("committed %v, want 4: filtered records count as done", p)
	}
	// Joining with another filter is a conflict.
	d := g.dial(t)
	if m := d.call(t, map[string]any{"op": "subscribe", "pattern": "regional", "group": "eu-only",
		"filter": map[string]any{"headers": map[string]string{"region": "us"}}}); m["code"] != "group_conflict" {
		t.Fatalf("other filter: %v", m)
	}
}

// TestPushAndPullShareAGroup: a WebSocket member and an HTTP pull member
// split a two-partition topic; every record is handled once; a late ack of
// a committed record is refused and moves nothing backwards.
func TestPushAndPullShareAGroup(t *testing.T) {
	g := newGateway(t)
	if code, _, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "mix", "partitions": 2, "partitioner": "round_robin"}); code != 201 {
		t.Fatal("create failed")
	}
	push := g.dial(t)
	push.subscribe(t, "mix", "group", "shared")
	// The first poll joins the pull member; the partitions rebalance.
	if code, body, _ := g.httpDo(t, "POST", "/v1/groups/shared/poll", map[string]any{"pattern": "mix", "max": 10}); code != 200 {
		t.Fatalf("poll: %d %v", code, body)
	}
	const n = 20
	for i := range n {
		g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "mix", "data": i})
	}
	seen := map[float64]string{}
	deadline := time.Now().Add(waitTimeout)
	for len(seen) < n && time.Now().Before(deadline) {
		select {
		case m := <-push.frames:
			if m["op"] == "message" {
				if who, dup := seen[m["data"].(float64)]; dup {
					t.Fatalf("record %v twice (first by %s)", m["data"], who)
				}
				seen[m["data"].(float64)] = "push"
				push.send(t, map[string]any{"op": "ack", "group": "shared", "topic": "mix", "partition": m["partition"], "offset": m["offset"]})
			}
		default:
		}
		_, body, _ := g.httpDo(t, "POST", "/v1/groups/shared/poll", map[string]any{"pattern": "mix", "max": 10, "wait_ms": 10})
		for _, r := range body["records"].([]any) {
			rec := r.(map[string]any)
			if who, dup := seen[rec["data"].(float64)]; dup {
				t.Fatalf("record %v twice (first by %s)", rec["data"], who)
			}
			seen[rec["data"].(float64)] = "pull"
			if code, b, _ := g.httpDo(t, "POST", "/v1/groups/shared/ack", map[string]any{"topic": "mix", "partition": rec["partition"], "offset": rec["offset"]}); code != 200 {
				t.Fatalf("pull ack: %d %v", code, b)
			}
		}
	}
	byWho := map[string]int{}
	for _, w := range seen {
		byWho[w]++
	}
	if len(seen) != n || byWho["push"] == 0 || byWho["pull"] == 0 {
		t.Fatalf("handled %d of %d records, split %v", len(seen), n, byWho)
	}
	_, grp, _ := g.httpDo(t, "GET", "/v1/groups/shared", nil)
	before := fmt.Sprint(grp["partitions"])
	if code, body, _ := g.httpDo(t, "POST", "/v1/groups/shared/ack", map[string]any{"topic": "mix", "partition": 0, "offset": 0}); code != 409 || body["code"] != "not_in_flight" {
		t.Fatalf("late ack: %d %v", code, body)
	}
	_, grp, _ = g.httpDo(t, "GET", "/v1/groups/shared", nil)
	if after := fmt.Sprint(grp["partitions"]); after != before {
		t.Fatalf("a late ack moved the group: %s -> %s", before, after)
	}
}
