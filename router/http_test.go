package router_test

import (
	"cmp"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

func TestHTTPTopics(t *testing.T) {
	g := newGateway(t)
	code, body, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{
		"name": "orders", "partitions": 3,
		"retention": map[string]any{"max_messages": 500, "max_age": "90s"},
		"on_full":   "block", "partitioner": "round_robin",
	})
	if code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	if body["name"] != "orders" || num(body, "partitions") != 3 || body["on_full"] != "block" || body["partitioner"] != "round_robin" {
		t.Fatalf("topic = %v", body)
	}
	ret := body["retention"].(map[string]any)
	if num(ret, "max_messages") != 500 || ret["max_age"] != "1m30s" {
		t.Fatalf("retention = %v", ret)
	}
	if offs := body["offsets"].([]any); len(offs) != 3 {
		t.Fatalf("offsets = %v", offs)
	}
	if code, body, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "orders"}); code != 409 || body["code"] != "topic_exists" {
		t.Fatalf("duplicate create: %d %v", code, body)
	}
	for _, bad := range []struct {
		body any
		code string
	}{
		{map[string]any{"name": "a..b"}, "invalid_topic"},
		{map[string]any{"name": "$sys.mine"}, "forbidden"},
		{map[string]any{"partitions": 1}, "bad_request"},
		{map[string]any{"name": "x", "partitions": -1}, "bad_request"},
		{map[string]any{"name": "x", "partitions": 100000}, "bad_request"},
		{map[string]any{"name": "x", "on_full": "explode"}, "bad_request"},
		{map[string]any{"name": "x", "partitioner": "random"}, "bad_request"},
		{map[string]any{"name": "x", "retention": map[string]any{"max_age": "soon"}}, "bad_request"},
		{map[string]any{"name": 5}, "bad_request"},
		{"{not json", "bad_request"},
		{"[]", "bad_request"},
	} {
		if code, body, _ := g.httpDo(t, "POST", "/v1/topics", bad.body); code != 400 && code != 403 || body["code"] != bad.code {
			t.Errorf("create %v: %d %v, want %s", bad.body, code, body, bad.code)
		}
	}
	for i := range 6 {
		if code, body, _ := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "orders", "data": map[string]any{"i": i}, "key": "k"}); code != 200 {
			t.Fatalf("publish: %d %v", code, body)
		}
	}
	code, body, _ = g.httpDo(t, "GET", "/v1/topics", nil)
	if code != 200 || len(body["topics"].([]any)) != 1 {
		t.Fatalf("list: %d %v", code, body)
	}
	code, body, _ = g.httpDo(t, "GET", "/v1/topics/orders", nil)
	var total int64
	for _, o := range body["offsets"].([]any) {
		total += num(o.(map[string]any), "next")
	}
	if code != 200 || total != 6 {
		t.Fatalf("inspect: %d %v", code, body)
	}
	// round_robin: partition 0 holds offsets 0 and 1.
	code, body, _ = g.httpDo(t, "GET", "/v1/topics/orders/messages?partition=0&from=0&limit=1", nil)
	if code != 200 || num(body, "next") != 1 {
		t.Fatalf("messages: %d %v", code, body)
	}
	msgs := body["messages"].([]any)
	m := msgs[0].(map[string]any)
	if len(msgs) != 1 || m["topic"] != "orders" || m["key"] != "k" || num(m, "offset") != 0 || m["time"] == nil {
		t.Fatalf("message = %v", msgs)
	}
	// Escaped names work (browsers escape '$').
	g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "esc:aped", "data": 1})
	if code, body, _ := g.httpDo(t, "GET", "/v1/topics/esc%3Aaped/messages", nil); code != 200 || len(body["messages"].([]any)) != 1 {
		t.Errorf("escaped topic name: %d %v", code, body)
	}
	for _, path := range []string{"/v1/topics/nope", "/v1/topics/nope/messages"} {
		if code, body, _ := g.httpDo(t, "GET", path, nil); code != 404 || body["code"] != "unknown_topic" {
			t.Errorf("GET %s: %d %v", path, code, body)
		}
	}
	if code, body, _ := g.httpDo(t, "GET", "/v1/topics/orders/messages?limit=zero", nil); code != 400 || body["code"] != "bad_request" {
		t.Errorf("bad limit: %d %v", code, body)
	}
	// Delete: a live subscriber is told.
	c := g.dial(t)
	c.subscribe(t, "orders")
	if code, _, _ := g.httpDo(t, "DELETE", "/v1/topics/orders", nil); code != 204 {
		t.Fatalf("delete: %d", code)
	}
	if m := c.nextOp(t, "topic_deleted"); m["topic"] != "orders" || m["pattern"] != "orders" {
		t.Fatalf("topic_deleted = %v", m)
	}
	if code, _, _ := g.httpDo(t, "GET", "/v1/topics/orders", nil); code != 404 {
		t.Fatalf("after delete: %d", code)
	}
	if code, _, _ := g.httpDo(t, "DELETE", "/v1/topics/orders", nil); code != 404 {
		t.Fatalf("second delete: %d", code)
	}
}

func TestHTTPPublishErrors(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.MaxBodyBytes = 1024 })
	for _, tt := range []struct {
		name   string
		body   any
		status int
		code   string
	}{
		{"no topic", map[string]any{"data": 1}, 400, "bad_request"},
		{"no data", map[string]any{"topic": "a"}, 400, "bad_request"},
		{"bad topic", map[string]any{"topic": "a b", "data": 1}, 400, "invalid_topic"},
		{"reserved", map[string]any{"topic": "$sys.x", "data": 1}, 403, "forbidden"},
		{"malformed", `{"topic":`, 400, "bad_request"},
		{"wrong type", `{"topic":1,"data":1}`, 400, "bad_request"},
		{"body too large", map[string]any{"topic": "a", "data": strings.Repeat("x", 4096)}, 413, "message_too_large"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, body, _ := g.httpDo(t, "POST", "/v1/publish", tt.body)
			if code != tt.status || body["code"] != tt.code {
				t.Fatalf("%d %v, want %d %s", code, body, tt.status, tt.code)
			}
			if msg, _ := body["message"].(string); msg == "" {
				t.Fatalf("no message: %v", body)
			}
		})
	}
	if code, body, _ := g.httpDo(t, "GET", "/v1/nothing", nil); code != 404 || body["code"] != "not_found" {
		t.Fatalf("unknown path: %d %v", code, body)
	}
}

func TestHTTPBackpressure(t *testing.T) {
	g := newGateway(t)
	if code, body, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "tight", "retention": map[string]any{"max_messages": 2},
		"on_full": "block", "block_timeout": "20ms"}); code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	// A group that never acks holds the topic back.
	c := g.dial(t)
	c.subscribe(t, "tight", "group", "stuck")
	for i := range 2 {
		if code, _, _ := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "tight", "data": i}); code != 200 {
			t.Fatalf("publish %d: %d", i, code)
		}
	}
	code, body, hdr := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "tight", "data": 3})
	if code != 503 || body["code"] != "backpressure" || hdr.Get("Retry-After") == "" {
		t.Fatalf("full topic: %d %v Retry-After=%q", code, body, hdr.Get("Retry-After"))
	}
	if m := c.call(t, map[string]any{"op": "publish", "topic": "tight", "data": 4}); m["code"] != "backpressure" {
		t.Fatalf("WebSocket publish: %v", m)
	}
}

func TestHTTPGroupsSeekAndPoll(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) {
		c.engine.Policy = engine.GroupPolicy{AckTimeout: time.Second} // long enough for a loaded machine to ack in time
	})
	for i := range 4 {
		g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "pull.a", "data": i})
	}
	poll := func() []any {
		t.Helper()
		code, body, _ := g.httpDo(t, "POST", "/v1/groups/pullers/poll", map[string]any{"pattern": "pull.*", "max": 10, "wait_ms": 10000})
		if code != 200 {
			t.Fatalf("poll: %d %v", code, body)
		}
		return body["records"].([]any)
	}
	offsets := func(recs []any) []int64 {
		var out []int64
		for _, r := range recs {
			out = append(out, num(r.(map[string]any), "offset"))
		}
		return out
	}
	recs := poll()
	if got := fmt.Sprint(offsets(recs)); got != "[0 1 2 3]" {
		t.Fatalf("poll got offsets %s, want [0 1 2 3] (a batch, in order): %v", got, recs)
	}
	r := recs[0].(map[string]any)
	if r["group"] != "pullers" || num(r, "attempt") != 1 || num(r, "offset") != 0 {
		t.Fatalf("record = %v", r)
	}
	for _, i := range []int{3, 1, 2, 0} { // any order
		code, body, _ := g.httpDo(t, "POST", "/v1/groups/pullers/ack", map[string]any{"topic": "pull.a", "partition": 0, "offset": i})
		if code != 200 {
			t.Fatalf("ack %d: %d %v", i, code, body)
		}
	}
	code, body, _ := g.httpDo(t, "POST", "/v1/groups/pullers/ack", map[string]any{"topic": "pull.a", "partition": 0, "offset": 3})
	if code != 409 || body["code"] != "not_in_flight" {
		t.Fatalf("double ack: %d %v", code, body)
	}
	code, body, _ = g.httpDo(t, "GET", "/v1/groups", nil)
	if code != 200 || len(body["groups"].([]any)) != 1 {
		t.Fatalf("groups: %d %v", code, body)
	}
	// Replay from offset 1.
	code, body, _ = g.httpDo(t, "POST", "/v1/groups/pullers/seek", map[string]any{"topic": "pull.a", "partition": 0, "offset": 1})
	if code != 200 {
		t.Fatalf("seek: %d %v", code, body)
	}
	recs = poll()
	if got := fmt.Sprint(offsets(recs)); got != "[1 2 3]" {
		t.Fatalf("after seek: %v", recs)
	}
	// Unacked leases expire and the records come back (each after its
	// own timeout and backoff, so not necessarily in one poll).
	var again []any
	for range 3 {
		if again = append(again, poll()...); len(again) >= 3 {
			break
		}
	}
	slices.SortFunc(again, func(a, b any) int {
		return cmp.Compare(num(a.(map[string]any), "offset"), num(b.(map[string]any), "offset"))
	})
	if got := fmt.Sprint(offsets(again)); got != "[1 2 3]" || num(again[0].(map[string]any), "attempt") != 2 {
		t.Fatalf("after lease expiry: %v", again)
	}
	if code, body, _ := g.httpDo(t, "POST", "/v1/groups/pullers/seek", map[string]any{"topic": "pull.a"}); code != 400 {
		t.Fatalf("seek without target: %d %v", code, body)
	}
	if code, body, _ := g.httpDo(t, "GET", "/v1/groups/none", nil); code != 404 || body["code"] != "unknown_group" {
		t.Fatalf("unknown group: %d %v", code, body)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	c.subscribe(t, "m")
	c.publish(t, "m", 1)
	c.nextOp(t, "message")
	for _, p := range []string{"/healthz", "/readyz"} {
		if code, _, _ := g.httpDo(t, "GET", p, nil); code != 200 {
			t.Errorf("%s: %d", p, code)
		}
	}
	resp, err := g.srv.Client().Get(g.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`switchyard_connections 1`,
		`switchyard_publishes_total{result="ok",transport="ws"} 1`,
		`switchyard_deliveries_total{kind="plain"} 1`,
		`switchyard_subscriptions{kind="plain"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(string(data), want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("metrics status %d", resp.StatusCode)
	}
}
