package router_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

// Test keys. The RSA key is generated once: it takes a while under -race.
var (
	hmacSecret = []byte("0123456789abcdef0123456789abcdef-test")
	adminKey   = "admin-key-for-tests-only"

	rsaOnce sync.Once
	rsaKey  *rsa.PrivateKey
	ecKey   = mustEC()
)

func testRSA(t *testing.T) *rsa.PrivateKey {
	t.Helper()
	rsaOnce.Do(func() {
		k, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		rsaKey = k
	})
	return rsaKey
}

func mustEC() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}

// claims builds a token payload valid for a minute with the given grants.
func claims(pub, sub, groups []string) jwt.MapClaims {
	now := time.Now()
	m := jwt.MapClaims{"sub": "tester", "iat": now.Unix(), "exp": now.Add(time.Minute).Unix()}
	if pub != nil {
		m["publish"] = pub
	}
	if sub != nil {
		m["subscribe"] = sub
	}
	if groups != nil {
		m["groups"] = groups
	}
	return m
}

func sign(t *testing.T, method jwt.SigningMethod, key any, c jwt.Claims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(method, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hs256(t *testing.T, c jwt.Claims) string { return sign(t, jwt.SigningMethodHS256, hmacSecret, c) }

// withAuth configures every key type, the admin key and no anonymous access.
func withAuth(t *testing.T) func(*gwConfig) {
	rk := testRSA(t)
	return func(c *gwConfig) {
		c.router.Auth = router.AuthOptions{
			HMACSecrets: [][]byte{[]byte("an-older-secret-still-accepted-0123456789"), hmacSecret},
			PublicKeys:  []crypto.PublicKey{&rk.PublicKey, &ecKey.PublicKey},
			AdminKey:    adminKey,
		}
	}
}

// dialToken opens a session with ?token=; it fails the test unless the
// welcome arrives.
func (g *gateway) dialToken(t *testing.T, token string) *client {
	t.Helper()
	c := g.dialWith(t, "?token="+url.QueryEscape(token), nil)
	c.welcome = c.next(t)
	if c.welcome["op"] != "welcome" {
		t.Fatalf("first frame = %v, want welcome", c.welcome)
	}
	return c
}

// dialRefused expects the upgrade to be refused and returns the HTTP status
// and the JSON error body.
func (g *gateway) dialRefused(t *testing.T, rawQuery string, h http.Header) (int, map[string]any, http.Header) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	u := g.wsURL()
	if rawQuery != "" {
		u += "?" + rawQuery
	}
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPHeader: h})
	if err == nil {
		conn.CloseNow()
		t.Fatal("upgrade succeeded; want it refused")
	}
	if resp == nil {
		t.Fatalf("dial: %v (no HTTP response)", err)
	}
	var body map[string]any
	if resp.Body != nil {
		data, _ := io.ReadAll(resp.Body)
		_ = json.Unmarshal(data, &body)
	}
	return resp.StatusCode, body, resp.Header
}

// httpAuth sends a JSON request with Authorization: Bearer cred ("" for
// none).
func (g *gateway) httpAuth(t *testing.T, method, path, cred string, body any) (int, map[string]any) {
	t.Helper()
	h := http.Header{}
	if cred != "" {
		h.Set("Authorization", "Bearer "+cred)
	}
	code, m, _ := g.httpDoHeader(t, method, path, h, body)
	return code, m
}

// metricValue sums the samples of a counter or gauge whose labels include
// the given ones.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func TestAuthValidTokens(t *testing.T) {
	g := newGateway(t, withAuth(t))
	c := claims([]string{"orders.#"}, []string{"orders.#"}, nil)
	for _, tt := range []struct {
		name  string
		token string
	}{
		{"HS256", hs256(t, c)},
		{"HS256 older secret", sign(t, jwt.SigningMethodHS256, []byte("an-older-secret-still-accepted-0123456789"), c)},
		{"RS256", sign(t, jwt.SigningMethodRS256, testRSA(t), c)},
		{"ES256", sign(t, jwt.SigningMethodES256, ecKey, c)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cl := g.dialToken(t, tt.token)
			cl.subscribe(t, "orders.*")
			cl.publish(t, "orders.new", map[string]any{"n": 1})
			if m := cl.nextOp(t, "message"); m["topic"] != "orders.new" {
				t.Fatalf("message = %v", m)
			}
			// The same token as a bearer on the HTTP API.
			if st, m := g.httpAuth(t, "POST", "/v1/publish", tt.token, map[string]any{"topic": "orders.http", "data": 1}); st != 200 {
				t.Fatalf("HTTP publish: %d %v", st, m)
			}
		})
	}
}

func TestAuthRefusedTokens(t *testing.T) {
	otherRSA, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	rk := testRSA(t)
	now := time.Now()
	good := claims(nil, []string{"#"}, nil)
	expired := claims(nil, []string{"#"}, nil)
	expired["exp"] = now.Add(-time.Minute).Unix()
	future := claims(nil, []string{"#"}, nil)
	future["nbf"] = now.Add(time.Hour).Unix()
	noExp := claims(nil, []string{"#"}, nil)
	delete(noExp, "exp")
	badPattern := claims(nil, []string{"a*"}, nil)
	subAsList := claims(nil, nil, nil)
	subAsList["subscribe"] = "#" // a string, not a list

	// An HS256 token signed with the RSA public key's bytes: the classic
	// algorithm confusion attack on a server that only has RSA keys.
	pubDER, err := x509.MarshalPKIXPublicKey(&rk.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	pubPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pubDER})
	unsigned := strings.TrimSuffix(sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, good), ".") + "."

	rsaOnly := func(c *gwConfig) {
		c.router.Auth = router.AuthOptions{PublicKeys: []crypto.PublicKey{&rk.PublicKey}}
	}
	tests := []struct {
		name   string
		config func(*gwConfig)
		token  string
		reason string
	}{
		{"no token", withAuth(t), "", "missing"},
		{"garbage", withAuth(t), "not-a-jwt", "invalid"},
		{"wrong HMAC secret", withAuth(t), sign(t, jwt.SigningMethodHS256, []byte("a-wrong-secret-of-enough-length-000000"), good), "invalid"},
		{"wrong RSA key", withAuth(t), sign(t, jwt.SigningMethodRS256, otherRSA, good), "invalid"},
		{"tampered payload", withAuth(t), tamper(t, hs256(t, good)), "invalid"},
		{"expired", withAuth(t), hs256(t, expired), "expired"},
		{"not yet valid", withAuth(t), hs256(t, future), "not_yet_valid"},
		{"no exp", withAuth(t), hs256(t, noExp), "invalid"},
		{"alg none", withAuth(t), unsigned, "invalid"},
		{"HS384 not configured", withAuth(t), sign(t, jwt.SigningMethodHS384, hmacSecret, good), "invalid"},
		{"HS256 when only RSA", rsaOnly, sign(t, jwt.SigningMethodHS256, hmacSecret, good), "invalid"},
		{"HS256 keyed by the RSA public key", rsaOnly, sign(t, jwt.SigningMethodHS256, pubPEM, good), "invalid"},
		{"invalid pattern in claims", withAuth(t), hs256(t, badPattern), "invalid_claims"},
		{"claim of the wrong type", withAuth(t), hs256(t, subAsList), "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newGateway(t, tt.config)
			q := ""
			if tt.token != "" {
				q = "token=" + url.QueryEscape(tt.token)
			}
			st, body, h := g.dialRefused(t, q, nil)
			if st != http.StatusUnauthorized || body["code"] != "unauthorized" {
				t.Fatalf("upgrade: %d %v, want 401 unauthorized", st, body)
			}
			if !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate = %q", h.Get("WWW-Authenticate"))
			}
			msg, _ := body["message"].(string)
			for _, leak := range []string{"crypto", "signature is invalid", "key", "token is malformed", "illegal base64"} {
				if strings.Contains(msg, leak) {
					t.Errorf("message %q leaks %q", msg, leak)
				}
			}
			st, body = g.httpAuth(t, "GET", "/v1/topics", tt.token, nil)
			if st != http.StatusUnauthorized || body["code"] != "unauthorized" {
				t.Fatalf("HTTP: %d %v, want 401 unauthorized", st, body)
			}
			if got := metricValue(t, g.reg, "switchyard_auth_failures_total", map[string]string{"reason": tt.reason}); got != 2 {
				t.Errorf("auth_failures_total{reason=%q} = %v, want 2", tt.reason, got)
			}
		})
	}
}

// tamper flips the payload to grant more without re-signing.
func tamper(t *testing.T, token string) string {
	t.Helper()
	parts := strings.Split(token, ".")
	payload, _ := json.Marshal(claims([]string{"#"}, []string{"#"}, []string{"#"}))
	parts[1] = strings.TrimRight(b64(payload), "=")
	return strings.Join(parts, ".")
}

func b64(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

// nopEngine is an engine for Routers that are never served.
func nopEngine(t *testing.T) *memengine.Engine {
	e := memengine.New(memengine.Options{})
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return e
}

func TestAuthPermissionsWebSocket(t *testing.T) {
	g := newGateway(t, withAuth(t))
	tok := hs256(t, claims(
		[]string{"orders.*.eu", "chat.#"},
		[]string{"orders.#", "$sys.stats"},
		[]string{"billing", "team.*"},
	))
	c := g.dialToken(t, tok)
	tests := []struct {
		name string
		req  map[string]any
		want string // reply op, or error code
	}{
		{"subscribe covered by wildcard", map[string]any{"op": "subscribe", "pattern": "orders.*.eu"}, "subscribed"},
		{"subscribe exact system topic", map[string]any{"op": "subscribe", "pattern": "$sys.stats"}, "subscribed"},
		{"subscribe outside", map[string]any{"op": "subscribe", "pattern": "payments.#"}, "forbidden"},
		{"subscribe wider than grant", map[string]any{"op": "subscribe", "pattern": "#"}, "forbidden"},
		{"subscribe other system topic", map[string]any{"op": "subscribe", "pattern": "$sys.groups"}, "forbidden"},
		{"publish matched", map[string]any{"op": "publish", "topic": "orders.new.eu", "data": 1}, "published"},
		{"publish deep", map[string]any{"op": "publish", "topic": "chat.room.1", "data": 1}, "published"},
		{"publish outside", map[string]any{"op": "publish", "topic": "orders.new.us", "data": 1}, "forbidden"},
		{"join allowed group", map[string]any{"op": "subscribe", "pattern": "orders.#", "group": "billing"}, "subscribed"},
		{"join group by pattern", map[string]any{"op": "subscribe", "pattern": "orders.#", "group": "team.a"}, "subscribed"},
		{"join group not allowed", map[string]any{"op": "subscribe", "pattern": "orders.#", "group": "fraud"}, "forbidden"},
		{"group pattern does not reach deeper", map[string]any{"op": "subscribe", "pattern": "orders.x", "group": "team.a.b"}, "forbidden"},
		{"ack in a group not allowed", map[string]any{"op": "ack", "group": "fraud", "topic": "orders.a", "partition": 0, "offset": 0}, "forbidden"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := c.call(t, tt.req)
			got, _ := m["op"].(string)
			if got == "error" {
				got, _ = m["code"].(string)
			}
			if got != tt.want {
				t.Fatalf("%v: got %v, want %s", tt.req, m, tt.want)
			}
		})
	}
	if got := metricValue(t, g.reg, "switchyard_forbidden_total", nil); got != 7 {
		t.Errorf("forbidden_total = %v, want 7", got)
	}
}

func TestAuthHTTP(t *testing.T) {
	g := newGateway(t, withAuth(t))
	user := hs256(t, claims([]string{"orders.#"}, []string{"orders.#"}, []string{"billing"}))
	topic := map[string]any{"name": "orders.eu", "partitions": 2}
	tests := []struct {
		name, method, path, cred string
		body                     any
		want                     int
	}{
		{"create topic without admin key", "POST", "/v1/topics", user, topic, 403},
		{"create topic with admin key", "POST", "/v1/topics", adminKey, topic, 201},
		{"publish within claims", "POST", "/v1/publish", user, map[string]any{"topic": "orders.eu", "data": 1}, 200},
		{"publish outside claims", "POST", "/v1/publish", user, map[string]any{"topic": "payments", "data": 1}, 403},
		{"read log within claims", "GET", "/v1/topics/orders.eu/messages", user, nil, 200},
		{"read log outside claims", "GET", "/v1/topics/payments/messages", user, nil, 403},
		{"list topics", "GET", "/v1/topics", user, nil, 200},
		{"poll allowed", "POST", "/v1/groups/billing/poll", user, map[string]any{"pattern": "orders.#"}, 200},
		{"poll group not allowed", "POST", "/v1/groups/fraud/poll", user, map[string]any{"pattern": "orders.#"}, 403},
		{"poll pattern not allowed", "POST", "/v1/groups/billing/poll", user, map[string]any{"pattern": "#"}, 403},
		{"poll malformed body", "POST", "/v1/groups/billing/poll", user, "{", 400},
		{"ack group not allowed", "POST", "/v1/groups/fraud/ack", user, map[string]any{"topic": "orders.eu", "partition": 0, "offset": 0}, 403},
		{"inspect group not allowed", "GET", "/v1/groups/fraud", user, nil, 403},
		{"seek needs admin", "POST", "/v1/groups/billing/seek", user, map[string]any{"topic": "orders.eu", "offset": 0}, 403},
		{"seek with admin", "POST", "/v1/groups/billing/seek", adminKey, map[string]any{"topic": "orders.eu", "offset": 0}, 200},
		{"dead letters need admin", "GET", "/v1/deadletters", user, nil, 403},
		{"dead letters with admin", "GET", "/v1/deadletters", adminKey, nil, 200},
		{"redrive needs admin", "POST", "/v1/deadletters/redrive", user, map[string]any{"group": "billing"}, 403},
		{"redrive with admin", "POST", "/v1/deadletters/redrive", adminKey, map[string]any{"group": "billing"}, 200},
		{"delete needs admin", "DELETE", "/v1/topics/orders.eu", user, nil, 403},
		{"delete with admin", "DELETE", "/v1/topics/orders.eu", adminKey, nil, 204},
		{"anonymous denied", "GET", "/v1/topics", "", nil, 401},
		{"wrong admin key", "POST", "/v1/topics", adminKey + "x", topic, 401},
		{"health needs nothing", "GET", "/healthz", "", nil, 200},
		{"metrics need nothing", "GET", "/metrics", "", nil, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, m := g.httpAuth(t, tt.method, tt.path, tt.cred, tt.body)
			if st != tt.want {
				t.Fatalf("%s %s: %d %v, want %d", tt.method, tt.path, st, m, tt.want)
			}
			if st == 403 && m["code"] != "forbidden" {
				t.Fatalf("403 with code %v", m["code"])
			}
		})
	}
	// A non-Bearer Authorization header is refused, not ignored.
	req, _ := http.NewRequest("GET", g.srv.URL+"/v1/topics", nil)
	req.SetBasicAuth("u", adminKey)
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("basic auth: %d, want 401", resp.StatusCode)
	}
}

func TestAuthAdminKeyOnWebSocket(t *testing.T) {
	g := newGateway(t, withAuth(t))
	c := g.dialToken(t, adminKey)
	c.subscribe(t, "#")
	c.subscribe(t, "$sys.#")
	c.publish(t, "anything.at.all", 1)
}

func TestAuthAnonymous(t *testing.T) {
	t.Run("denied by default", func(t *testing.T) {
		g := newGateway(t, func(c *gwConfig) { c.router.Auth.AdminKey = adminKey })
		if st, body, _ := g.dialRefused(t, "", nil); st != 401 || body["code"] != "unauthorized" {
			t.Fatalf("anonymous upgrade: %d %v", st, body)
		}
		if st, _ := g.httpAuth(t, "POST", "/v1/publish", "", map[string]any{"topic": "a", "data": 1}); st != 401 {
			t.Fatalf("anonymous publish: %d", st)
		}
		c := g.dialToken(t, adminKey)
		c.publish(t, "a", 1)
	})
	t.Run("allowed with grants", func(t *testing.T) {
		g := newGateway(t, withAuth(t), func(c *gwConfig) {
			c.router.Auth.Anonymous = &router.Grants{Subscribe: []string{"public.#"}}
		})
		c := g.dialRaw(t)
		c.nextOp(t, "welcome")
		c.subscribe(t, "public.news")
		if m := c.call(t, map[string]any{"op": "subscribe", "pattern": "private.#"}); m["code"] != "forbidden" {
			t.Fatalf("anonymous subscribe outside grants: %v", m)
		}
		if m := c.call(t, map[string]any{"op": "publish", "topic": "public.news", "data": 1}); m["code"] != "forbidden" {
			t.Fatalf("anonymous publish: %v", m)
		}
		// A bad token is still refused, not treated as anonymous.
		if st, _, _ := g.dialRefused(t, "token=bogus", nil); st != 401 {
			t.Fatalf("bad token with anonymous allowed: %d", st)
		}
	})
	t.Run("open without keys", func(t *testing.T) {
		g := newGateway(t)
		st, _ := g.httpAuth(t, "POST", "/v1/topics", "", map[string]any{"name": "open"})
		if st != 201 {
			t.Fatalf("create without any auth configured: %d", st)
		}
		// Without keys, any Authorization header is ignored.
		st, _ = g.httpAuth(t, "GET", "/v1/topics", "whatever", nil)
		if st != 200 {
			t.Fatalf("bearer on an open gateway: %d", st)
		}
	})
}

// shortToken returns a token expiring between 300ms and 1.3s from now (exp
// has whole-second precision).
func shortToken(t *testing.T) (string, time.Time) {
	now := time.Now()
	exp := now.Truncate(time.Second).Add(time.Second)
	if exp.Sub(now) < 300*time.Millisecond {
		exp = exp.Add(time.Second)
	}
	c := claims([]string{"#"}, []string{"#"}, nil)
	c["exp"] = exp.Unix()
	return hs256(t, c), exp
}

func TestAuthSessionExpires(t *testing.T) {
	g := newGateway(t, withAuth(t))
	tok, exp := shortToken(t)
	c := g.dialToken(t, tok)
	c.subscribe(t, "a.#")
	if code := c.closeStatus(t); code != websocket.StatusPolicyViolation {
		t.Fatalf("close status %v, want 1008", code)
	}
	if early := time.Until(exp); early > 50*time.Millisecond {
		t.Fatalf("closed %v before the token expired", early)
	}
	if got := metricValue(t, g.reg, "switchyard_sessions_expired_total", nil); got != 1 {
		t.Fatalf("sessions_expired_total = %v", got)
	}
	// A session that ends first stops its timer (goleak checks the rest).
	tok, _ = shortToken(t)
	c2 := g.dialToken(t, tok)
	c2.conn.Close(websocket.StatusNormalClosure, "")
	<-c2.done
}

func TestParsePublicKeys(t *testing.T) {
	rk := testRSA(t)
	var buf bytes.Buffer
	for _, k := range []any{&rk.PublicKey, &ecKey.PublicKey} {
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			t.Fatal(err)
		}
		_ = pem.Encode(&buf, &pem.Block{Type: "PUBLIC KEY", Bytes: der})
	}
	keys, err := router.ParsePublicKeys(buf.Bytes())
	if err != nil || len(keys) != 2 {
		t.Fatalf("ParsePublicKeys: %d keys, %v", len(keys), err)
	}
	for _, bad := range []string{"", "not pem", "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n"} {
		if _, err := router.ParsePublicKeys([]byte(bad)); err == nil {
			t.Errorf("ParsePublicKeys(%q) succeeded", bad)
		}
	}
}

func TestAuthOptionsRejected(t *testing.T) {
	small, _ := rsa.GenerateKey(rand.Reader, 1024)
	for _, tt := range []struct {
		name string
		auth router.AuthOptions
	}{
		{"short HMAC secret", router.AuthOptions{HMACSecrets: [][]byte{[]byte("short")}}},
		{"short admin key", router.AuthOptions{AdminKey: "x"}},
		{"small RSA key", router.AuthOptions{PublicKeys: []crypto.PublicKey{&small.PublicKey}}},
		{"bad anonymous grant", router.AuthOptions{AdminKey: adminKey, Anonymous: &router.Grants{Subscribe: []string{"a..b"}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := router.New(router.Options{Engine: nopEngine(t), Auth: tt.auth}); err == nil {
				t.Fatal("New succeeded")
			}
		})
	}
}
