package router_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/session"
)

func TestWelcome(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	if s, _ := c.welcome["session"].(string); s == "" {
		t.Errorf("welcome has no session: %v", c.welcome)
	}
	if c.welcome["epoch"] != g.eng.Epoch() {
		t.Errorf("welcome epoch %v, want %s", c.welcome["epoch"], g.eng.Epoch())
	}
	limits, _ := c.welcome["limits"].(map[string]any)
	// The default frame limit is the message limit plus the largest
	// publish envelope of the default bounds (58 KiB, docs/protocol.md).
	for k, want := range map[string]int64{"max_frame_bytes": 1<<20 + 58<<10, "max_message_bytes": 1 << 20, "max_subscriptions": 1000, "queue_messages": 1024} {
		if got := num(limits, k); got != want {
			t.Errorf("limits.%s = %d, want %d", k, got, want)
		}
	}
}

func TestRepliesEchoIDs(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	for _, id := range []any{7, "seven", 7.5} {
		t.Run(fmt.Sprint(id), func(t *testing.T) {
			c.send(t, map[string]any{"op": "subscribe", "id": id, "pattern": "echo.*"})
			m := c.nextOp(t, "subscribed")
			if m["id"] != fmt.Sprint(id) && fmt.Sprint(m["id"]) != fmt.Sprint(id) {
				t.Errorf("id %v echoed as %v", id, m["id"])
			}
			if m["pattern"] != "echo.*" {
				t.Errorf("pattern not echoed: %v", m)
			}
			if _, ok := m["recovered"]; ok {
				t.Errorf("recovered present without positions: %v", m)
			}
			c.send(t, map[string]any{"op": "unsubscribe", "id": id, "pattern": "echo.*"})
			if m := c.nextOp(t, "unsubscribed"); fmt.Sprint(m["id"]) != fmt.Sprint(id) {
				t.Errorf("unsubscribed id %v", m["id"])
			}
		})
	}
}

func TestPublishAndDeliver(t *testing.T) {
	g := newGateway(t)
	sub := g.dial(t)
	pub := g.dial(t)
	sub.subscribe(t, "orders.*.eu")
	r := pub.publish(t, "orders.created.eu", map[string]any{"n": 1}, "key", "k1", "headers", map[string]string{"region": "eu"})
	if r["topic"] != "orders.created.eu" || num(r, "offset") != 0 || num(r, "partition") != 0 {
		t.Fatalf("published = %v", r)
	}
	if _, ok := r["duplicate"]; ok {
		t.Errorf("duplicate present on a first publish: %v", r)
	}
	m := sub.nextOp(t, "message")
	want := map[string]any{"pattern": "orders.*.eu", "topic": "orders.created.eu", "key": "k1"}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("message.%s = %v, want %v", k, m[k], v)
		}
	}
	if d, _ := m["data"].(map[string]any); d["n"] != float64(1) {
		t.Errorf("data = %v", m["data"])
	}
	if h, _ := m["headers"].(map[string]any); h["region"] != "eu" {
		t.Errorf("headers = %v", m["headers"])
	}
	if ts, _ := m["time"].(string); !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(ts) {
		t.Errorf("time %q is not RFC3339 UTC with milliseconds", ts)
	}
	for _, k := range []string{"group", "attempt"} {
		if _, ok := m[k]; ok {
			t.Errorf("plain delivery carries %q: %v", k, m)
		}
	}
	// Keyless, headerless: no key or headers fields.
	pub.publish(t, "orders.created.eu", "plain")
	m = sub.nextOp(t, "message")
	if _, ok := m["key"]; ok {
		t.Errorf("key present without a key: %v", m)
	}
	if _, ok := m["headers"]; ok {
		t.Errorf("headers present without headers: %v", m)
	}
}

func TestWildcardDelivery(t *testing.T) {
	tests := []struct {
		pattern string
		topic   string
		match   bool
	}{
		{"orders.*.eu", "orders.created.eu", true},
		{"orders.*.eu", "orders.created.us", false},
		{"orders.*.eu", "orders.created.x.eu", false},
		{"orders.#", "orders.a", true},
		{"orders.#", "orders.a.b", true},
		{"orders.#", "orders", false},
		{"orders", "orders", true},
		{"*", "orders", true},
		{"*", "orders.a", false},
		{"#", "a.b.c", true},
		{"Orders.#", "orders.a", false},
		{"*.a.#", "x.a.y.z", true},
	}
	g := newGateway(t)
	pub := g.dial(t)
	for _, tt := range tests {
		t.Run(tt.pattern+" "+tt.topic, func(t *testing.T) {
			sub := g.dial(t)
			sub.subscribe(t, tt.pattern)
			pub.publish(t, tt.topic, 1)
			if tt.match {
				m := sub.nextOp(t, "message")
				if m["topic"] != tt.topic || m["pattern"] != tt.pattern {
					t.Fatalf("got %v", m)
				}
			}
			sub.noFrame(t)
		})
	}
}

func TestSystemTopics(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.StatsInterval = 1e7 })
	c := g.dial(t)
	m := c.call(t, map[string]any{"op": "publish", "topic": "$sys.stats", "data": 1})
	if m["op"] != "error" || m["code"] != "forbidden" {
		t.Fatalf("publish to $sys: %v", m)
	}
	c.subscribe(t, "$sys.stats")
	m = c.nextOp(t, "message")
	if m["topic"] != "$sys.stats" {
		t.Fatalf("got %v", m)
	}
	d, _ := m["data"].(map[string]any)
	for _, k := range []string{"connections", "rates", "totals", "subscriptions", "top_topics", "slow_consumers"} {
		if _, ok := d[k]; !ok {
			t.Errorf("$sys.stats lacks %q: %v", k, d)
		}
	}
	// "#" does not match $ topics.
	w := g.dial(t)
	w.subscribe(t, "#")
	w.noFrame(t)
}

func TestSeveralSubscriptionsOneTopic(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	c.subscribe(t, "a.b")
	c.subscribe(t, "a.*")
	c.subscribe(t, "#")
	c.publish(t, "a.b", 1)
	seen := map[string]bool{}
	for range 3 {
		m := c.nextOp(t, "message")
		seen[m["pattern"].(string)] = true
	}
	for _, p := range []string{"a.b", "a.*", "#"} {
		if !seen[p] {
			t.Errorf("no message for pattern %q", p)
		}
	}
	c.noFrame(t)
}

func TestPerKeyOrder(t *testing.T) {
	g := newGateway(t)
	if code, m, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "keyed", "partitions": 4}); code != 201 {
		t.Fatalf("create: %d %v", code, m)
	}
	sub := g.dial(t)
	sub.subscribe(t, "keyed")
	pub := g.dial(t)
	const keys, per = 8, 50
	for i := range per {
		for k := range keys {
			pub.send(t, map[string]any{"op": "publish", "topic": "keyed", "key": fmt.Sprintf("k%d", k), "data": i})
		}
	}
	partOf := map[string]float64{}
	last := map[string]float64{}
	for range keys * per {
		m := sub.nextOp(t, "message")
		k := m["key"].(string)
		if p, ok := partOf[k]; ok && p != m["partition"].(float64) {
			t.Fatalf("key %s moved from partition %v to %v", k, p, m["partition"])
		}
		partOf[k] = m["partition"].(float64)
		if v, ok := last[k]; ok && m["data"].(float64) != v+1 {
			t.Fatalf("key %s: %v after %v", k, m["data"], v)
		}
		last[k] = m["data"].(float64)
	}
}

func TestBadFrames(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.MaxSubscriptions = 2; c.router.MaxMessageBytes = 64 })
	c := g.dial(t)
	tests := []struct {
		name, frame, code string
		id                any
	}{
		{"not json", `hello`, "bad_request", nil},
		{"not an object", `[1,2]`, "bad_request", nil},
		{"unknown op", `{"op":"dance","id":1}`, "bad_request", float64(1)},
		{"missing op", `{"id":"x"}`, "bad_request", "x"},
		{"missing pattern", `{"op":"subscribe","id":2}`, "bad_request", float64(2)},
		{"wrong type", `{"op":"subscribe","id":3,"pattern":5}`, "bad_request", float64(3)},
		{"wrong type data ok but topic", `{"op":"publish","id":4,"topic":["a"],"data":1}`, "bad_request", float64(4)},
		{"missing data", `{"op":"publish","id":5,"topic":"a"}`, "bad_request", float64(5)},
		{"invalid topic", `{"op":"publish","id":6,"topic":"a..b","data":1}`, "invalid_topic", float64(6)},
		{"invalid pattern", `{"op":"subscribe","id":7,"pattern":"#.x"}`, "invalid_pattern", float64(7)},
		{"invalid pattern partial wildcard", `{"op":"subscribe","id":8,"pattern":"a*"}`, "invalid_pattern", float64(8)},
		{"reserved topic", `{"op":"publish","id":9,"topic":"$sys.x","data":1}`, "forbidden", float64(9)},
		{"too large", `{"op":"publish","id":10,"topic":"a","data":"` + strings.Repeat("x", 100) + `"}`, "message_too_large", float64(10)},
		{"bad on_full", `{"op":"subscribe","id":11,"pattern":"a","on_full":"explode"}`, "bad_request", float64(11)},
		{"bad from", `{"op":"subscribe","id":12,"pattern":"a","from":"yesterday"}`, "bad_request", float64(12)},
		{"bad priority", `{"op":"publish","id":13,"topic":"a","data":1,"priority":9}`, "bad_request", float64(13)},
		{"not subscribed", `{"op":"unsubscribe","id":14,"pattern":"nope"}`, "not_subscribed", float64(14)},
		{"ack without membership", `{"op":"ack","id":15,"group":"g","topic":"a","partition":0,"offset":0}`, "not_subscribed", float64(15)},
		{"ack missing offset", `{"op":"ack","id":16,"group":"g","topic":"a","partition":0}`, "bad_request", float64(16)},
		{"id of wrong type", `{"op":"subscribe","id":[1],"pattern":"a"}`, "bad_request", "[1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.sendRaw(t, websocket.MessageText, []byte(tt.frame))
			m := c.nextOp(t, "error")
			if m["code"] != tt.code {
				t.Errorf("code = %v, want %s (%v)", m["code"], tt.code, m["message"])
			}
			if gotID := m["id"]; fmt.Sprint(gotID) != fmt.Sprint(tt.id) && !(tt.id == "[1]" && fmt.Sprint(gotID) == "[1]") {
				t.Errorf("id = %v, want %v", m["id"], tt.id)
			}
			if msg, _ := m["message"].(string); msg == "" {
				t.Errorf("error without message: %v", m)
			}
		})
	}
	t.Run("too many subscriptions", func(t *testing.T) {
		c.subscribe(t, "s.1")
		c.subscribe(t, "s.2")
		m := c.call(t, map[string]any{"op": "subscribe", "pattern": "s.3"})
		if m["code"] != "too_many_subscriptions" {
			t.Fatalf("got %v", m)
		}
	})
	// The session survived all of it.
	c.publish(t, "still.alive", 1)
}

func TestPolicyCloses(t *testing.T) {
	tests := []struct {
		name string
		typ  websocket.MessageType
		data []byte
		want websocket.StatusCode
	}{
		{"binary frame", websocket.MessageBinary, []byte(`{"op":"publish"}`), websocket.StatusUnsupportedData},
		{"invalid utf-8", websocket.MessageText, []byte("{\"op\":\"publish\",\"topic\":\"a\",\"data\":\"\xff\xfe\"}"), websocket.StatusInvalidFramePayloadData},
		{"oversize frame", websocket.MessageText, []byte(`{"op":"publish","topic":"a","data":"` + strings.Repeat("x", 2048) + `"}`), websocket.StatusMessageTooBig},
	}
	g := newGateway(t, func(c *gwConfig) { c.router.Session = session.Options{ReadLimit: 1024} })
	bystander := g.dial(t)
	bystander.subscribe(t, "a")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := g.dial(t)
			c.sendRaw(t, tt.typ, tt.data)
			if got := c.closeStatus(t); got != tt.want {
				t.Fatalf("close status %v, want %v", got, tt.want)
			}
		})
	}
	// Other sessions are unharmed.
	pub := g.dial(t)
	pub.publish(t, "a", 1)
	bystander.nextOp(t, "message")
}

func TestStrictMode(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.engine = memengine.Options{Strict: true} })
	c := g.dial(t)
	m := c.call(t, map[string]any{"op": "publish", "topic": "nowhere", "data": 1})
	if m["code"] != "unknown_topic" {
		t.Fatalf("got %v", m)
	}
	code, body, _ := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "nowhere", "data": 1})
	if code != 404 || body["code"] != "unknown_topic" {
		t.Fatalf("HTTP: %d %v", code, body)
	}
}

func TestRateLimit(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.PublishRate = 0.001; c.router.PublishBurst = 2 })
	c := g.dial(t)
	c.publish(t, "r", 1)
	c.publish(t, "r", 2)
	if m := c.call(t, map[string]any{"op": "publish", "topic": "r", "data": 3}); m["code"] != "rate_limited" {
		t.Fatalf("third publish: %v", m)
	}
}

func TestIdempotentPublish(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	first := c.publish(t, "pay", 1, "msg_id", "m-1")
	second := c.publish(t, "pay", 1, "msg_id", "m-1")
	if second["duplicate"] != true || num(second, "offset") != num(first, "offset") {
		t.Fatalf("repeat = %v, first = %v", second, first)
	}
	other := c.publish(t, "pay", 1, "msg_id", "m-2")
	if num(other, "offset") != num(first, "offset")+1 {
		t.Fatalf("new msg_id = %v", other)
	}
	code, body, _ := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "pay", "data": 1, "msg_id": "m-1"})
	if code != 200 || body["duplicate"] != true || num(body, "offset") != num(first, "offset") {
		t.Fatalf("HTTP repeat: %d %v", code, body)
	}
}

var _ = router.Options{}
