package auth

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/switchyard/switchyard/trie"
)

// FuzzClaims signs arbitrary claims and checks that whatever the
// authenticator accepts grants no more than its claims say.

// fuzzSecret signs the tokens FuzzClaims builds.
var fuzzSecret = []byte("fuzzing-secret-0123456789abcdef-0123")

// fuzzNow is the fixed clock of FuzzClaims; seeds use exp 2000000000.
var fuzzNow = time.Unix(1900000000, 0)

func FuzzClaims(f *testing.F) {
	seeds := []struct{ payload, topic, pattern, group string }{
		{`{"exp":2000000000,"sub":"u","publish":["orders.*.eu"],"subscribe":["orders.#","$sys.stats"],"groups":["billing","team.*"]}`, "orders.x.eu", "orders.*", "team.a"},
		{`{"exp":2000000000,"publish":["#"]}`, "$sys.stats", "#", "g"},
		{`{"exp":1000000000,"subscribe":["#"]}`, "a", "a", "a"},
		{`{"exp":2000000000,"nbf":1950000000}`, "a", "a", "a"},
		{`{"exp":2000000000,"subscribe":"#"}`, "a", "a", "a"},
		{`{"exp":2000000000,"subscribe":["a*"]}`, "a", "a", "a"},
		{`{"exp":2000000000,"groups":["a..b"]}`, "a", "a", "a..b"},
		{`{"exp":"soon"}`, "a", "a", "a"},
		{`{}`, "", "", ""},
		{`eyJhbGciOiJub25lIn0.e30.`, "a", "#", "g"},
	}
	for _, s := range seeds {
		f.Add([]byte(s.payload), s.topic, s.pattern, s.group)
	}
	a, err := New(Options{HMACSecrets: [][]byte{fuzzSecret}, AdminKey: "fuzz-admin-key-0123"})
	if err != nil {
		f.Fatal(err)
	}
	a.now = func() time.Time { return fuzzNow }
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	f.Fuzz(func(t *testing.T, payload []byte, topic, pattern, group string) {
		// The payload as a whole token: garbage must be refused cleanly.
		if p, ae := a.Authenticate(string(payload)); ae == nil && !p.Admin {
			t.Fatalf("accepted an unsigned credential %q", payload)
		}
		signing := header + "." + base64.RawURLEncoding.EncodeToString(payload)
		sig, err := jwt.SigningMethodHS256.Sign(signing, fuzzSecret)
		if err != nil {
			t.Fatal(err)
		}
		p, ae := a.Authenticate(signing + "." + base64.RawURLEncoding.EncodeToString(sig))
		if ae != nil {
			if ae.Msg == "" || ae.Reason == "" {
				t.Fatalf("auth error without a reason: %+v", ae)
			}
			return
		}
		if p.Admin || !p.Expires.After(fuzzNow) {
			t.Fatalf("principal %+v from claims %q", p, payload)
		}
		if _, err := ValidGrants(p.Grants); err != nil {
			t.Fatalf("accepted invalid grants %+v: %v", p.Grants, err)
		}
		if trie.ValidateTopic(topic) == nil && p.CanPublish(topic) {
			ok := false
			for _, g := range p.Grants.Publish {
				ok = ok || trie.Matches(g, topic)
			}
			if !ok {
				t.Fatalf("publish to %q allowed by %v", topic, p.Grants.Publish)
			}
		}
		if trie.ValidatePattern(pattern) == nil && p.CanSubscribe(pattern) {
			// Every topic the subscription could see must be allowed.
			if trie.ValidateTopic(topic) == nil && trie.Matches(pattern, topic) {
				ok := false
				for _, g := range p.Grants.Subscribe {
					ok = ok || trie.Matches(g, topic)
				}
				if !ok {
					t.Fatalf("subscribe %q allowed by %v but %q escapes", pattern, p.Grants.Subscribe, topic)
				}
			}
		}
		_ = p.CanJoin(group)
	})
}
