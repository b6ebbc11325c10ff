package auth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var (
	testSecret = []byte("auth-test-secret-0123456789abcdef")
	testNow    = time.Unix(1900000000, 0)
)

// sign makes an HS256 token of claims with testSecret.
func sign(t *testing.T, claims jwt.MapClaims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newTest(t *testing.T, o Options) *Authenticator {
	t.Helper()
	a, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	a.now = func() time.Time { return testNow }
	return a
}

func TestAuthenticate(t *testing.T) {
	a := newTest(t, Options{HMACSecrets: [][]byte{testSecret}, AdminKey: "auth-test-admin-key",
		Claims: ClaimNames{Prefix: "https://x/"}})
	exp := testNow.Add(time.Hour).Unix()
	p, ae := a.Authenticate(sign(t, jwt.MapClaims{"exp": exp, "iat": testNow.Unix(), "sub": "u1",
		"https://x/publish": []string{"orders.*"}, "https://x/subscribe": []string{"orders.#"}, "https://x/groups": []string{"billing"},
		"publish": []string{"#"}}))
	if ae != nil {
		t.Fatal(ae)
	}
	if p.Admin || p.Subject != "u1" || !p.Expires.Equal(time.Unix(exp, 0)) || !p.Issued.Equal(testNow) {
		t.Fatalf("principal %+v", p)
	}
	if !p.CanPublish("orders.eu") || p.CanPublish("orders.eu.x") || p.CanPublish("other") {
		t.Fatal("publish grants not applied as patterns (or the unprefixed claim was read)")
	}
	if !p.CanSubscribe("orders.*") || p.CanSubscribe("#") {
		t.Fatal("subscribe grants do not cover exactly")
	}
	if !p.CanJoin("billing") || p.CanJoin("billing2") {
		t.Fatal("group grants not exact")
	}
	if p, ae := a.Authenticate("auth-test-admin-key"); ae != nil || !p.Admin || !p.CanPublish("$sys.x") || !p.CanJoin("any") {
		t.Fatalf("admin key: %+v, %v", p, ae)
	}
	for _, tt := range []struct {
		name string
		cred string
		want *Error
	}{
		{"none", "", ErrNoCredential},
		{"garbage", "not-a-token", ErrBadCredential},
		{"admin key prefix", "auth-test-admin-ke", ErrBadCredential},
		{"expired", sign(t, jwt.MapClaims{"exp": testNow.Add(-time.Second).Unix()}), ErrExpired},
		{"no exp", sign(t, jwt.MapClaims{"sub": "u"}), ErrBadCredential},
		{"not yet valid", sign(t, jwt.MapClaims{"exp": exp, "nbf": testNow.Add(time.Minute).Unix()}), ErrNotYetValid},
		{"claim of the wrong type", sign(t, jwt.MapClaims{"exp": exp, "https://x/subscribe": "#"}), ErrBadCredential},
		{"invalid pattern", sign(t, jwt.MapClaims{"exp": exp, "https://x/subscribe": []string{"a..b"}}), ErrBadTokenClaims},
		{"other secret", func() string {
			s, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"exp": exp}).SignedString([]byte(strings.Repeat("k", 32)))
			return s
		}(), ErrBadCredential},
		{"algorithm not configured", func() string {
			k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
			s, _ := jwt.NewWithClaims(jwt.SigningMethodES256, jwt.MapClaims{"exp": exp}).SignedString(k)
			return s
		}(), ErrBadCredential},
	} {
		if p, ae := a.Authenticate(tt.cred); ae != tt.want {
			t.Errorf("%s: %+v, %v; want %v", tt.name, p, ae, tt.want)
		}
	}
}

func TestAuthenticateOpenAndAnonymous(t *testing.T) {
	open := newTest(t, Options{})
	if p, ae := open.Authenticate("anything"); ae != nil || p != Open || open.Enabled() {
		t.Fatalf("without keys: %+v, %v", p, ae)
	}
	a := newTest(t, Options{AdminKey: "auth-test-admin-key", Anonymous: &Grants{Subscribe: []string{"public.#"}}})
	p, ae := a.Authenticate("")
	if ae != nil || p != a.Anonymous() || p.Subject != "anonymous" || !p.CanSubscribe("public.x") || p.CanPublish("public.x") {
		t.Fatalf("anonymous: %+v, %v", p, ae)
	}
	if _, ae := a.Authenticate("a-bad-token"); ae != ErrBadCredential {
		t.Fatalf("a bad credential with anonymous access: %v", ae)
	}
}

func TestNewRejects(t *testing.T) {
	for _, tt := range []struct {
		name string
		o    Options
		want string
	}{
		{"short secret", Options{HMACSecrets: [][]byte{[]byte("short")}}, "at least 32"},
		{"short admin key", Options{AdminKey: "short"}, "at least 16"},
		{"both JWKS sources", Options{JWKSURL: "http://127.0.0.1:1/", JWKSFile: "x"}, "not both"},
		{"bad anonymous grants", Options{AdminKey: "auth-test-admin-key", Anonymous: &Grants{Groups: []string{"a b"}}}, "anonymous grants"},
		{"key of another type", Options{NamedKeys: map[string]crypto.PublicKey{"k": "secret"}}, `key "k"`},
	} {
		if _, err := New(tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v; want an error with %q", tt.name, err, tt.want)
		}
	}
}

func TestRefreshLead(t *testing.T) {
	now := testNow
	for _, tt := range []struct {
		name            string
		lead            time.Duration
		issued, expires time.Time
		want            time.Duration
	}{
		{"configured", 5 * time.Second, now, now.Add(time.Hour), 5 * time.Second},
		{"negative: none", -time.Second, now, now.Add(time.Hour), 0},
		{"long token: capped", 0, now, now.Add(time.Hour), DefaultRefreshLead},
		{"short token: a tenth", 0, now, now.Add(100 * time.Second), 10 * time.Second},
		{"lifetime from iat", 0, now.Add(-50 * time.Second), now.Add(50 * time.Second), 10 * time.Second},
		{"no iat: from now", 0, time.Time{}, now.Add(50 * time.Second), 5 * time.Second},
		{"iat in the future: from now", 0, now.Add(time.Hour), now.Add(50 * time.Second), 5 * time.Second},
	} {
		a := &Authenticator{lead: tt.lead}
		if got := a.RefreshLead(&Principal{Issued: tt.issued, Expires: tt.expires}, now); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}

func TestValidGrantsGroups(t *testing.T) {
	for _, tt := range []struct {
		group string
		ok    bool
	}{
		{"billing", true}, {"team.*", true}, {"A-z_0:9.x", true}, {"#", true},
		{"", false}, {"a b", false}, {"é", false}, {"a\xff", false}, {strings.Repeat("a", 256), false},
	} {
		_, err := ValidGrants(Grants{Groups: []string{tt.group}})
		if (err == nil) != tt.ok {
			t.Errorf("group grant %q: %v, want ok=%v", tt.group, err, tt.ok)
		}
	}
	if _, err := ValidGrants(Grants{Publish: []string{"a..b"}}); err == nil {
		t.Error("an invalid publish pattern was accepted")
	}
}
