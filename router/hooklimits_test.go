package router_test

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/router"
)

// The addresses of these tests' clients, forwarded by a trusted proxy on
// loopback (X-Forwarded-For).
const (
	attackerAddr  = "203.0.113.66"
	bystanderAddr = "203.0.113.7"
)

// fromAddr is a handshake header naming addr as the client.
func fromAddr(addr string) http.Header {
	return http.Header{"X-Forwarded-For": {addr}}
}

// trustLoopback makes the gateway take X-Forwarded-For from loopback.
func trustLoopback(c *gwConfig) {
	_, lo, _ := net.ParseCIDR("127.0.0.0/8")
	c.router.TrustedProxies = []*net.IPNet{lo}
}

// connectHooksOnly enables the connect hook alone.
func connectHooksOnly(o *router.HookOptions) { o.Subscribe, o.Publish = false, false }

// hookCallsFrom counts the backend's connect calls per remote_addr.
type hookCallsFrom struct {
	mu sync.Mutex // guards n
	n  map[string]int
}

func (h *hookCallsFrom) add(addr string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = map[string]int{}
	}
	h.n[addr]++
}

func (h *hookCallsFrom) get(addr string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n[addr]
}

// dialStatus tries one WebSocket upgrade with header h and returns the
// HTTP status (101 for an open session, closed at once), or 0 and the
// error when there was no HTTP answer.
func dialStatus(ctx context.Context, g *gateway, hc *http.Client, h http.Header) (int, error) {
	conn, resp, err := websocket.Dial(ctx, g.wsURL(), &websocket.DialOptions{HTTPClient: hc, HTTPHeader: h})
	if err == nil {
		conn.CloseNow()
		return http.StatusSwitchingProtocols, nil
	}
	if resp == nil {
		return 0, err
	}
	return resp.StatusCode, nil
}

// noKeepAlive is an HTTP client for one-shot handshakes; its transport is
// closed when the test ends.
func noKeepAlive(t *testing.T) *http.Client {
	tr := &http.Transport{DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}
}

// TestConnectLimitsBeforeHook: an address at --max-connections-per-ip
// that keeps connecting over WebSocket and SSE is refused with 429
// before the connect hook, which it reaches only for the session it was
// let in with, and another address still gets in.
func TestConnectLimitsBeforeHook(t *testing.T) {
	const workers, attempts = 8, 10
	var from hookCallsFrom
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request, hook string, body map[string]any) {
		addr, _ := body["remote_addr"].(string)
		from.add(addr)
		// A slow application backend.
		select {
		case <-time.After(50 * time.Millisecond):
		case <-r.Context().Done():
		}
		reply(w, map[string]any{"allow": true, "user": addr})
	})
	g := newGateway(t, trustLoopback, withHooks(b, connectHooksOnly, func(o *router.HookOptions) {
		o.MaxConcurrent = 8
		o.ConnectTimeout = waitTimeout
	}), func(c *gwConfig) { c.router.MaxConnectionsPerIP = 1 })
	hc := noKeepAlive(t)

	g.dialWithHeader(t, fromAddr(attackerAddr)) // its one session, kept open
	if n := from.get(attackerAddr); n != 1 {
		t.Fatalf("connect hook called %d times for the first session, want 1", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var wg sync.WaitGroup
	var refused, other atomic.Int32
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range attempts {
				st, err := dialStatus(ctx, g, hc, fromAddr(attackerAddr))
				switch {
				case err != nil:
					other.Add(1)
					return
				case st == http.StatusTooManyRequests:
					refused.Add(1)
				default:
					other.Add(1)
				}
			}
		}()
	}
	// Another address connects while the storm goes on.
	start := time.Now()
	st, err := dialStatus(ctx, g, hc, fromAddr(bystanderAddr))
	took := time.Since(start)
	wg.Wait()
	if err != nil || st != http.StatusSwitchingProtocols {
		t.Fatalf("the other address's connect: status %d, %v", st, err)
	}
	t.Logf("the other address connected in %v", took)
	if refused.Load() != workers*attempts || other.Load() != 0 {
		t.Fatalf("storm: %d refused with 429, %d other; want %d refused", refused.Load(), other.Load(), workers*attempts)
	}

	// SSE connects count against the same limit, also before the hook.
	for range 3 {
		if s, st := openSSE(t, g.srv.URL, "/v1/sse?pattern=a.x", fromAddr(attackerAddr)); s != nil || st != http.StatusTooManyRequests {
			t.Fatalf("SSE stream from an address at its limit: status %d, want 429", st)
		}
	}
	if n := from.get(attackerAddr); n != 1 {
		t.Fatalf("connect hook called %d times for an address at its limit; want 1 (its one session), none for %d refused attempts",
			n, workers*attempts+3)
	}
	if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "connections_per_ip"}); got != workers*attempts+3 {
		t.Fatalf("limit_rejections_total{limit=connections_per_ip} = %v, want %d", got, workers*attempts+3)
	}
}

// TestConnectHookShareOfAddress: one address's connects, however many at
// once, hold at most its share of the hook's slots (a quarter of
// --hook-max-concurrent), so another address's connect gets a slot while
// the backend keeps the first address's calls waiting.
func TestConnectHookShareOfAddress(t *testing.T) {
	const slots, attackers = 8, 8
	held := make(chan struct{}) // closed: the backend answers the attacker
	var inHook atomic.Int32     // the attacker's calls the backend holds
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request, hook string, body map[string]any) {
		if body["remote_addr"] == attackerAddr {
			inHook.Add(1)
			defer inHook.Add(-1)
			select {
			case <-held:
			case <-r.Context().Done():
			}
		}
		reply(w, map[string]any{"allow": true, "user": body["remote_addr"]})
	})
	g := newGateway(t, trustLoopback, withHooks(b, connectHooksOnly, func(o *router.HookOptions) {
		o.MaxConcurrent = slots
		o.ConnectTimeout = 3 * waitTimeout // longer than any wait below
	}))
	hc := noKeepAlive(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	var wg sync.WaitGroup
	var refused, admitted, other atomic.Int32
	defer wg.Wait()
	release := sync.OnceFunc(func() { close(held) })
	defer release()
	for range attackers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := dialStatus(ctx, g, hc, fromAddr(attackerAddr))
			switch {
			case err != nil:
				other.Add(1)
			case st == http.StatusTooManyRequests:
				refused.Add(1)
			case st == http.StatusSwitchingProtocols:
				admitted.Add(1)
			default:
				other.Add(1)
			}
		}()
	}
	waitUntil(t, "every attacker connect is in the hook or refused", func() bool {
		return inHook.Load()+refused.Load()+other.Load() == attackers
	})
	if n := inHook.Load(); n > slots/4 {
		t.Errorf("one address holds %d of %d hook slots, want at most %d", n, slots, slots/4)
	}

	// The other address's connect must not wait for the attacker's.
	st, err := dialStatus(ctx, g, hc, fromAddr(bystanderAddr))
	if err != nil || st != http.StatusSwitchingProtocols {
		t.Errorf("the other address's connect while one address's wait in the hook: status %d, %v", st, err)
	}
	release()
	wg.Wait()
	if other.Load() != 0 || refused.Load() != attackers-slots/4 || admitted.Load() != slots/4 {
		t.Fatalf("attacker: %d admitted, %d refused with 429, %d other; want %d, %d, 0",
			admitted.Load(), refused.Load(), other.Load(), slots/4, attackers-slots/4)
	}
	if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "connect_hook_per_ip"}); got != attackers-slots/4 {
		t.Fatalf("limit_rejections_total{limit=connect_hook_per_ip} = %v, want %d", got, attackers-slots/4)
	}
}

// TestConnectRatePerIP: past --connect-rate-per-ip an address's WebSocket
// and SSE connects are refused with 429 rate_limited before the connect
// hook, counted; another address is not limited by it.
func TestConnectRatePerIP(t *testing.T) {
	var from hookCallsFrom
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request, hook string, body map[string]any) {
		addr, _ := body["remote_addr"].(string)
		from.add(addr)
		reply(w, map[string]any{"allow": true, "user": addr})
	})
	g := newGateway(t, trustLoopback, withHooks(b, connectHooksOnly), func(c *gwConfig) {
		c.router.ConnectRatePerIP = 0.001 // a burst of 1, then nothing for the test's life
	})
	g.dialWithHeader(t, fromAddr(attackerAddr))

	st, body, h := g.dialRefused(t, "", fromAddr(attackerAddr))
	if st != http.StatusTooManyRequests || body["code"] != "rate_limited" || h.Get("Retry-After") == "" {
		t.Fatalf("second connect from one address: %d %v, Retry-After %q", st, body, h.Get("Retry-After"))
	}
	if s, st := openSSE(t, g.srv.URL, "/v1/sse?pattern=a.x", fromAddr(attackerAddr)); s != nil || st != http.StatusTooManyRequests {
		t.Fatalf("SSE stream past the connect rate: status %d, want 429", st)
	}
	g.dialWithHeader(t, fromAddr(bystanderAddr))
	if n := from.get(attackerAddr); n != 1 {
		t.Fatalf("connect hook called %d times for the limited address, want 1", n)
	}
	if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "connect_rate_per_ip"}); got != 2 {
		t.Fatalf("limit_rejections_total{limit=connect_rate_per_ip} = %v, want 2", got)
	}
}
