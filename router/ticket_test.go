package router_test

import (
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/router"
)

// takeTicket asks POST /v1/tickets with cred and returns the ticket.
func (g *gateway) takeTicket(t *testing.T, cred string) string {
	t.Helper()
	code, body := g.httpAuth(t, http.MethodPost, "/v1/tickets", cred, nil)
	if code != http.StatusCreated {
		t.Fatalf("POST /v1/tickets = %d %v", code, body)
	}
	tk, _ := body["ticket"].(string)
	if len(tk) < 40 || body["ttl_ms"] != float64(router.DefaultTicketTTL.Milliseconds()) {
		t.Fatalf("ticket reply %v", body)
	}
	return tk
}

// TestTicketOneUse: a ticket opens one WebSocket session, with the grants
// of the credential it was issued for; presented again, it is refused
// with 401.
func TestTicketOneUse(t *testing.T) {
	g := newGateway(t, withAuth(t))
	tok := hs256(t, claims([]string{"ticket.#"}, []string{"ticket.#"}, nil))
	tk := g.takeTicket(t, tok)
	c := g.dialWith(t, "?ticket="+url.QueryEscape(tk), nil)
	if w := c.next(t); w["op"] != "welcome" {
		t.Fatalf("first frame %v", w)
	}
	c.mustOK(t, map[string]any{"op": "subscribe", "pattern": "ticket.a"}, "subscribed")
	if r := c.call(t, map[string]any{"op": "subscribe", "pattern": "other.a"}); r["code"] != "forbidden" {
		t.Errorf("subscribe outside the token's grants: %v", r)
	}
	status, body, h := g.dialRefused(t, "ticket="+url.QueryEscape(tk), nil)
	if status != http.StatusUnauthorized || body["code"] != "unauthorized" ||
		!strings.Contains(body["message"].(string), "unknown, used or expired") || h.Get("WWW-Authenticate") == "" {
		t.Errorf("second use: %d %v", status, body)
	}
	for outcome, want := range map[string]float64{"issued": 1, "redeemed": 1, "refused": 1} {
		if v := metricValue(t, g.reg, "switchyard_tickets_total", map[string]string{"outcome": outcome}); v != want {
			t.Errorf("tickets_total{outcome=%q} = %v, want %v", outcome, v, want)
		}
	}
	if n := router.Tickets(g.rt); n != 0 {
		t.Errorf("%d tickets held after the use", n)
	}
}

// TestTicketSSE: a ticket opens a Server-Sent Events stream too, once.
func TestTicketSSE(t *testing.T) {
	g := newGateway(t, withAuth(t))
	tk := g.takeTicket(t, adminKey)
	s, status := openSSE(t, g.srv.URL, "/v1/sse?pattern=ticket.%23&ticket="+url.QueryEscape(tk), nil)
	if s == nil {
		t.Fatalf("stream refused with %d", status)
	}
	if ev := s.nextEvent(t, "welcome"); !strings.Contains(ev.data, `"op":"welcome"`) {
		t.Fatalf("welcome event %v", ev)
	}
	if _, status := openSSE(t, g.srv.URL, "/v1/sse?pattern=ticket.%23&ticket="+url.QueryEscape(tk), nil); status != http.StatusUnauthorized {
		t.Errorf("second use of the ticket: %d, want 401", status)
	}
}

// TestTicketExpires: a ticket not presented within the TTL is refused,
// and the store forgets it.
func TestTicketExpires(t *testing.T) {
	g := newGateway(t, withAuth(t))
	var now atomic.Int64
	now.Store(time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC).UnixNano())
	router.SetTicketClock(g.rt, func() time.Time { return time.Unix(0, now.Load()) })
	tok := hs256(t, claims(nil, []string{"#"}, nil))
	early, late := g.takeTicket(t, tok), g.takeTicket(t, tok)
	now.Add(int64(router.DefaultTicketTTL - time.Millisecond))
	if c := g.dialWith(t, "?ticket="+url.QueryEscape(early), nil); c.next(t)["op"] != "welcome" {
		t.Fatal("a ticket just within its TTL was refused")
	}
	now.Add(int64(time.Millisecond))
	status, body, _ := g.dialRefused(t, "ticket="+url.QueryEscape(late), nil)
	if status != http.StatusUnauthorized || !strings.Contains(body["message"].(string), "expired") {
		t.Errorf("expired ticket: %d %v", status, body)
	}
	if v := metricValue(t, g.reg, "switchyard_tickets_total", map[string]string{"outcome": "expired"}); v != 1 {
		t.Errorf("tickets_total{outcome=expired} = %v", v)
	}
	if n := router.Tickets(g.rt); n != 0 {
		t.Errorf("%d tickets held after they expired", n)
	}
}

// TestTicketBounds: past --max-tickets unused tickets, or their
// credentials' bytes past --max-ticket-bytes, a ticket is refused with
// 503 and Retry-After; a used one frees its room.
func TestTicketBounds(t *testing.T) {
	tok := hs256(t, claims(nil, []string{"#"}, nil))
	t.Run("count", func(t *testing.T) {
		g := newGateway(t, withAuth(t), func(c *gwConfig) { c.router.Tickets.MaxTickets = 2 })
		first := g.takeTicket(t, tok)
		g.takeTicket(t, tok)
		code, body, h := g.httpDoHeader(t, http.MethodPost, "/v1/tickets", http.Header{"Authorization": {"Bearer " + tok}}, nil)
		if code != http.StatusServiceUnavailable || body["code"] != "unavailable" || h.Get("Retry-After") == "" ||
			!strings.Contains(body["message"].(string), "--max-tickets") {
			t.Errorf("third ticket: %d %v", code, body)
		}
		if v := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "tickets"}); v != 1 {
			t.Errorf("limit_rejections_total{limit=tickets} = %v", v)
		}
		g.dialWith(t, "?ticket="+url.QueryEscape(first), nil).next(t)
		g.takeTicket(t, tok)
		if v := metricValue(t, g.reg, "switchyard_tickets", nil); v != 2 {
			t.Errorf("switchyard_tickets = %v, want 2", v)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		g := newGateway(t, withAuth(t), func(c *gwConfig) { c.router.Tickets.MaxBytes = int64(len(tok)) + 200 })
		g.takeTicket(t, tok)
		code, body, _ := g.httpDoHeader(t, http.MethodPost, "/v1/tickets", http.Header{"Authorization": {"Bearer " + tok}}, nil)
		if code != http.StatusServiceUnavailable || !strings.Contains(body["message"].(string), "--max-ticket-bytes") {
			t.Errorf("second ticket: %d %v", code, body)
		}
		if v := metricValue(t, g.reg, "switchyard_tickets_total", map[string]string{"outcome": "full"}); v != 1 {
			t.Errorf("tickets_total{outcome=full} = %v", v)
		}
	})
}

// TestTicketNeedsCredential: on a gateway with keys a ticket is issued
// only for a credential it accepts; a bogus ticket is a 401 naming the
// way to get one.
func TestTicketNeedsCredential(t *testing.T) {
	g := newGateway(t, withAuth(t))
	for name, cred := range map[string]string{"none": "", "bad": "not-a-token"} {
		if code, body := g.httpAuth(t, http.MethodPost, "/v1/tickets", cred, nil); code != http.StatusUnauthorized {
			t.Errorf("%s credential: %d %v", name, code, body)
		}
	}
	status, body, _ := g.dialRefused(t, "ticket=forged", nil)
	if status != http.StatusUnauthorized || !strings.Contains(body["message"].(string), "POST /v1/tickets") {
		t.Errorf("forged ticket: %d %v", status, body)
	}
	if n := router.Tickets(g.rt); n != 0 {
		t.Errorf("%d tickets held", n)
	}
}
