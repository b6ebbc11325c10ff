package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

// TestNodeClientWebSocketTicket runs testdata/node-e2e/ws_ticket.mjs: the
// client in Node opens WebSockets with a token against a gateway that
// needs one. Every request is recorded as an access log would: none may
// carry the token in its URL, every upgrade carries a ticket, and the
// tickets were asked for with the token in the Authorization header.
func TestNodeClientWebSocketTicket(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, args := nodeWithWebSocket(t)
	now := time.Now()
	token, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "ticket-e2e", "iat": now.Unix(),
		"exp": now.Add(time.Minute).Unix(), "subscribe": []string{"e2e.ticket.#"}, "publish": []string{"e2e.ticket.#"}}).SignedString(hmacSecret)
	if err != nil {
		t.Fatal(err)
	}
	eng := memengine.New(memengine.Options{})
	reg := prometheus.NewRegistry()
	rt, err := router.New(router.Options{Engine: eng, Registry: reg, StatsInterval: -1,
		Auth: router.AuthOptions{HMACSecrets: [][]byte{hmacSecret}}})
	if err != nil {
		t.Fatal(err)
	}
	log := &requestLog{next: rt, auth: map[string]bool{}}
	srv := httptest.NewServer(log)
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = rt.Shutdown(sctx)
		srv.Close()
		_ = eng.Close(sctx)
	}()
	cmd := exec.CommandContext(ctx, node, append(args, "ws_ticket.mjs", srv.URL+"/", token)...)
	cmd.Dir = "testdata/node-e2e"
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("node ws_ticket.mjs: %v\nstdout: %s\nstderr: %s", err, out, stderr.String())
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	upgrades := 0
	for _, u := range log.urls {
		if strings.Contains(u, token) || strings.Contains(u, "token=") {
			t.Errorf("a request carried the credential in its URL: %s", u)
		}
		if strings.HasPrefix(u, "/v1/ws") {
			upgrades++
			if !strings.Contains(u, "ticket=") {
				t.Errorf("an upgrade without a ticket: %s", u)
			}
		}
	}
	if upgrades != 2 {
		t.Errorf("%d upgrades, want 2 (the first and the reconnect): %v", upgrades, log.urls)
	}
	if !log.auth["/v1/tickets"] {
		t.Errorf("no ticket request carried an Authorization header (requests: %v)", log.urls)
	}
	if log.auth["/v1/ws"] {
		t.Error("an upgrade carried an Authorization header; the ticket should stand for it")
	}
}

// TestBrowserClientWebSocketTicket: in chromium, the client given a token
// opens a WebSocket (not the SSE fallback) with a ticket, and receives;
// no request the page makes carries the token in its URL.
func TestBrowserClientWebSocketTicket(t *testing.T) {
	ctx := browser(t)
	g := newAuthWebGateway(t, -1)
	tok := userToken(t, "ticket-browser", "tk.#")
	navigate(t, ctx, g.srv.URL+"/example.html")
	setup := fmt.Sprintf(`(async () => {
		const { connect } = await import("/switchyard.js");
		window.got = [];
		const c = await connect("ws://" + location.host + "/v1/ws", { token: %q, requestTimeoutMs: 5000 });
		await c.subscribe("tk.*", (m) => got.push(m.data.n));
		window.sy = c;
		return c.transport;
	})()`, tok)
	transport, err := chromedp.Run(ctx, chromedp.Evaluate[string](setup, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("setup: %v", err)
	}
	if transport != "websocket" {
		t.Fatalf("transport %q, want websocket", transport)
	}
	req, err := http.NewRequest(http.MethodPost, g.srv.URL+"/v1/publish", strings.NewReader(`{"topic":"tk.a","data":{"n":7}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("publish: %d", resp.StatusCode)
	}
	evalUntil(t, ctx, `got.length === 1 && got[0] === 7`, "the message over the ticketed WebSocket")
	g.noKeyInURLs(t)
	g.mu.Lock()
	defer g.mu.Unlock()
	tickets := 0
	for _, u := range g.urls {
		if strings.Contains(u, tok) {
			t.Errorf("a request URL carries the token: %s", u)
		}
		if strings.HasPrefix(u, "/v1/ws?ticket=") {
			tickets++
		}
	}
	if tickets != 1 {
		t.Errorf("%d upgrades with a ticket, want 1: %v", tickets, g.urls)
	}
}
