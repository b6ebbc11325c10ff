package router_test

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// dialHeader tries an upgrade with extra headers and reports the HTTP
// status (101 when it succeeded; the connection is then closed).
func (g *gateway) dialHeader(t *testing.T, h http.Header) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, g.wsURL(), &websocket.DialOptions{HTTPHeader: h})
	if err == nil {
		conn.Close(websocket.StatusNormalClosure, "")
		return http.StatusSwitchingProtocols
	}
	if resp == nil {
		t.Fatalf("dial: %v", err)
	}
	return resp.StatusCode
}

func TestOriginCheck(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.OriginPatterns = []string{"app.example"} })
	tests := []struct {
		name   string
		origin string
		want   int
	}{
		{"no Origin (not a browser)", "", 101},
		{"same origin", g.srv.URL, 101},
		{"allowed origin", "https://app.example", 101},
		{"cross origin", "http://evil.example", 403},
		{"lookalike", "https://app.example.evil.example", 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.origin != "" {
				h.Set("Origin", tt.origin)
			}
			if got := g.dialHeader(t, h); got != tt.want {
				t.Fatalf("status %d, want %d", got, tt.want)
			}
		})
	}
	t.Run("default refuses cross origin", func(t *testing.T) {
		g := newGateway(t)
		if got := g.dialHeader(t, http.Header{"Origin": {"http://evil.example"}}); got != 403 {
			t.Fatalf("status %d, want 403", got)
		}
	})
}

func TestLimitConnections(t *testing.T) {
	t.Run("global", func(t *testing.T) {
		g := newGateway(t, func(c *gwConfig) { c.router.MaxConnections = 2 })
		a := g.dial(t)
		g.dial(t)
		st, body, h := g.dialRefused(t, "", nil)
		if st != http.StatusServiceUnavailable || body["code"] != "too_many_connections" || h.Get("Retry-After") == "" {
			t.Fatalf("third session: %d %v", st, body)
		}
		if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "connections"}); got != 1 {
			t.Fatalf("limit_rejections_total{limit=connections} = %v", got)
		}
		// The slot comes back when a session ends.
		a.conn.Close(websocket.StatusNormalClosure, "")
		<-a.done
		waitUntil(t, "a slot frees up", func() bool { return g.dialHeader(t, nil) == 101 })
	})
	t.Run("per IP", func(t *testing.T) {
		g := newGateway(t, func(c *gwConfig) { c.router.MaxConnectionsPerIP = 1 })
		g.dial(t)
		// X-Forwarded-For is not trusted by default, so it cannot dodge
		// the limit.
		st, body, _ := g.dialRefused(t, "", http.Header{"X-Forwarded-For": {"203.0.113.9"}})
		if st != http.StatusTooManyRequests || body["code"] != "too_many_connections" {
			t.Fatalf("second session from one IP: %d %v", st, body)
		}
		if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "connections_per_ip"}); got != 1 {
			t.Fatalf("limit_rejections_total{limit=connections_per_ip} = %v", got)
		}
	})
	t.Run("per IP behind a trusted proxy", func(t *testing.T) {
		g := newGateway(t, func(c *gwConfig) {
			c.router.MaxConnectionsPerIP = 1
			_, lo, _ := net.ParseCIDR("127.0.0.0/8")
			c.router.TrustedProxies = []*net.IPNet{lo}
		})
		if st := g.dialHeader(t, http.Header{"X-Forwarded-For": {"203.0.113.9"}}); st != 101 {
			t.Fatalf("first client: %d", st)
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		keep, _, err := websocket.Dial(ctx, g.wsURL(), &websocket.DialOptions{HTTPHeader: http.Header{"X-Forwarded-For": {"203.0.113.10"}}})
		if err != nil {
			t.Fatal(err)
		}
		defer keep.CloseNow()
		if st := g.dialHeader(t, http.Header{"X-Forwarded-For": {"203.0.113.11"}}); st != 101 {
			t.Fatalf("another client through the proxy: %d", st)
		}
		if st, _, _ := g.dialRefused(t, "", http.Header{"X-Forwarded-For": {"203.0.113.10"}}); st != 429 {
			t.Fatalf("same forwarded client twice: %d", st)
		}
	})
}

// waitUntil polls cond until it holds or the wait times out.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestLimitSessionOps(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) {
		c.router.MaxSubscriptions = 2
		c.router.MaxMessageBytes = 16
		c.router.PublishRate = 0.001 // a burst of 1, then nothing for the test's life
	})
	c := g.dial(t)
	c.subscribe(t, "a")
	c.subscribe(t, "b")
	tests := []struct {
		name   string
		req    map[string]any
		code   string
		metric string
		labels map[string]string
	}{
		{"subscriptions", map[string]any{"op": "subscribe", "pattern": "c"}, "too_many_subscriptions",
			"switchyard_rejected_frames_total", map[string]string{"code": "too_many_subscriptions"}},
		{"message size", map[string]any{"op": "publish", "topic": "a", "data": strings.Repeat("x", 32)}, "message_too_large",
			"switchyard_rejected_frames_total", map[string]string{"code": "message_too_large"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if m := c.call(t, tt.req); m["code"] != tt.code {
				t.Fatalf("got %v, want %s", m, tt.code)
			}
			if got := metricValue(t, g.reg, tt.metric, tt.labels); got != 1 {
				t.Fatalf("%s%v = %v", tt.metric, tt.labels, got)
			}
		})
	}
	t.Run("publish rate", func(t *testing.T) {
		c := g.dial(t) // a fresh bucket: the oversized publish took a token
		c.publish(t, "a", 1)
		if m := c.call(t, map[string]any{"op": "publish", "topic": "a", "data": 1}); m["code"] != "rate_limited" {
			t.Fatalf("second publish: %v", m)
		}
		if got := metricValue(t, g.reg, "switchyard_publishes_total", map[string]string{"transport": "ws", "result": "rate_limited"}); got != 1 {
			t.Fatalf("publishes_total{result=rate_limited} = %v", got)
		}
	})
}

func TestLimitFrameSize(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.Session.ReadLimit = 1024 })
	c := g.dial(t)
	c.sendRaw(t, websocket.MessageText, []byte(`{"op":"publish","topic":"a","data":"`+strings.Repeat("x", 2048)+`"}`))
	if code := c.closeStatus(t); code != websocket.StatusMessageTooBig {
		t.Fatalf("close %v, want 1009", code)
	}
}

func TestLimitHTTPPublishRate(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.HTTPPublishRate = 0.001 })
	body := map[string]any{"topic": "a", "data": 1}
	if st, m, _ := g.httpDo(t, "POST", "/v1/publish", body); st != 200 {
		t.Fatalf("first: %d %v", st, m)
	}
	st, m, h := g.httpDo(t, "POST", "/v1/publish", body)
	if st != http.StatusTooManyRequests || m["code"] != "rate_limited" || h.Get("Retry-After") == "" {
		t.Fatalf("second: %d %v", st, m)
	}
	if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "http_publish_rate"}); got != 1 {
		t.Fatalf("limit_rejections_total{limit=http_publish_rate} = %v", got)
	}
	// WebSocket publishes have their own per-session limit.
	g.dial(t).publish(t, "a", 2)
}

func TestLimitTopics(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) {
		c.router.MaxTopics = 2
		c.router.MaxPartitions = 4
		c.router.StatsInterval = 10 * time.Millisecond // $sys topics must not count
	})
	c := g.dial(t)
	c.subscribe(t, "$sys.stats")
	c.nextOp(t, "message") // $sys.stats exists
	if st, m, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "t1", "partitions": 5}); st != 400 || m["code"] != "bad_request" {
		t.Fatalf("5 partitions over a limit of 4: %d %v", st, m)
	}
	if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "partitions"}); got != 1 {
		t.Fatalf("limit_rejections_total{limit=partitions} = %v", got)
	}
	if st, m, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "t1", "partitions": 4}); st != 201 {
		t.Fatalf("create t1: %d %v", st, m)
	}
	c.publish(t, "t2", 1) // auto-created: the second topic
	st, m, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "t3"})
	if st != http.StatusConflict || m["code"] != "too_many_topics" {
		t.Fatalf("create over the limit: %d %v", st, m)
	}
	if m := c.call(t, map[string]any{"op": "publish", "topic": "t3", "data": 1}); m["code"] != "too_many_topics" {
		t.Fatalf("auto-create over the limit: %v", m)
	}
	if st, m, _ := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "t3", "data": 1}); st != 409 || m["code"] != "too_many_topics" {
		t.Fatalf("HTTP auto-create over the limit: %d %v", st, m)
	}
	c.publish(t, "t1", 1) // existing topics still take publishes
	c.publish(t, "t2", 2)
	if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "topics"}); got != 3 {
		t.Fatalf("limit_rejections_total{limit=topics} = %v", got)
	}
	// Deleting a topic makes room again.
	if st, _, _ := g.httpDo(t, "DELETE", "/v1/topics/t2", nil); st != 204 {
		t.Fatalf("delete: %d", st)
	}
	c.publish(t, "t3", 1)
	if m := c.call(t, map[string]any{"op": "publish", "topic": "t2", "data": 1}); m["code"] != "too_many_topics" {
		t.Fatalf("re-creating a deleted topic over the limit: %v", m)
	}
}

// TestMalformedBodies sends broken JSON to every POST endpoint: each answers
// 400 bad_request with a JSON error, never 500.
func TestMalformedBodies(t *testing.T) {
	g := newGateway(t)
	paths := []string{
		"/v1/publish", "/v1/topics", "/v1/groups/g/seek", "/v1/groups/g/poll",
		"/v1/groups/g/ack", "/v1/groups/g/nack", "/v1/deadletters/redrive",
	}
	bodies := []struct{ name, body string }{
		{"empty", ""},
		{"truncated", `{"topic":`},
		{"not an object", `[1,2]`},
		{"string", `"x"`},
		{"wrong types", `{"topic":5,"name":5,"pattern":5,"group":5,"offset":"x","partitions":"x","max":"x","ids":"x","partition":"x","data":1}`},
		{"trailing garbage", `{} x`},
		{"invalid UTF-8 in a string", "{\"topic\":\"\xff\"}"},
	}
	for _, p := range paths {
		for _, b := range bodies {
			t.Run(strings.TrimPrefix(p, "/v1/")+"/"+b.name, func(t *testing.T) {
				st, m, h := g.httpDo(t, "POST", p, b.body)
				if st != http.StatusBadRequest || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
					t.Fatalf("%d %v, want 400 JSON", st, m)
				}
				if code := m["code"]; code != "bad_request" && code != "invalid_topic" {
					t.Fatalf("code %v", code)
				}
			})
		}
	}
}
