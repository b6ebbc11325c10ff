package router_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/switchyard/switchyard/router"
)

// TestHookHTTPPublish: POST /v1/publish asks the publish hook about what
// the token does not grant: p.# is allowed with the hook's data and
// headers, the rest refused with the hook's code as its HTTP status; a
// granted topic does not call the hook.
func TestHookHTTPPublish(t *testing.T) {
	b := appBackend(t)
	g := newGateway(t, withAuth(t), withHooks(b))
	admin := http.Header{"Authorization": {"Bearer " + adminKey}}
	for _, name := range []string{"p.x", "g.x"} {
		if st, body, _ := g.httpDoHeader(t, "POST", "/v1/topics", admin, map[string]any{"name": name}); st != http.StatusCreated {
			t.Fatalf("create %s: %d %v", name, st, body)
		}
	}
	user := http.Header{"Authorization": {"Bearer " + hs256(t, claims([]string{"g.#"}, nil, nil))}}

	st, body, _ := g.httpDoHeader(t, "POST", "/v1/publish", user, map[string]any{"topic": "g.x", "data": 1})
	if st != http.StatusOK || b.calls["publish"].Load() != 0 {
		t.Fatalf("granted publish: %d %v, hook calls %d", st, body, b.calls["publish"].Load())
	}

	st, body, _ = g.httpDoHeader(t, "POST", "/v1/publish", user, map[string]any{"topic": "p.x", "data": map[string]any{"n": 1}, "key": "k1"})
	if st != http.StatusOK {
		t.Fatalf("publish allowed by the hook: %d %v", st, body)
	}
	if got := b.last("publish"); got["user"] != "tester" || got["topic"] != "p.x" || got["key"] != "k1" || got["session"] != nil {
		t.Fatalf("publish hook body %v", got)
	}
	code, log, _ := g.httpDoHeader(t, "GET", "/v1/topics/p.x/messages?partition=0&from=0", admin, nil)
	msgs, _ := log["messages"].([]any)
	if code != http.StatusOK || len(msgs) != 1 {
		t.Fatalf("log of p.x: %d %v", code, log)
	}
	m := msgs[0].(map[string]any)
	data, _ := json.Marshal(m["data"])
	if hs, _ := m["headers"].(map[string]any); string(data) != `{"by":"tester","was":{"n":1}}` || hs["checked"] != "yes" {
		t.Fatalf("published record %v: want the hook's data and headers", m)
	}

	// The backend refuses q.# with rate_limited: the status of that code.
	st, body, _ = g.httpDoHeader(t, "POST", "/v1/publish", user, map[string]any{"topic": "q.x", "data": 1})
	if st != http.StatusTooManyRequests || body["code"] != "rate_limited" || body["message"] != "slow down" {
		t.Fatalf("publish refused by the hook: %d %v", st, body)
	}
	if n := b.calls["publish"].Load(); n != 2 {
		t.Fatalf("publish hook called %d times, want 2", n)
	}
	for outcome, want := range map[string]float64{"allow": 1, "refuse": 1} {
		if n := metricValue(t, g.reg, "switchyard_hook_calls_total", map[string]string{"hook": "publish", "outcome": outcome}); n != want {
			t.Errorf("hook_calls_total{publish,%s} = %v, want %v", outcome, n, want)
		}
	}

	// Without the publish hook the token alone decides, as before.
	plain := newGateway(t, withAuth(t), withHooks(b, func(o *router.HookOptions) { o.Publish = false }))
	if st, body, _ := plain.httpDoHeader(t, "POST", "/v1/publish", user, map[string]any{"topic": "p.x", "data": 1}); st != http.StatusForbidden {
		t.Fatalf("publish without the hook: %d %v", st, body)
	}
	if n := b.calls["publish"].Load(); n != 2 {
		t.Fatalf("a disabled publish hook was called (%d calls)", n)
	}
}

// TestHookSSE: an SSE stream without a token asks the connect hook (with
// the configured headers and cookies) and the subscribe hook for each
// pattern its grants do not allow, with the WebSocket's cache; a token's
// grants come first.
func TestHookSSE(t *testing.T) {
	b := appBackend(t)
	g := newGateway(t, withAuth(t), withHooks(b))

	for _, tc := range []struct {
		session string
		status  int
	}{{"bad", http.StatusForbidden}, {"expired", http.StatusUnauthorized}} {
		if s, st := openSSE(t, g.srv.URL, "/v1/sse?pattern=a.x", http.Header{"X-App-Session": {tc.session}}); s != nil || st != tc.status {
			t.Fatalf("SSE with session %q: status %d, want %d", tc.session, st, tc.status)
		}
	}
	connects := b.calls["connect"].Load()
	if connects != 2 {
		t.Fatalf("connect hook called %d times, want 2", connects)
	}

	// a.x by the hook's grants, b.x by the subscribe hook, c.x refused.
	s, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=a.x&pattern=b.x&pattern=c.x", appHeaders())
	s.nextEvent(t, "welcome")
	if ck, _ := b.last("connect")["cookies"].(map[string]any); ck["sid"] != "s1" || ck["other"] != nil {
		t.Fatalf("connect hook cookies %v", ck)
	}
	s.nextEvent(t, "subscribed")
	s.nextEvent(t, "subscribed")
	if ev := s.nextEvent(t, "error"); ev.frame["code"] != "forbidden" || ev.frame["message"] != "not in c.x" {
		t.Fatalf("refused pattern: %s", ev.data)
	}
	if n := b.calls["subscribe"].Load(); n != 2 {
		t.Fatalf("subscribe hook called %d times, want 2 (b.x, c.x)", n)
	}
	if got := b.last("subscribe"); got["user"] != "ann" || got["pattern"] != "c.x" {
		t.Fatalf("subscribe hook body %v", got)
	}
	s2, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=b.x", appHeaders())
	s2.nextEvent(t, "welcome")
	s2.nextEvent(t, "subscribed")
	if n := b.calls["subscribe"].Load(); n != 2 {
		t.Fatalf("subscribe hook called %d times, want 2 (b.x cached)", n)
	}

	// A token that grants: neither hook is called.
	tok := url.QueryEscape(hs256(t, claims(nil, []string{"c.#"}, nil)))
	s3, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=c.x&token="+tok, appHeaders())
	s3.nextEvent(t, "welcome")
	s3.nextEvent(t, "subscribed")
	if c, n := b.calls["connect"].Load(), b.calls["subscribe"].Load(); c != connects+2 || n != 2 {
		t.Fatalf("with a granting token: connect calls %d (want %d), subscribe calls %d (want 2)", c, connects+2, n)
	}
}
