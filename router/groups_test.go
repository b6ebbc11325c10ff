package router_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/session"
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
	// The push member's acks go over its WebSocket and land after the
	// reads above: the snapshot is taken once every record is committed.
	var grp map[string]any
	waitUntil(t, "every record committed", func() bool {
		_, grp, _ = g.httpDo(t, "GET", "/v1/groups/shared", nil)
		parts, _ := grp["partitions"].([]any)
		for _, p := range parts {
			if pm, _ := p.(map[string]any); pm["in_flight"] != float64(0) || pm["lag"] != float64(0) {
				return false
			}
		}
		return len(parts) > 0
	})
	before := fmt.Sprint(grp["partitions"])
	if code, body, _ := g.httpDo(t, "POST", "/v1/groups/shared/ack", map[string]any{"topic": "mix", "partition": 0, "offset": 0}); code != 409 || body["code"] != "not_in_flight" {
		t.Fatalf("late ack: %d %v", code, body)
	}
	_, grp, _ = g.httpDo(t, "GET", "/v1/groups/shared", nil)
	if after := fmt.Sprint(grp["partitions"]); after != before {
		t.Fatalf("a late ack moved the group: %s -> %s", before, after)
	}
}

// TestShutdownKeepsAttempts: a clean shutdown does not burn attempts. Two
// members on gateway A hold a record each (both reached the client, so
// each was one attempt) when A shuts down; with two attempts allowed,
// nothing is dead-lettered and a member on gateway B gets both records as
// their second attempt. Before the fix A closed its sessions first and
// then let members leave one by one, so the first member's record was
// "delivered" to the second member's closed queue (attempt 2) and
// dead-lettered when that one left, no client having seen it twice.
func TestShutdownKeepsAttempts(t *testing.T) {
	eng := memengine.New(memengine.Options{Policy: engine.GroupPolicy{MaxAttempts: 2, AckTimeout: time.Hour}})
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	a, b := newGatewayOn(t, eng), newGatewayOn(t, eng)
	if code, _, _ := a.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "jobs", "partitions": 2, "partitioner": "round_robin"}); code != 201 {
		t.Fatal("create failed")
	}
	c1, c2 := a.dial(t), a.dial(t)
	c1.subscribe(t, "jobs", "group", "workers")
	c2.subscribe(t, "jobs", "group", "workers")
	a.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "jobs", "data": 1})
	a.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "jobs", "data": 2})
	c1.nextOp(t, "message")
	c2.nextOp(t, "message")
	// A client can read a delivery before the writer has reported it
	// written; a shutdown in that moment hands it back as unsent, so that
	// its attempt is not counted (router/shutdown.go). Shut down once A
	// knows both went out.
	waitUntil(t, "A's writers to report the records written", func() bool {
		return router.UnsentGroupDeliveries(a.rt) == 0
	})

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := a.rt.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if dls, _ := eng.DeadLetters(ctx, engine.DeadLetterFilter{Group: "workers"}); len(dls) != 0 {
		t.Fatalf("a clean shutdown dead-lettered %d records: %+v", len(dls), dls)
	}
	c3 := b.dial(t)
	c3.subscribe(t, "jobs", "group", "workers")
	for range 2 {
		m := c3.nextOp(t, "message")
		if num(m, "attempt") != 2 {
			t.Fatalf("after a clean shutdown got %v, want attempt 2", m)
		}
		c3.mustOK(t, map[string]any{"op": "ack", "group": "workers", "topic": "jobs", "partition": m["partition"], "offset": m["offset"]}, "acked")
	}
}

// TestManyPartitionsJoinNotDisconnected: a member assigned more partitions
// with backlog than four times its queue bound is not closed with 1013
// while joining: the engine holds back what the member's window (the
// session's queue bound) cannot take and delivers it as the member acks.
// Before the fix the engine pushed one delivery per partition at once and
// the session overflowed on every join.
func TestManyPartitionsJoinNotDisconnected(t *testing.T) {
	const queue, partitions = 4, 64
	g := newGateway(t, func(c *gwConfig) { c.router.Session = session.Options{QueueMessages: queue} })
	if code, _, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "wide", "partitions": partitions, "partitioner": "round_robin"}); code != 201 {
		t.Fatal("create failed")
	}
	for i := range partitions {
		g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "wide", "data": i})
	}
	c := g.dial(t)
	c.subscribe(t, "wide", "group", "wide-readers")
	seen := map[int64]bool{}
	for len(seen) < partitions {
		m := c.next(t)
		if m["op"] != "message" {
			t.Fatalf("after %d records got %v, want messages", len(seen), m)
		}
		if seen[num(m, "partition")] {
			t.Fatalf("partition %d twice: %v", num(m, "partition"), m)
		}
		seen[num(m, "partition")] = true
		c.send(t, map[string]any{"op": "ack", "group": "wide-readers", "topic": "wide", "partition": m["partition"], "offset": m["offset"]})
	}
	c.noFrame(t)
}

// TestGroupMaxInFlightAndDelete: max_in_flight on a group subscribe is the
// group's window (a different value is group_conflict, on a plain
// subscribe bad_request); a poll returns a batch; DELETE /v1/groups/{group}
// ends the group and its members.
func TestGroupMaxInFlightAndDelete(t *testing.T) {
	g := newGateway(t)
	for i := range 5 {
		g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "batch", "data": i})
	}
	c := g.dial(t)
	c.subscribe(t, "batch", "group", "wide", "max_in_flight", 3)
	for want := range int64(3) {
		if m := c.nextOp(t, "message"); num(m, "offset") != want {
			t.Fatalf("got %v, want offset %d", m, want)
		}
	}
	c.noFrame(t) // the window is full
	d := g.dial(t)
	if m := d.call(t, map[string]any{"op": "subscribe", "pattern": "batch", "group": "wide", "max_in_flight": 2}); m["code"] != "group_conflict" {
		t.Fatalf("other max_in_flight: %v", m)
	}
	if m := d.call(t, map[string]any{"op": "subscribe", "pattern": "batch", "max_in_flight": 2}); m["code"] != "bad_request" {
		t.Fatalf("max_in_flight on a plain subscribe: %v", m)
	}
	if _, body, _ := g.httpDo(t, "GET", "/v1/groups/wide", nil); num(body, "max_in_flight") != 3 {
		t.Fatalf("group %v, want max_in_flight 3", body)
	}

	// A poll of a one-partition topic with 5 records returns all 5.
	_, body, _ := g.httpDo(t, "POST", "/v1/groups/pulled/poll", map[string]any{"pattern": "batch", "max": 10, "wait_ms": 5000})
	if recs := body["records"].([]any); len(recs) != 5 {
		t.Fatalf("poll returned %d records, want 5: %v", len(recs), recs)
	}

	if code, _, _ := g.httpDo(t, "DELETE", "/v1/groups/wide", nil); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if m := c.nextOp(t, "unsubscribed"); m["group"] != "wide" || m["reason"] != "group_deleted" {
		t.Fatalf("member told %v", m)
	}
	if code, body, _ := g.httpDo(t, "GET", "/v1/groups/wide", nil); code != 404 || body["code"] != "unknown_group" {
		t.Fatalf("after delete: %d %v", code, body)
	}
	if code, body, _ := g.httpDo(t, "DELETE", "/v1/groups/wide", nil); code != 404 || body["code"] != "unknown_group" {
		t.Fatalf("second delete: %d %v", code, body)
	}
}

// TestShutdownPullBufferIsUnsent: records a pull member had buffered but no
// poll had taken are handed back as never delivered (attempt not counted);
// the one a poll returned counts.
func TestShutdownPullBufferIsUnsent(t *testing.T) {
	eng := memengine.New(memengine.Options{Policy: engine.GroupPolicy{MaxAttempts: 2, AckTimeout: time.Hour}})
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	a, b := newGatewayOn(t, eng), newGatewayOn(t, eng)
	for i := range 2 {
		a.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "pulljobs", "data": i})
	}
	_, body, _ := a.httpDo(t, "POST", "/v1/groups/pw/poll", map[string]any{"pattern": "pulljobs", "max": 1, "wait_ms": 5000})
	if recs := body["records"].([]any); len(recs) != 1 {
		t.Fatalf("poll: %v", body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := a.rt.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if dls, _ := eng.DeadLetters(ctx, engine.DeadLetterFilter{Group: "pw"}); len(dls) != 0 {
		t.Fatalf("a clean shutdown dead-lettered %+v", dls)
	}
	var got []any
	for range 3 {
		_, body, _ := b.httpDo(t, "POST", "/v1/groups/pw/poll", map[string]any{"pattern": "pulljobs", "max": 10, "wait_ms": 5000})
		if got = append(got, body["records"].([]any)...); len(got) >= 2 {
			break
		}
	}
	attempts := map[int64]int64{}
	for _, r := range got {
		attempts[num(r.(map[string]any), "offset")] = num(r.(map[string]any), "attempt")
	}
	if attempts[0] != 2 || attempts[1] != 1 {
		t.Fatalf("attempts by offset %v, want 0: 2 (it was polled), 1: 1 (only buffered)", attempts)
	}
}

// TestHTTPAckDoesNotSettleWebSocketLease: an HTTP ack or nack settles
// records leased to pull members only; one for a record a WebSocket member
// holds is not_in_flight and leaves the lease to its member.
func TestHTTPAckDoesNotSettleWebSocketLease(t *testing.T) {
	g := newGateway(t)
	push := g.dial(t)
	push.subscribe(t, "wsonly", "group", "wsg")
	g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "wsonly", "data": 1})
	m := push.nextOp(t, "message")
	pos := map[string]any{"topic": "wsonly", "partition": m["partition"], "offset": m["offset"]}
	for _, op := range []string{"ack", "nack"} {
		if code, body, _ := g.httpDo(t, "POST", "/v1/groups/wsg/"+op, pos); code != 409 || body["code"] != "not_in_flight" {
			t.Fatalf("HTTP %s of a WebSocket member's lease: %d %v, want 409 not_in_flight", op, code, body)
		}
	}
	_, grp, _ := g.httpDo(t, "GET", "/v1/groups/wsg", nil)
	if p := grp["partitions"].([]any)[0].(map[string]any); p["in_flight"] != 1.0 || p["committed"] != 0.0 {
		t.Fatalf("after the HTTP settles: %v, want the WebSocket lease intact", p)
	}
	push.mustOK(t, map[string]any{"op": "ack", "id": 7, "group": "wsg", "topic": "wsonly", "partition": m["partition"], "offset": m["offset"]}, "acked")
}

// TestHTTPLateAckOfAttempt: two pollers of one group share the gateway's
// pull member. The first poller's lease times out and the record goes to
// the second poller as attempt 2; the first poller's late ack or nack,
// naming its attempt, is not_in_flight and leaves the second lease alone.
// Before, the body's attempt was ignored and the late ack settled it.
func TestHTTPLateAckOfAttempt(t *testing.T) {
	clock := enginetest.NewFakeClock(time.Unix(1_700_000_000, 0))
	eng := memengine.New(memengine.Options{Clock: clock, Policy: engine.GroupPolicy{
		AckTimeout: 10 * time.Second, BackoffMin: time.Second, BackoffMax: time.Second, MaxAttempts: 5,
	}})
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	g := newGatewayOn(t, eng)
	g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "leases", "data": 1})
	poll := func(who string) map[string]any {
		t.Helper()
		_, body, _ := g.httpDo(t, "POST", "/v1/groups/lg/poll", map[string]any{"pattern": "leases", "max": 1, "wait_ms": 5000})
		recs, _ := body["records"].([]any)
		if len(recs) != 1 {
			t.Fatalf("%s's poll: %v, want one record", who, body)
		}
		return recs[0].(map[string]any)
	}
	first := poll("first poller")
	if num(first, "attempt") != 1 {
		t.Fatalf("first poll %v, want attempt 1", first)
	}
	clock.Advance(10 * time.Second) // the lease times out
	clock.Advance(time.Second)      // the backoff passes
	second := poll("second poller")
	if num(second, "attempt") != 2 || num(second, "offset") != num(first, "offset") {
		t.Fatalf("second poll %v, want the same record as attempt 2", second)
	}
	settle := func(op string, rec map[string]any) (int, map[string]any) {
		code, body, _ := g.httpDo(t, "POST", "/v1/groups/lg/"+op, map[string]any{
			"topic": "leases", "partition": rec["partition"], "offset": rec["offset"], "attempt": rec["attempt"]})
		return code, body
	}
	for _, op := range []string{"ack", "nack"} {
		if code, body := settle(op, first); code != 409 || body["code"] != "not_in_flight" {
			t.Fatalf("late %s of attempt 1: %d %v, want 409 not_in_flight", op, code, body)
		}
	}
	_, grp, _ := g.httpDo(t, "GET", "/v1/groups/lg", nil)
	if p := grp["partitions"].([]any)[0].(map[string]any); p["in_flight"] != 1.0 || p["committed"] != 0.0 {
		t.Fatalf("after the late settles: %v, want attempt 2's lease intact", p)
	}
	if code, body := settle("ack", second); code != 200 {
		t.Fatalf("ack of attempt 2: %d %v", code, body)
	}
	if code, body, _ := g.httpDo(t, "POST", "/v1/groups/lg/ack", map[string]any{"topic": "leases", "partition": 0, "offset": 0, "attempt": 0}); code != 400 || body["code"] != "bad_request" {
		t.Fatalf("attempt 0: %d %v, want 400 bad_request", code, body)
	}
}
