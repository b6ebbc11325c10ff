package router_test

import (
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/json"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/switchyard/switchyard/router"
)

// jwkOf renders a public key as a JWK with the given kid.
func jwkOf(kid string, k any) map[string]any {
	switch k := k.(type) {
	case *rsa.PublicKey:
		return map[string]any{"kty": "RSA", "kid": kid, "use": "sig", "alg": "RS256",
			"n": b64(k.N.Bytes()), "e": b64(big.NewInt(int64(k.E)).Bytes())}
	case *ecdsa.PublicKey:
		size := (k.Curve.Params().BitSize + 7) / 8
		return map[string]any{"kty": "EC", "kid": kid, "crv": k.Curve.Params().Name,
			"x": b64(k.X.FillBytes(make([]byte, size))), "y": b64(k.Y.FillBytes(make([]byte, size)))}
	}
	panic("unsupported key")
}

// idp is an identity provider's JWKS endpoint whose key set and health the
// test changes.
type idp struct {
	srv     *httptest.Server
	fetches atomic.Int32
	failing atomic.Bool
	mu      sync.Mutex // guards keys
	keys    []map[string]any
}

func newIDP(t *testing.T, keys ...map[string]any) *idp {
	p := &idp{keys: keys}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.fetches.Add(1)
		if p.failing.Load() {
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		_ = json.NewEncoder(w).Encode(map[string]any{"keys": p.keys})
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *idp) setKeys(keys ...map[string]any) {
	p.mu.Lock()
	p.keys = keys
	p.mu.Unlock()
}

// idpToken signs claims for the audience and issuer of withIDP with kid.
func idpToken(t *testing.T, method jwt.SigningMethod, key any, kid string, mods ...func(jwt.MapClaims)) string {
	t.Helper()
	c := claims([]string{"a.#"}, []string{"a.#"}, nil)
	c["aud"] = []string{"switchyard"}
	c["iss"] = "https://idp.test/"
	for _, m := range mods {
		m(c)
	}
	tok := jwt.NewWithClaims(method, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func withIDP(p *idp, mods ...func(*router.AuthOptions)) func(*gwConfig) {
	return func(c *gwConfig) {
		c.router.Auth = router.AuthOptions{
			JWKSURL:         p.srv.URL,
			JWKSMinInterval: time.Nanosecond,
			Audience:        "switchyard",
			Issuer:          "https://idp.test/",
			AdminKey:        adminKey,
		}
		for _, m := range mods {
			m(&c.router.Auth)
		}
	}
}

func TestJWKSKidAudienceIssuer(t *testing.T) {
	rk := testRSA(t)
	other := mustEC()
	p := newIDP(t, jwkOf("r1", &rk.PublicKey), jwkOf("e1", &ecKey.PublicKey))
	g := newGateway(t, withIDP(p))
	for _, tt := range []struct {
		name  string
		token string
		want  int
	}{
		{"RS256 by kid", idpToken(t, jwt.SigningMethodRS256, rk, "r1"), http.StatusOK},
		{"ES256 by kid", idpToken(t, jwt.SigningMethodES256, ecKey, "e1"), http.StatusOK},
		{"ES256 without kid", idpToken(t, jwt.SigningMethodES256, ecKey, ""), http.StatusOK},
		{"kid of another key", idpToken(t, jwt.SigningMethodES256, other, "e1"), http.StatusUnauthorized},
		{"kid of another algorithm", idpToken(t, jwt.SigningMethodES256, ecKey, "r1"), http.StatusUnauthorized},
		{"unknown kid", idpToken(t, jwt.SigningMethodES256, other, "nope"), http.StatusUnauthorized},
		{"no audience", idpToken(t, jwt.SigningMethodES256, ecKey, "e1", func(c jwt.MapClaims) { delete(c, "aud") }), http.StatusUnauthorized},
		{"other audience", idpToken(t, jwt.SigningMethodES256, ecKey, "e1", func(c jwt.MapClaims) { c["aud"] = "else" }), http.StatusUnauthorized},
		{"other issuer", idpToken(t, jwt.SigningMethodES256, ecKey, "e1", func(c jwt.MapClaims) { c["iss"] = "https://evil.test/" }), http.StatusUnauthorized},
		{"HS256 is not accepted", hs256(t, claims(nil, []string{"#"}, nil)), http.StatusUnauthorized},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st, _ := g.httpAuth(t, "GET", "/v1/topics", tt.token, nil)
			if st != tt.want {
				t.Fatalf("status %d, want %d", st, tt.want)
			}
		})
	}
}

// TestJWKSRotationMidSession: the provider rotates to a new key; a session
// refreshes with a token of the new kid (the gateway reads the set again on
// the unknown kid) and stays open once the old key is retired, tokens of
// the retired key are refused, and a provider outage keeps the last good
// set.
func TestJWKSRotationMidSession(t *testing.T) {
	k1, k2 := mustEC(), mustEC()
	p := newIDP(t, jwkOf("k1", &k1.PublicKey))
	g := newGateway(t, withIDP(p, func(a *router.AuthOptions) { a.JWKSRefresh = 20 * time.Millisecond }))
	c := g.dialToken(t, idpToken(t, jwt.SigningMethodES256, k1, "k1"))
	c.subscribe(t, "a.x")

	// As providers rotate: the new key is published beside the old one,
	// the session refreshes onto it, then the old one is retired (a
	// refresh that drops it ends the sessions still on it, see
	// TestJWKSRefreshDropEndsSessions).
	p.setKeys(jwkOf("k1", &k1.PublicKey), jwkOf("k2", &k2.PublicKey))
	c.mustOK(t, map[string]any{"op": "refresh", "token": idpToken(t, jwt.SigningMethodES256, k2, "k2")}, "refreshed")
	p.setKeys(jwkOf("k2", &k2.PublicKey))
	for i := 0; ; i++ {
		st, _ := g.httpAuth(t, "GET", "/v1/topics", idpToken(t, jwt.SigningMethodES256, k1, "k1"), nil)
		if st == http.StatusUnauthorized {
			break
		}
		if i > 1000 {
			t.Fatalf("token of the retired key: %d", st)
		}
		time.Sleep(5 * time.Millisecond)
	}
	g.rt.WaitRechecks()
	c.publish(t, "a.x", 1)
	c.nextOp(t, "message")

	p.failing.Store(true)
	// The provider counts a fetch when the request arrives, the gateway
	// its error once it has read the response: the gateway's count is the
	// one to wait for, the provider's tells a gateway that stopped
	// fetching from one that fetched and did not count the errors.
	before := p.fetches.Load()
	failed := map[string]string{"outcome": "error"}
	deadline := time.Now().Add(waitTimeout)
	for n := 0.0; n < 3; n = metricValue(t, g.reg, "switchyard_jwks_fetches_total", failed) {
		if time.Now().After(deadline) {
			t.Fatalf("the key set is not refreshed periodically: %d fetches while the provider fails, jwks_fetches_total{error} = %v",
				p.fetches.Load()-before, n)
		}
		time.Sleep(5 * time.Millisecond) // polling a counter: no event to wait on
	}
	if st, _ := g.httpAuth(t, "GET", "/v1/topics", idpToken(t, jwt.SigningMethodES256, k2, "k2"), nil); st != http.StatusOK {
		t.Fatalf("after failed fetches the last good set is gone: %d", st)
	}
}

// TestJWKSUnknownKidRateLimited: tokens naming unknown kids cause at most
// one fetch per JWKSMinInterval.
func TestJWKSUnknownKidRateLimited(t *testing.T) {
	p := newIDP(t, jwkOf("e1", &ecKey.PublicKey))
	g := newGateway(t, withIDP(p, func(a *router.AuthOptions) { a.JWKSMinInterval = time.Hour }))
	start := p.fetches.Load()
	for i := range 5 {
		tok := idpToken(t, jwt.SigningMethodES256, ecKey, "unknown-"+string(rune('a'+i)))
		if st, _ := g.httpAuth(t, "GET", "/v1/topics", tok, nil); st != http.StatusUnauthorized {
			t.Fatalf("unknown kid: %d", st)
		}
	}
	if n := p.fetches.Load() - start; n != 0 {
		t.Fatalf("%d fetches within the minimum interval", n)
	}
	if n := metricValue(t, g.reg, "switchyard_jwks_fetches_total", map[string]string{"outcome": "rate_limited"}); n != 5 {
		t.Fatalf("jwks_fetches_total{rate_limited} = %v, want 5", n)
	}
}

func TestJWKSFileAndClaimPrefix(t *testing.T) {
	rk := testRSA(t)
	data, _ := json.Marshal(map[string]any{"keys": []any{
		jwkOf("r1", &rk.PublicKey),
		map[string]any{"kty": "oct", "kid": "sym", "k": "c2VjcmV0"}, // skipped
		map[string]any{"kty": "RSA", "kid": "enc", "use": "enc", "n": "AQAB", "e": "AQAB"},
	}})
	file := filepath.Join(t.TempDir(), "jwks.json")
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	const prefix = "https://switchyard.test/"
	g := newGateway(t, func(c *gwConfig) {
		c.router.Auth = router.AuthOptions{JWKSFile: file, Claims: router.ClaimNames{Prefix: prefix}}
	})
	tok := idpToken(t, jwt.SigningMethodRS256, rk, "r1", func(c jwt.MapClaims) {
		delete(c, "subscribe")
		c[prefix+"subscribe"] = []string{"b.#"}
	})
	c := g.dialToken(t, tok)
	c.subscribe(t, "b.x")
	if e := c.call(t, map[string]any{"op": "subscribe", "pattern": "a.x"}); e["code"] != "forbidden" {
		t.Fatalf("the unprefixed claim granted a subscription: %v", e)
	}

	// A file without a usable key is a configuration error.
	bad := filepath.Join(t.TempDir(), "bad.json")
	_ = os.WriteFile(bad, []byte(`{"keys":[{"kty":"oct","k":"eA"}]}`), 0o600)
	if _, err := router.New(router.Options{Engine: nopEngine(t), Auth: router.AuthOptions{JWKSFile: bad}}); err == nil {
		t.Fatal("New with a JWKS file without keys succeeded")
	}
}
