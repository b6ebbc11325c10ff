package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/session"
)

// maxErrorFrame is what the tests allow one error frame to take: the
// gateway echoes at most 128 bytes of an offending value and 128 of an id.
const maxErrorFrame = 1024

// TestErrorRepliesEchoBounded: whatever a bad request holds, its error
// frame stays small; ids too long to echo are refused without the echo.
func TestErrorRepliesEchoBounded(t *testing.T) {
	big := strings.Repeat("a", 64<<10)
	ctlChars := strings.Repeat("\x01", 16<<10) // each byte escapes to several
	quoted := func(s string) string { b, _ := json.Marshal(s); return string(b) }
	g := newGateway(t)
	c := g.dial(t)
	tests := []struct {
		name   string
		frame  string
		code   string
		wantID bool
	}{
		{"long topic", `{"op":"publish","id":1,"topic":"` + big + `","data":1}`, "invalid_topic", true},
		{"topic of control characters", `{"op":"publish","id":1,"topic":` + quoted(ctlChars) + `,"data":1}`, "invalid_topic", true},
		{"long pattern", `{"op":"subscribe","id":1,"pattern":"` + big + `"}`, "invalid_pattern", true},
		{"long unsubscribe pattern", `{"op":"unsubscribe","id":1,"pattern":"` + big + `"}`, "not_subscribed", true},
		{"long op", `{"op":"` + big + `","id":1}`, "bad_request", true},
		{"long from position topic", `{"op":"subscribe","id":1,"pattern":"a","from":{"epoch":"x","positions":[{"topic":"` + big + `","partition":0,"offset":0}]}}`, "invalid_topic", true},
		{"long string id", `{"op":"nope","id":"` + big + `"}`, "bad_request", false},
		{"object id", `{"op":"nope","id":{"x":"` + big + `"}}`, "bad_request", false},
		{"long number id", `{"op":"nope","id":1` + strings.Repeat("0", 4096) + `}`, "bad_request", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c.sendRaw(t, websocket.MessageText, []byte(tt.frame))
			m := c.nextOp(t, "error")
			b, _ := json.Marshal(m)
			if len(b) > maxErrorFrame {
				t.Fatalf("error frame is %d bytes (want at most %d): %.200s…", len(b), maxErrorFrame, b)
			}
			if m["code"] != tt.code {
				t.Fatalf("code %v, want %s: %v", m["code"], tt.code, m)
			}
			if _, ok := m["id"]; ok != tt.wantID {
				t.Fatalf("id echoed: %v, want %v", ok, tt.wantID)
			}
		})
	}
	// Ids up to the bound are still echoed exactly.
	id := strings.Repeat("i", router.DefaultMaxIDBytes-2) // the quotes count
	c.sendRaw(t, websocket.MessageText, []byte(`{"op":"nope","id":"`+id+`"}`))
	if m := c.nextOp(t, "error"); m["id"] != id {
		t.Fatalf("id of %d bytes not echoed: %v", len(id)+2, m["id"])
	}
}

// TestErrorRepliesNonReaderClosed: a session that sends invalid frames and
// never reads makes the gateway queue at most ControlBytes of replies; it
// is then closed with 1008.
func TestErrorRepliesNonReaderClosed(t *testing.T) {
	const bound = 16 << 10
	g := newGateway(t, func(c *gwConfig) {
		// A large item bound, so that only the byte bound can end it.
		c.router.Session = session.Options{QueueMessages: 1 << 16, ControlBytes: bound}
	})
	c := g.dialPaused(t)
	bad := strings.Repeat("\x01", 200)
	frame, _ := json.Marshal(map[string]any{"op": "publish", "id": strings.Repeat("7", 100), "topic": bad, "data": 1})
	// Past the socket buffers, whatever they hold, replies pile up in the
	// gateway's queue until it closes the session.
	const maxFrames = 100000
	most, sent := 0, 0
	deadline := time.Now().Add(waitTimeout)
	for ; sent < maxFrames && time.Now().Before(deadline); sent++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.conn.Write(ctx, websocket.MessageText, frame)
		cancel()
		if err != nil {
			break // the gateway closed the connection
		}
		if sent%16 == 0 {
			q, closing := router.SessionQueues(g.rt)
			most = max(most, q)
			if closing > 0 {
				break
			}
		}
	}
	if most > bound {
		t.Fatalf("the gateway queued %d bytes of replies; the bound is %d", most, bound)
	}
	c.resume()
	if code := c.closeStatus(t); code != websocket.StatusPolicyViolation {
		t.Fatalf("after %d frames: close %v, want 1008", sent, code)
	}
	waitUntil(t, "the refusal is counted", func() bool {
		return metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "control_queue_bytes"}) == 1
	})
	t.Logf("closed after %d frames; at most %d bytes queued", sent, most)
}

// TestSizeLimits: each size limit refuses with its code, counts the
// refusal by limit, and keeps the session open.
func TestSizeLimits(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	headers := func(n, size int) map[string]any {
		h := map[string]any{}
		for i := range n {
			h[fmt.Sprintf("h%02d", i)] = strings.Repeat("v", size)
		}
		return h
	}
	pub := func(extra ...any) map[string]any {
		m := map[string]any{"op": "publish", "topic": "limits", "data": 1}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i].(string)] = extra[i+1]
		}
		return m
	}
	sub := func(pattern string, filter map[string]any) map[string]any {
		return map[string]any{"op": "subscribe", "pattern": pattern, "filter": map[string]any{"headers": filter}}
	}
	tests := []struct {
		name  string
		ok    map[string]any // a request just within the limit
		bad   map[string]any // one just past it
		code  string
		limit string
	}{
		{"msg_id", pub("msg_id", strings.Repeat("m", 256)), pub("msg_id", strings.Repeat("m", 512<<10)), "bad_request", "msg_id_bytes"},
		{"key", pub("key", strings.Repeat("k", 1024)), pub("key", strings.Repeat("k", 1025)), "bad_request", "key_bytes"},
		{"header count", pub("headers", headers(32, 1)), pub("headers", headers(33, 1)), "bad_request", "headers"},
		{"header bytes", pub("headers", headers(2, 4096-3)), pub("headers", headers(2, 4096)), "bad_request", "header_bytes"},
		{"filter entries", sub("f.a", headers(16, 1)), sub("f.b", headers(17, 1)), "bad_request", "filter_headers"},
		{"filter bytes", sub("f.c", headers(1, 4096-3)), sub("f.d", headers(1, 4096-2)), "bad_request", "filter_bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if m := c.call(t, tt.ok); m["op"] == "error" {
				t.Fatalf("within the limit: %v", m)
			}
			m := c.call(t, tt.bad)
			if m["code"] != tt.code {
				t.Fatalf("past the limit: %v, want %s", m, tt.code)
			}
			if b, _ := json.Marshal(m); len(b) > maxErrorFrame {
				t.Fatalf("error frame of %d bytes", len(b))
			}
			if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": tt.limit}); got != 1 {
				t.Fatalf("limit_rejections_total{limit=%s} = %v", tt.limit, got)
			}
		})
	}
	t.Run("session filter bytes", func(t *testing.T) {
		c := g.dial(t)
		filter := headers(1, 4000-3) // 4000 bytes: sixteen fit in 64 KiB
		for i := range 16 {
			c.subscribe(t, fmt.Sprintf("sf.%d", i), "filter", map[string]any{"headers": filter})
		}
		if m := c.call(t, sub("sf.16", filter)); m["code"] != "bad_request" {
			t.Fatalf("seventeenth filter: %v", m)
		}
		if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "session_filter_bytes"}); got != 1 {
			t.Fatalf("limit_rejections_total{limit=session_filter_bytes} = %v", got)
		}
		// Unsubscribing gives the bytes back.
		c.mustOK(t, map[string]any{"op": "unsubscribe", "pattern": "sf.0"}, "unsubscribed")
		c.subscribe(t, "sf.16", "filter", map[string]any{"headers": filter})
	})
	t.Run("http publish", func(t *testing.T) {
		st, body, _ := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "limits", "data": 1, "msg_id": strings.Repeat("m", 512<<10)})
		if st != http.StatusBadRequest || body["code"] != "bad_request" {
			t.Fatalf("http publish with a 512 KiB msg_id: %d %v", st, body)
		}
	})
}

// TestTopicLimits: configured topic length and depth limits hold for
// topics and patterns on every path that takes a name.
func TestTopicLimits(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.Bounds = router.Bounds{MaxTopicBytes: 16, MaxTopicDepth: 3} })
	c := g.dial(t)
	long, deep := strings.Repeat("t", 17), "a.b.c.d"
	c.publish(t, strings.Repeat("t", 16), 1)
	c.publish(t, "a.b.c", 1)
	c.subscribe(t, "a.*.#")
	for _, name := range []string{long, deep} {
		if m := c.call(t, map[string]any{"op": "publish", "topic": name, "data": 1}); m["code"] != "invalid_topic" {
			t.Errorf("ws publish %q: %v", name, m)
		}
		if m := c.call(t, map[string]any{"op": "subscribe", "pattern": name}); m["code"] != "invalid_pattern" {
			t.Errorf("ws subscribe %q: %v", name, m)
		}
		if st, body, _ := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": name, "data": 1}); st != 400 || body["code"] != "invalid_topic" {
			t.Errorf("http publish %q: %d %v", name, st, body)
		}
		if st, body, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": name}); st != 400 || body["code"] != "invalid_topic" {
			t.Errorf("http create %q: %d %v", name, st, body)
		}
		if st, body, _ := g.httpDo(t, "POST", "/v1/groups/g/poll", map[string]any{"pattern": name}); st != 400 || body["code"] != "invalid_pattern" {
			t.Errorf("http poll %q: %d %v", name, st, body)
		}
		if st, body, _ := g.httpDo(t, "GET", "/v1/sse?pattern="+name, nil); st != 400 || body["code"] != "invalid_pattern" {
			t.Errorf("sse %q: %d %v", name, st, body)
		}
		if st, body, _ := g.httpDo(t, "GET", "/v1/presence/"+name, nil); st != 400 || body["code"] != "invalid_topic" {
			t.Errorf("presence %q: %d %v", name, st, body)
		}
	}
	if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "topic_bytes"}); got != 7 {
		t.Errorf("limit_rejections_total{limit=topic_bytes} = %v, want 7", got)
	}
	if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "topic_depth"}); got != 7 {
		t.Errorf("limit_rejections_total{limit=topic_depth} = %v, want 7", got)
	}
	t.Run("above the protocol's limits", func(t *testing.T) {
		for _, b := range []router.Bounds{{MaxTopicBytes: 256}, {MaxTopicDepth: 17}, {MaxIDBytes: -1}} {
			if rt, err := router.New(router.Options{Engine: g.eng, Bounds: b, StatsInterval: -1}); err == nil {
				t.Errorf("New accepted %+v", b)
				_ = rt.Shutdown(context.Background())
			}
		}
	})
}

// TestInboundBudgetBelowFrameLimit: a gateway-wide inbound budget smaller
// than the largest frame is refused, since such a frame could never
// finish arriving.
func TestInboundBudgetBelowFrameLimit(t *testing.T) {
	eng := memengine.New(memengine.Options{})
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	_, err := router.New(router.Options{Engine: eng, Registry: prometheus.NewRegistry(),
		Bounds: router.Bounds{MaxInboundPartialBytes: 512 << 10}})
	if err == nil || !strings.Contains(err.Error(), "inbound read budget") {
		t.Fatalf("New with a 512 KiB budget and 1 MiB frames: %v", err)
	}
}
