package router_test

import (
	"net/http"
	"regexp"
	"strconv"
	"testing"

	"github.com/golang-jwt/jwt/v5"

	"github.com/switchyard/switchyard/router"
)

// sample reads one unlabelled-or-exactly-labelled sample of g's /metrics
// text ("name" or `name{a="b"}`); -1 when the series is absent.
func (g *gateway) sample(t *testing.T, series string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(g.scrape(t))
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatalf("%s: %v", series, err)
	}
	return v
}

// TestReloadRemovedHookGauges: the gauges of the hook client a reload
// removed go back to zero in /metrics (they showed the removed client's
// last cache size and calls in flight).
func TestReloadRemovedHookGauges(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, _ *http.Request, _ string, _ map[string]any) {
		reply(w, map[string]any{"allow": true, "cache_ttl_ms": 60000})
	})
	authOpts := router.AuthOptions{HMACSecrets: [][]byte{hmacSecret}, AdminKey: adminKey}
	g := newGateway(t, func(c *gwConfig) { c.router.Auth = authOpts }, withHooks(b, func(h *router.HookOptions) {
		h.Connect, h.Publish = false, false
	}))
	c := g.dialToken(t, hs256(t, claims(nil, []string{"a.#"}, nil)))
	c.subscribe(t, "b.x") // outside the grants: the subscribe hook allows and caches
	if n := b.calls["subscribe"].Load(); n != 1 {
		t.Fatalf("subscribe hook calls %d, want 1", n)
	}
	if v := g.sample(t, "switchyard_hook_cache_entries"); v != 1 {
		t.Fatalf("hook_cache_entries with one cached answer: %v", v)
	}
	if err := g.rt.Reload(router.Options{Auth: authOpts}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"switchyard_hook_cache_entries", "switchyard_hook_in_flight"} {
		if v := g.sample(t, s); v != 0 {
			t.Errorf("%s after a reload removed the hooks: %v, want 0", s, v)
		}
	}
}

// TestReloadKeepsJWKSCounters: switchyard_jwks_fetches_total goes on
// across a reload that replaces the key set; it counted the new set's
// fetches only, starting again near zero, which Prometheus reads as a
// counter reset.
func TestReloadKeepsJWKSCounters(t *testing.T) {
	p := newIDP(t, jwkOf("e1", &ecKey.PublicKey))
	g := newGateway(t, withIDP(p))
	// Tokens naming unknown kids make the set be read again (the minimum
	// interval is a nanosecond here): four more fetches.
	for i := range 4 {
		tok := idpToken(t, jwt.SigningMethodES256, ecKey, "unknown-"+strconv.Itoa(i))
		if st, _ := g.httpAuth(t, http.MethodGet, "/v1/topics", tok, nil); st != http.StatusUnauthorized {
			t.Fatalf("unknown kid: %d", st)
		}
	}
	p.failing.Store(true)
	tok := idpToken(t, jwt.SigningMethodES256, ecKey, "unknown-failing")
	if st, _ := g.httpAuth(t, http.MethodGet, "/v1/topics", tok, nil); st != http.StatusUnauthorized {
		t.Fatalf("unknown kid: %d", st)
	}
	p.failing.Store(false)
	ok := `switchyard_jwks_fetches_total{outcome="ok"}`
	failed := `switchyard_jwks_fetches_total{outcome="error"}`
	okBefore, failedBefore := g.sample(t, ok), g.sample(t, failed)
	if okBefore < 5 || failedBefore < 1 {
		t.Fatalf("before the reload: ok %v, error %v; want at least 5 and 1", okBefore, failedBefore)
	}
	if err := g.rt.Reload(router.Options{Auth: router.AuthOptions{JWKSURL: p.srv.URL, JWKSMinInterval: 1,
		Audience: "switchyard", Issuer: "https://idp.test/", AdminKey: adminKey}}); err != nil {
		t.Fatal(err)
	}
	// The reload read the new set once.
	if v := g.sample(t, ok); v < okBefore+1 {
		t.Errorf("%s after the reload: %v, want at least %v", ok, v, okBefore+1)
	}
	if v := g.sample(t, failed); v < failedBefore {
		t.Errorf("%s after the reload: %v, want at least %v", failed, v, failedBefore)
	}
}
