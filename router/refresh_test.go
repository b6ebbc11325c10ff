package router_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
)

// lifeToken is an HS256 token issued now and valid for life, with
// millisecond precision (exp and iat as fractional seconds).
func lifeToken(t *testing.T, sub string, life time.Duration, subscribe, publish, groups []string) (string, time.Time) {
	t.Helper()
	now := time.Now()
	exp := now.Add(life)
	c := jwt.MapClaims{
		"sub": sub,
		"iat": float64(now.UnixMilli()) / 1000,
		"exp": float64(exp.UnixMilli()) / 1000,
	}
	if subscribe != nil {
		c["subscribe"] = subscribe
	}
	if publish != nil {
		c["publish"] = publish
	}
	if groups != nil {
		c["groups"] = groups
	}
	return hs256(t, c), exp
}

func withLead(d time.Duration) func(*gwConfig) {
	return func(c *gwConfig) { c.router.Auth.RefreshLead = d }
}

// TestRefreshThreeLifetimes keeps one session open through more than three
// token lifetimes by answering every refresh_required with a new token;
// every message published meanwhile arrives, in order, on the same
// connection.
func TestRefreshThreeLifetimes(t *testing.T) {
	// A lead of most of a second leaves each refresh round trip time to
	// finish under the race detector on a loaded machine.
	const life = 2 * time.Second
	g := newGateway(t, withAuth(t), withLead(900*time.Millisecond))
	grants := []string{"r.#"}
	tok, _ := lifeToken(t, "alice", life, grants, grants, nil)
	start := time.Now()
	c := g.dialToken(t, tok)
	c.subscribe(t, "r.#")

	sent := 0
	publish := func() {
		t.Helper()
		st, _ := g.httpAuth(t, "POST", "/v1/publish", adminKey, map[string]any{"topic": "r.x", "data": sent})
		if st != 200 {
			t.Fatalf("publish: %d", st)
		}
		sent++
	}
	var got []int64
	refreshes := 0
	for round := 0; round < 10 && time.Since(start) < 3*life+200*time.Millisecond; round++ {
		publish()
		publish()
		// Collect messages until the gateway asks for a new token.
		for {
			m := c.next(t)
			if m["op"] == "message" {
				got = append(got, num(m, "offset"))
				continue
			}
			if m["op"] != "refresh_required" {
				t.Fatalf("frame %v, want message or refresh_required", m)
			}
			if _, err := time.Parse(time.RFC3339, m["expires"].(string)); err != nil {
				t.Fatalf("refresh_required.expires: %v", err)
			}
			break
		}
		publish()
		tok, exp := lifeToken(t, "alice", life, grants, grants, nil)
		r := c.mustOK(t, map[string]any{"op": "refresh", "token": tok}, "refreshed")
		ex, err := time.Parse(time.RFC3339, r["expires"].(string))
		if err != nil || ex.Unix() != exp.Unix() {
			t.Fatalf("refreshed.expires = %v (%v), want %v", r["expires"], err, exp.UTC())
		}
		refreshes++
	}
	if refreshes < 3 {
		t.Fatalf("%d refreshes", refreshes)
	}
	publish()
	for len(got) < sent {
		m := c.next(t)
		if m["op"] == "refresh_required" {
			continue
		}
		if m["op"] != "message" {
			t.Fatalf("frame %v, want message", m)
		}
		got = append(got, num(m, "offset"))
	}
	for i, off := range got {
		if off != int64(i) {
			t.Fatalf("offsets %v: want 0..%d in order", got, sent-1)
		}
	}
	if lived := time.Since(start); lived < 3*life {
		t.Fatalf("session lived %v, want more than three lifetimes (%v)", lived, 3*life)
	}
	select {
	case <-c.done:
		t.Fatal("session closed")
	default:
	}
	if n := metricValue(t, g.reg, "switchyard_connects_total", nil); n != 1 {
		t.Fatalf("connects_total = %v, want 1 (no reconnect)", n)
	}
	if n := metricValue(t, g.reg, "switchyard_token_refreshes_total", map[string]string{"outcome": "ok"}); n != float64(refreshes) {
		t.Fatalf("token_refreshes_total{ok} = %v, want %d", n, refreshes)
	}
}

// TestRefreshRefusedClosesAtExp: a refresh with a bad token is refused and
// the session closes with 1008 when its old token expires, not before.
func TestRefreshRefusedClosesAtExp(t *testing.T) {
	g := newGateway(t, withAuth(t), withLead(400*time.Millisecond))
	tok, exp := lifeToken(t, "bob", 800*time.Millisecond, []string{"#"}, nil, nil)
	c := g.dialToken(t, tok)
	c.nextOp(t, "refresh_required")
	bad, _ := lifeToken(t, "bob", time.Minute, []string{"#"}, nil, nil)
	e := c.call(t, map[string]any{"op": "refresh", "token": tamper(t, bad)})
	if e["op"] != "error" || e["code"] != "unauthorized" {
		t.Fatalf("refresh with a bad token: %v", e)
	}
	expired, _ := lifeToken(t, "bob", -time.Second, []string{"#"}, nil, nil)
	e = c.call(t, map[string]any{"op": "refresh", "token": expired})
	if e["op"] != "error" || e["code"] != "unauthorized" {
		t.Fatalf("refresh with an expired token: %v", e)
	}
	e = c.call(t, map[string]any{"op": "refresh"})
	if e["code"] != "bad_request" {
		t.Fatalf("refresh without a token: %v", e)
	}
	if code := c.closeStatus(t); code != websocket.StatusPolicyViolation {
		t.Fatalf("close status %v, want 1008", code)
	}
	if early := time.Until(exp); early > 50*time.Millisecond {
		t.Fatalf("closed %v before the token expired", early)
	}
	if n := metricValue(t, g.reg, "switchyard_token_refreshes_total", map[string]string{"outcome": "refused"}); n != 2 {
		t.Fatalf("token_refreshes_total{refused} = %v, want 2", n)
	}
}

// TestRefreshNarrowsGrants: subscriptions the new token does not allow end
// with unsubscribed/forbidden before the refreshed reply; the others keep
// delivering; publishes follow the new grants.
func TestRefreshNarrowsGrants(t *testing.T) {
	g := newGateway(t, withAuth(t))
	tok, _ := lifeToken(t, "carol", time.Minute, []string{"a.#", "b.#"}, []string{"a.#", "b.#"}, []string{"g1"})
	c := g.dialToken(t, tok)
	c.subscribe(t, "a.x")
	c.subscribe(t, "b.x")
	c.subscribe(t, "b.#", "group", "g1")

	narrow, _ := lifeToken(t, "carol", time.Minute, []string{"b.#"}, []string{"b.#"}, nil)
	c.nextID++
	id := c.nextID
	c.send(t, map[string]any{"op": "refresh", "id": id, "token": narrow})
	ended := map[string]bool{}
	for {
		m := c.next(t)
		if m["op"] == "refreshed" {
			if num(m, "id") != int64(id) {
				t.Fatalf("refreshed %v", m)
			}
			break
		}
		if m["op"] != "unsubscribed" || m["reason"] != "forbidden" {
			t.Fatalf("frame %v, want unsubscribed/forbidden or refreshed", m)
		}
		if _, ok := m["id"]; ok {
			t.Fatalf("revocation carries an id: %v", m)
		}
		grp, _ := m["group"].(string)
		ended[fmt.Sprint(m["pattern"], "/", grp)] = true
	}
	if len(ended) != 2 || !ended["a.x/"] || !ended["b.#/g1"] {
		t.Fatalf("ended %v, want a.x and b.# in group g1", ended)
	}
	if e := c.call(t, map[string]any{"op": "publish", "topic": "a.x", "data": 1}); e["code"] != "forbidden" {
		t.Fatalf("publish to a.x after the refresh: %v", e)
	}
	c.publish(t, "b.x", 2)
	if m := c.nextOp(t, "message"); m["pattern"] != "b.x" {
		t.Fatalf("message %v", m)
	}
	c.noFrame(t)
	if e := c.call(t, map[string]any{"op": "subscribe", "pattern": "a.#"}); e["code"] != "forbidden" {
		t.Fatalf("subscribe a.# after the refresh: %v", e)
	}

	// Another subject may not take the session over.
	other, _ := lifeToken(t, "mallory", time.Minute, []string{"#"}, []string{"#"}, nil)
	if e := c.call(t, map[string]any{"op": "refresh", "token": other}); e["code"] != "forbidden" {
		t.Fatalf("refresh with another subject: %v", e)
	}
}

// TestRefreshDefaultLead: without RefreshLead the warning comes a tenth of
// the lifetime before exp (under 30 s), not earlier.
func TestRefreshDefaultLead(t *testing.T) {
	g := newGateway(t, withAuth(t))
	const life = 1500 * time.Millisecond
	tok, exp := lifeToken(t, "dave", life, []string{"#"}, nil, nil)
	c := g.dialToken(t, tok)
	c.nextOp(t, "refresh_required")
	left := time.Until(exp)
	if left > life/10+50*time.Millisecond || left < 0 {
		t.Fatalf("refresh_required %v before exp, want about %v", left, life/10)
	}
}
