package router_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"github.com/switchyard/switchyard/router"
)

// TestReloadRotatesKeys: after a reload with a new HMAC secret, a token
// signed with the new secret is admitted and one signed with the old is
// refused, over WebSocket and HTTP, and the session admitted with the old
// token is closed (1008) while one opened with the new token works.
func TestReloadRotatesKeys(t *testing.T) {
	oldSecret := []byte("the-old-secret-0123456789abcdef-0123")
	newSecret := []byte("the-new-secret-0123456789abcdef-0123")
	opts := func(secret []byte) router.Options {
		return router.Options{Auth: router.AuthOptions{HMACSecrets: [][]byte{secret}, AdminKey: adminKey}}
	}
	g := newGateway(t, func(c *gwConfig) { c.router.Auth = opts(oldSecret).Auth })
	tok := func(secret []byte) string {
		return sign(t, jwt.SigningMethodHS256, secret, claims([]string{"orders.#"}, []string{"orders.#"}, nil))
	}
	oldTok := tok(oldSecret)
	ended := g.dialToken(t, oldTok)
	ended.subscribe(t, "orders.#")

	if err := g.rt.Reload(opts(newSecret)); err != nil {
		t.Fatal(err)
	}
	if st, body, _ := g.dialRefused(t, "token="+oldTok, nil); st != http.StatusUnauthorized || body["code"] != "unauthorized" {
		t.Fatalf("old token after the rotation: %d %v", st, body)
	}
	if st, _ := g.httpAuth(t, http.MethodGet, "/v1/topics", oldTok, nil); st != http.StatusUnauthorized {
		t.Fatalf("old token over HTTP after the rotation: %d", st)
	}
	fresh := g.dialToken(t, tok(newSecret))
	if st, _ := g.httpAuth(t, http.MethodGet, "/v1/topics", tok(newSecret), nil); st != http.StatusOK {
		t.Fatalf("new token over HTTP: %d", st)
	}
	// The session admitted with the old token is closed by the reload.
	closedWith(t, ended, websocket.StatusPolicyViolation, router.CloseCredentialRefusedReason)
	fresh.subscribe(t, "orders.#")
	fresh.publish(t, "orders.b", 2)
	if m := fresh.nextOp(t, "message"); m["topic"] != "orders.b" {
		t.Fatalf("fresh session: %v", m)
	}
}

// TestReloadLowersLimits: a lowered connection limit refuses the next
// connect, counting the sessions already open, which stay; a lowered
// subscription limit applies to sessions opened after the reload, while a
// session opened before keeps the limit its welcome announced.
func TestReloadLowersLimits(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.MaxConnections = 10; c.router.MaxSubscriptions = 5 })
	before := g.dial(t)
	g.dial(t)
	if err := g.rt.Reload(router.Options{MaxConnections: 3, MaxSubscriptions: 1}); err != nil {
		t.Fatal(err)
	}
	after := g.dial(t) // the third of 3
	if got := num(after.welcome["limits"].(map[string]any), "max_subscriptions"); got != 1 {
		t.Fatalf("welcome after the reload: max_subscriptions %d, want 1", got)
	}
	if st, body, _ := g.dialRefused(t, "", nil); st != http.StatusServiceUnavailable || body["code"] != "too_many_connections" {
		t.Fatalf("fourth session after lowering the limit to 3: %d %v", st, body)
	}
	after.subscribe(t, "a.x")
	if r := after.call(t, map[string]any{"op": "subscribe", "pattern": "a.y"}); r["code"] != "too_many_subscriptions" {
		t.Fatalf("second subscription of a session opened after the reload: %v", r)
	}
	before.subscribe(t, "a.x")
	before.subscribe(t, "a.y") // admitted with 5
	// The sessions opened before are still open.
	before.publish(t, "a.y", 1)
	before.nextOp(t, "message")
	before.conn.Close(websocket.StatusNormalClosure, "")
	<-before.done
	waitUntil(t, "a slot frees up", func() bool { return g.dialHeader(t, nil) == 101 })
}

// TestReloadRefusedKeepsSettings: a reload whose keys do not check (an
// HMAC secret too short, hooks without a URL) is refused with the reason,
// and the running keys and limits stay.
func TestReloadRefusedKeepsSettings(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts router.Options
		want string
	}{
		{"short secret", router.Options{Auth: router.AuthOptions{HMACSecrets: [][]byte{[]byte("short")}}, MaxConnections: 1}, "at least 32"},
		{"hooks without a URL", router.Options{Auth: router.AuthOptions{HMACSecrets: [][]byte{hmacSecret}}, Hooks: router.HookOptions{Connect: true}, MaxConnections: 1}, "URL is empty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newGateway(t, func(c *gwConfig) {
				c.router.Auth = router.AuthOptions{HMACSecrets: [][]byte{hmacSecret}, AdminKey: adminKey}
				c.router.MaxConnections = 2
			})
			err := g.rt.Reload(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Reload: %v, want an error with %q", err, tt.want)
			}
			// The old secret still admits; the connection limit is still 2.
			tok := hs256(t, claims(nil, []string{"#"}, nil))
			g.dialToken(t, tok)
			g.dialToken(t, tok)
			if st, body, _ := g.dialRefused(t, "token="+tok, nil); st != http.StatusServiceUnavailable {
				t.Fatalf("third session: %d %v", st, body)
			}
			if st, _ := g.httpAuth(t, http.MethodGet, "/v1/topics", adminKey, nil); st != http.StatusOK {
				t.Fatalf("admin key after the refused reload: %d", st)
			}
		})
	}
}

// TestReloadOrigins: an origin added by a reload may open a WebSocket.
func TestReloadOrigins(t *testing.T) {
	g := newGateway(t)
	h := http.Header{"Origin": {"https://app.example"}}
	if st := g.dialHeader(t, h); st != http.StatusForbidden {
		t.Fatalf("foreign origin before the reload: %d", st)
	}
	if err := g.rt.Reload(router.Options{OriginPatterns: []string{"app.example"}}); err != nil {
		t.Fatal(err)
	}
	if st := g.dialHeader(t, h); st != http.StatusSwitchingProtocols {
		t.Fatalf("allowed origin after the reload: %d", st)
	}
}

// TestAdminReload: POST /v1/admin/reload needs the admin key, answers the
// Reloader's report, and a refusal is a 400 with the reason; without a
// Reloader it is 404.
func TestAdminReload(t *testing.T) {
	var fail error
	g := newGateway(t, func(c *gwConfig) {
		c.router.Auth = router.AuthOptions{HMACSecrets: [][]byte{hmacSecret}, AdminKey: adminKey}
		c.router.Reloader = func(context.Context) (router.ReloadReport, error) {
			if fail != nil {
				return router.ReloadReport{}, fail
			}
			return router.ReloadReport{Reloaded: []string{"max-connections"}, Unchanged: []string{"addr"}}, nil
		}
	})
	tok := hs256(t, claims([]string{"#"}, []string{"#"}, nil))
	if st, body := g.httpAuth(t, http.MethodPost, "/v1/admin/reload", tok, map[string]any{}); st != http.StatusForbidden {
		t.Fatalf("reload with a token: %d %v", st, body)
	}
	st, body := g.httpAuth(t, http.MethodPost, "/v1/admin/reload", adminKey, map[string]any{})
	if st != http.StatusOK || body["reloaded"].([]any)[0] != "max-connections" {
		t.Fatalf("reload: %d %v", st, body)
	}
	fail = errors.New("reload refused, keeping the running settings: addr cannot change while the gateway runs")
	st, body = g.httpAuth(t, http.MethodPost, "/v1/admin/reload", adminKey, map[string]any{})
	if st != http.StatusBadRequest || body["code"] != "bad_request" || !strings.Contains(body["message"].(string), "addr cannot change") {
		t.Fatalf("refused reload: %d %v", st, body)
	}

	plain := newGateway(t)
	if st, body, _ := plain.httpDo(t, http.MethodPost, "/v1/admin/reload", map[string]any{}); st != http.StatusNotFound || body["code"] != "not_found" {
		t.Fatalf("reload without a Reloader: %d %v", st, body)
	}
}

// TestReloadHooks: a connect hook added by a reload is asked about the
// next connect, and one removed by a reload is not asked again.
func TestReloadHooks(t *testing.T) {
	var calls atomic.Int64
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"allow":true,"user":"ann"}`)
	}))
	defer hook.Close()
	g := newGateway(t)
	g.dial(t)
	if n := calls.Load(); n != 0 {
		t.Fatalf("hook calls before the reload: %d", n)
	}
	if err := g.rt.Reload(router.Options{Hooks: router.HookOptions{URL: hook.URL, Connect: true}}); err != nil {
		t.Fatal(err)
	}
	g.dial(t)
	if n := calls.Load(); n != 1 {
		t.Fatalf("hook calls after a reload added the hook: %d, want 1", n)
	}
	if err := g.rt.Reload(router.Options{}); err != nil {
		t.Fatal(err)
	}
	g.dial(t)
	if n := calls.Load(); n != 1 {
		t.Fatalf("hook calls after a reload removed the hook: %d, want 1", n)
	}
}

// TestReloadUnderLoad: reloads that swap keys and limits while sessions
// publish and receive neither end a session nor lose a reply or a
// message (and -race sees no unguarded read of the settings).
func TestReloadUnderLoad(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) {
		c.router.Auth = router.AuthOptions{HMACSecrets: [][]byte{hmacSecret}, AdminKey: adminKey}
	})
	tok := hs256(t, claims([]string{"load.#"}, []string{"load.#"}, nil))
	const sessions, publishes, reloads = 4, 50, 40
	subs := make([]*client, sessions)
	for i := range subs {
		subs[i] = g.dialToken(t, tok)
		subs[i].subscribe(t, "load.#")
	}
	done := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		defer close(done)
		for i := range reloads {
			secrets := [][]byte{hmacSecret}
			if i%2 == 1 {
				secrets = append(secrets, []byte("another-secret-0123456789abcdef-0123"))
			}
			if err := g.rt.Reload(router.Options{Auth: router.AuthOptions{HMACSecrets: secrets, AdminKey: adminKey},
				MaxConnections: 100 + i, MaxSubscriptions: 10 + i, OriginPatterns: []string{"a.example"}}); err != nil {
				errc <- err
				return
			}
		}
	}()
	pub := g.dialToken(t, tok)
	for i := range publishes {
		pub.publish(t, "load.x", i)
	}
	<-done
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
	for _, c := range subs {
		for i := range publishes {
			if m := c.nextOp(t, "message"); m["data"] != float64(i) {
				t.Fatalf("message %d: %v", i, m)
			}
		}
	}
	// A session opened after the reloads sees the last limits.
	last := g.dialToken(t, tok)
	if got := num(last.welcome["limits"].(map[string]any), "max_subscriptions"); got != 10+reloads-1 {
		t.Fatalf("max_subscriptions after the reloads: %d", got)
	}
}

// TestReloadJWKSURL: a reload to another identity provider's JWKS URL
// admits its tokens and refuses the first provider's; a reload to a URL
// that does not answer is refused with the reason and the running key set
// stays; the refresh goroutine of each replaced key set ends (goleak).
func TestReloadJWKSURL(t *testing.T) {
	k1, k2 := testRSA(t), mustEC()
	p1 := newIDP(t, jwkOf("one", &k1.PublicKey))
	p2 := newIDP(t, jwkOf("two", &k2.PublicKey))
	g := newGateway(t, withIDP(p1))
	tok1 := idpToken(t, jwt.SigningMethodRS256, k1, "one")
	tok2 := idpToken(t, jwt.SigningMethodES256, k2, "two")
	opts := func(url string) router.Options {
		return router.Options{Auth: router.AuthOptions{JWKSURL: url, JWKSMinInterval: time.Nanosecond,
			Audience: "switchyard", Issuer: "https://idp.test/", AdminKey: adminKey}}
	}
	if st, _ := g.httpAuth(t, http.MethodGet, "/v1/topics", tok1, nil); st != http.StatusOK {
		t.Fatalf("first provider's token: %d", st)
	}
	if err := g.rt.Reload(opts(p2.srv.URL)); err != nil {
		t.Fatal(err)
	}
	if st, _ := g.httpAuth(t, http.MethodGet, "/v1/topics", tok2, nil); st != http.StatusOK {
		t.Fatalf("second provider's token after the reload: %d", st)
	}
	if st, _ := g.httpAuth(t, http.MethodGet, "/v1/topics", tok1, nil); st != http.StatusUnauthorized {
		t.Fatalf("first provider's token after the reload: %d", st)
	}
	p1.failing.Store(true)
	err := g.rt.Reload(opts(p1.srv.URL))
	if err == nil || !strings.Contains(err.Error(), "could not be read") {
		t.Fatalf("reload to a failing JWKS URL: %v", err)
	}
	if st, _ := g.httpAuth(t, http.MethodGet, "/v1/topics", tok2, nil); st != http.StatusOK {
		t.Fatalf("second provider's token after the refused reload: %d", st)
	}
}
