package router_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"testing"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/session"
)

// sseRefused opens GET path expecting a refusal, and returns its status
// and JSON body.
func sseRefused(t *testing.T, base, path string) (int, map[string]any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Fatalf("GET %s: stream opened; want it refused", path)
	}
	var body map[string]any
	data, _ := io.ReadAll(resp.Body)
	_ = json.Unmarshal(data, &body)
	return resp.StatusCode, body
}

// TestSSECountsTowardConnectionLimits fills each connection limit with
// one transport and opens one more session with the other (and the
// same): every refusal carries the limit's status and code, is counted by
// limit, and the sessions that were let in are counted as connections.
func TestSSECountsTowardConnectionLimits(t *testing.T) {
	const n = 2
	for _, tc := range []struct {
		name   string
		limit  string
		status int
		opts   func(*gwConfig)
	}{
		{"global", "connections", http.StatusServiceUnavailable, func(c *gwConfig) { c.router.MaxConnections = n }},
		{"per IP", "connections_per_ip", http.StatusTooManyRequests, func(c *gwConfig) { c.router.MaxConnectionsPerIP = n }},
	} {
		for _, fill := range []string{"sse", "ws"} {
			t.Run(tc.name+"/"+fill+" sessions fill it", func(t *testing.T) {
				g := newGateway(t, tc.opts)
				var first func() // ends the first session
				for i := range n {
					if fill == "sse" {
						s, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=x", nil)
						s.nextEvent(t, "welcome")
						if i == 0 {
							first = s.close
						}
						continue
					}
					c := g.dial(t)
					if i == 0 {
						first = func() {
							c.conn.Close(websocket.StatusNormalClosure, "")
							<-c.done
						}
					}
				}
				if got := metricValue(t, g.reg, "switchyard_connections", nil); got != n {
					t.Fatalf("switchyard_connections = %v, want %d", got, n)
				}
				if got := metricValue(t, g.reg, "switchyard_connects_total", nil); got != n {
					t.Fatalf("switchyard_connects_total = %v, want %d", got, n)
				}
				st, body, h := g.dialRefused(t, "", nil)
				if st != tc.status || body["code"] != "too_many_connections" || h.Get("Retry-After") == "" {
					t.Fatalf("WebSocket past the limit: %d %v", st, body)
				}
				st, body = sseRefused(t, g.srv.URL, "/v1/sse?pattern=x")
				if st != tc.status || body["code"] != "too_many_connections" {
					t.Fatalf("SSE past the limit: %d %v", st, body)
				}
				if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": tc.limit}); got != 2 {
					t.Fatalf("limit_rejections_total{limit=%s} = %v, want 2", tc.limit, got)
				}
				// The slot comes back when a session ends, whichever its
				// transport.
				first()
				waitUntil(t, "a slot frees up", func() bool {
					return metricValue(t, g.reg, "switchyard_connections", nil) == n-1
				})
				s, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=x", nil)
				if s == nil {
					t.Fatal("SSE refused after a session ended")
				}
				s.nextEvent(t, "welcome")
			})
		}
	}
}

// TestSSECountsControlQueueLimit opens an SSE stream whose first replies
// pass the control queue bound: the stream ends with the close a
// WebSocket session would get (1008), and the limit counts it as it
// counts a WebSocket session's.
func TestSSECountsControlQueueLimit(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.Session = session.Options{ControlBytes: 256} })
	path := "/v1/sse?pattern=p0"
	for i := 1; i < 16; i++ {
		path += "&pattern=p" + strconv.Itoa(i)
	}
	s, _ := openSSE(t, g.srv.URL, path, nil)
	for {
		ev := s.next(t)
		if ev.event != "close" {
			continue
		}
		if num(ev.frame, "code") != int64(websocket.StatusPolicyViolation) {
			t.Fatalf("close event %s, want code %d", ev.data, websocket.StatusPolicyViolation)
		}
		break
	}
	waitUntil(t, "the session has ended", func() bool {
		return metricValue(t, g.reg, "switchyard_connections", nil) == 0
	})
	if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "control_queue_bytes"}); got != 1 {
		t.Fatalf("limit_rejections_total{limit=control_queue_bytes} = %v, want 1", got)
	}
}
