// Package auth verifies Switchyard's credentials and says what they allow:
// HS256, RS256 and ES256/384/512 tokens with grant claims, verification keys
// from PEM, named keys and a JSON Web Key Set, the admin key, and the grants
// of anonymous clients. It knows nothing of sessions or HTTP statuses; the
// router turns its answers into protocol errors.
//
// Concurrency: an Authenticator is immutable after New and safe for
// concurrent use; its JWKS source (jwks.go) is too. A Principal is never
// changed after it is made.
package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/subtle"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/switchyard/switchyard/trie"
)

// Options configure authentication and permissions. The zero value
// configures none: every client may do everything, including the admin
// calls, which is only fit for a gateway on a trusted network.
//
// Once any key is set (an HMAC secret, a public key or the admin key), every
// WebSocket session and every /v1 HTTP call needs a valid token or the admin
// key, unless Anonymous says what a client without one may do.
type Options struct {
	// HMACSecrets verify HS256 tokens. Each must be at least 32 bytes. Any
	// of them may have signed a token, so a new secret can be rolled out
	// before the old one is retired.
	HMACSecrets [][]byte
	// PublicKeys verify RS256 (*rsa.PublicKey) and ES256, ES384 or ES512
	// (*ecdsa.PublicKey on P-256, P-384 or P-521) tokens. Only the
	// algorithms of the configured key types are accepted.
	PublicKeys []crypto.PublicKey
	// AdminKey, given as "Authorization: Bearer <key>" (or as the token of
	// a WebSocket), allows everything, including the admin calls: topic
	// create and delete, group seek, dead-letter list and redrive.
	AdminKey string
	// Anonymous, when not nil, is what a client without a token may do;
	// nil (the default) refuses it with 401 once any key is configured.
	Anonymous *Grants
	// RefreshLead is how long before a session's token expires the gateway
	// sends refresh_required. Default: 30s or a tenth of the token's
	// lifetime (exp - iat; exp - the time it was presented without iat),
	// whichever is less, so short tokens are not asked to refresh at once.
	// Negative: no warning (the session still closes at exp).
	RefreshLead time.Duration

	// Audience, when set, must be one of the token's "aud" values.
	// Default: aud is not checked.
	Audience string
	// Issuer, when set, must equal the token's "iss". Default: not checked.
	Issuer string
	// NamedKeys are verification keys by key id: a token whose header has
	// that "kid" is verified with that key only. Same types as PublicKeys.
	// Default: none.
	NamedKeys map[string]crypto.PublicKey
	// JWKSURL or JWKSFile is a JSON Web Key Set of RSA and EC signing keys
	// (as identity providers publish at their jwks_uri); a token's "kid"
	// selects the key. Default: none. Setting both is an error.
	JWKSURL  string
	JWKSFile string
	// JWKSRefresh is how often the set is read again. Default: 5m.
	JWKSRefresh time.Duration
	// JWKSMinInterval is the shortest time between two reads caused by a
	// token naming an unknown kid. Default: 10s.
	JWKSMinInterval time.Duration
	// JWKSClient fetches JWKSURL. Default: a client with a 5s timeout.
	JWKSClient *http.Client
	// JWKSCounts, when not nil, counts the key set's fetches too, beside
	// the set's own count (JWKS.Fetches): counts that go on across the key
	// sets of several Authenticators, as a gateway's reloads make them.
	// Default: none.
	JWKSCounts *FetchCounts
	// Claims names the token claims that carry the grants, for identity
	// providers that put custom claims under namespaced keys. Default:
	// "publish", "subscribe" and "groups".
	Claims ClaimNames
}

// ClaimNames name the claims holding a token's grants; each claim is a list
// of strings.
type ClaimNames struct {
	// Prefix is put before each default name: with Prefix
	// "https://example.com/", the subscribe grants are read from the claim
	// "https://example.com/subscribe". Default: none.
	Prefix string
	// Publish, Subscribe and Groups, when set, are the full claim names
	// (Prefix is not applied to them).
	Publish, Subscribe, Groups string
}

func (c ClaimNames) withDefaults() ClaimNames {
	if c.Publish == "" {
		c.Publish = c.Prefix + "publish"
	}
	if c.Subscribe == "" {
		c.Subscribe = c.Prefix + "subscribe"
	}
	if c.Groups == "" {
		c.Groups = c.Prefix + "groups"
	}
	return c
}

// Grants are the permissions of one client, as carried by a token's claims.
type Grants struct {
	// Publish holds patterns; a publish to a topic is allowed when one of
	// them matches it.
	Publish []string `json:"publish,omitempty"`
	// Subscribe holds patterns; a subscription (or a read of a topic's
	// log) is allowed when one of them covers the requested pattern.
	Subscribe []string `json:"subscribe,omitempty"`
	// Groups holds group names or patterns over group names; joining,
	// polling, acking or inspecting a group needs one of them.
	Groups []string `json:"groups,omitempty"`
}

// Claims is the payload of a Switchyard token: the registered claims (exp is
// required; nbf, iat and sub are honoured or recorded) plus the grants.
type Claims struct {
	jwt.RegisteredClaims
	Grants
}

// minHMACSecret is the shortest accepted HS256 secret: 256 bits, the size of
// the hash, as RFC 7518 section 3.2 requires.
const minHMACSecret = 32

// ParsePublicKeys reads every PEM block of data as an RSA or ECDSA public key
// ("PUBLIC KEY", "RSA PUBLIC KEY" or a "CERTIFICATE" whose key is used).
func ParsePublicKeys(data []byte) ([]crypto.PublicKey, error) {
	var keys []crypto.PublicKey
	for n := 1; ; n++ {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		one := pem.EncodeToMemory(block)
		if k, err := jwt.ParseRSAPublicKeyFromPEM(one); err == nil {
			keys = append(keys, k)
			continue
		}
		if k, err := jwt.ParseECPublicKeyFromPEM(one); err == nil {
			keys = append(keys, k)
			continue
		}
		return nil, fmt.Errorf("router: PEM block %d (%s) is not an RSA or ECDSA public key", n, block.Type)
	}
	if len(keys) == 0 {
		return nil, errors.New("router: no PEM public key found")
	}
	return keys, nil
}

// Authenticator verifies tokens and admin keys. It is immutable after New
// and safe for concurrent use.
type Authenticator struct {
	enabled   bool
	admin     []byte
	anonymous *Principal
	parser    *jwt.Parser
	hmac      []jwt.VerificationKey
	rsa       []jwt.VerificationKey
	ec        map[string][]jwt.VerificationKey // by alg
	lead      time.Duration                    // Options.RefreshLead
	named     map[string]jwk                   // Options.NamedKeys
	jwks      *JWKS                            // nil without a JWKS
	claims    ClaimNames
	now       func() time.Time
}

// New checks o and builds its Authenticator. With JWKSFile it reads the
// file; with JWKSURL it tries the URL once (a provider that is down is tried
// again later). It starts no goroutine: the caller runs JWKS().Run. It is
// long on purpose: one check per kind of key, in the order Options lists
// them, each short and independent of the others.
func New(o Options) (*Authenticator, error) {
	a := &Authenticator{ec: map[string][]jwt.VerificationKey{}, lead: o.RefreshLead, claims: o.Claims.withDefaults(), now: time.Now}
	a.enabled = len(o.HMACSecrets) > 0 || len(o.PublicKeys) > 0 || o.AdminKey != "" ||
		len(o.NamedKeys) > 0 || o.JWKSURL != "" || o.JWKSFile != ""
	if !a.enabled {
		return a, nil
	}
	if o.AdminKey != "" {
		if len(o.AdminKey) < 16 {
			return nil, errors.New("router: the admin key must be at least 16 characters")
		}
		a.admin = []byte(o.AdminKey)
	}
	var methods []string
	for i, s := range o.HMACSecrets {
		if len(s) < minHMACSecret {
			return nil, fmt.Errorf("router: HMAC secret %d is %d bytes; at least %d are required", i+1, len(s), minHMACSecret)
		}
		a.hmac = append(a.hmac, slices.Clone(s))
	}
	if len(a.hmac) > 0 {
		methods = append(methods, jwt.SigningMethodHS256.Alg())
	}
	for i, k := range o.PublicKeys {
		switch k := k.(type) {
		case *rsa.PublicKey:
			if k.N.BitLen() < 2048 {
				return nil, fmt.Errorf("router: RSA key %d has %d bits; at least 2048 are required", i+1, k.N.BitLen())
			}
			a.rsa = append(a.rsa, k)
		case *ecdsa.PublicKey:
			alg := ""
			switch k.Curve {
			case elliptic.P256():
				alg = jwt.SigningMethodES256.Alg()
			case elliptic.P384():
				alg = jwt.SigningMethodES384.Alg()
			case elliptic.P521():
				alg = jwt.SigningMethodES512.Alg()
			default:
				return nil, fmt.Errorf("router: ECDSA key %d is on an unsupported curve", i+1)
			}
			a.ec[alg] = append(a.ec[alg], k)
		default:
			return nil, fmt.Errorf("router: public key %d is a %T; want *rsa.PublicKey or *ecdsa.PublicKey", i+1, k)
		}
	}
	if len(a.rsa) > 0 {
		methods = append(methods, jwt.SigningMethodRS256.Alg())
	}
	for _, alg := range []string{"ES256", "ES384", "ES512"} {
		if len(a.ec[alg]) > 0 {
			methods = append(methods, alg)
		}
	}
	if len(o.NamedKeys) > 0 {
		a.named = map[string]jwk{}
		for kid, k := range o.NamedKeys {
			if err := checkPublicKey(k); err != nil {
				return nil, fmt.Errorf("router: key %q: %w", kid, err)
			}
			a.named[kid] = jwk{key: k}
		}
	}
	switch {
	case o.JWKSURL != "" && o.JWKSFile != "":
		return nil, errors.New("router: set JWKSURL or JWKSFile, not both")
	case o.JWKSFile != "":
		a.jwks = newJWKS(o)
		if err := a.jwks.fetch(context.Background()); err != nil {
			return nil, err
		}
	case o.JWKSURL != "":
		// A provider that is down at start-up is tried again on the first
		// token and every refresh period; tokens are refused meanwhile.
		a.jwks = newJWKS(o)
		ctx, cancel := context.WithTimeout(context.Background(), jwksFetchTimeout)
		_ = a.jwks.fetch(ctx)
		cancel()
	}
	if a.jwks != nil || len(a.named) > 0 {
		for _, alg := range jwksAlgs {
			if !slices.Contains(methods, alg) {
				methods = append(methods, alg)
			}
		}
	}
	if o.Anonymous != nil {
		g, err := ValidGrants(*o.Anonymous)
		if err != nil {
			return nil, fmt.Errorf("router: anonymous grants: %w", err)
		}
		a.anonymous = &Principal{Grants: g, Subject: "anonymous", Anonymous: true}
	}
	if len(methods) > 0 {
		popts := []jwt.ParserOption{
			jwt.WithValidMethods(methods),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithTimeFunc(func() time.Time { return a.now() }),
		}
		if o.Audience != "" {
			popts = append(popts, jwt.WithAudience(o.Audience))
		}
		if o.Issuer != "" {
			popts = append(popts, jwt.WithIssuer(o.Issuer))
		}
		a.parser = jwt.NewParser(popts...)
	}
	return a, nil
}

// checkPublicKey applies the size and curve rules of PublicKeys to k.
func checkPublicKey(k crypto.PublicKey) error {
	switch k := k.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return fmt.Errorf("RSA key has %d bits; at least 2048 are required", k.N.BitLen())
		}
	case *ecdsa.PublicKey:
		switch k.Curve {
		case elliptic.P256(), elliptic.P384(), elliptic.P521():
		default:
			return errors.New("ECDSA key is on an unsupported curve")
		}
	default:
		return fmt.Errorf("key is a %T; want *rsa.PublicKey or *ecdsa.PublicKey", k)
	}
	return nil
}

// keyFor is the jwt.Keyfunc: only keys of the token's (already allowed)
// algorithm, so an RSA public key can never serve as an HMAC secret. A
// token naming a kid of a named or JWKS key is verified with that key
// alone; an unknown kid makes the JWKS be read again (rate limited) and
// otherwise falls back to the keys without a name.
func (a *Authenticator) keyFor(t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	kid, _ := t.Header["kid"].(string)
	if kid != "" {
		if k, ok := a.named[kid]; ok {
			if !k.fits(alg) {
				return nil, errors.New("the key id names a key of another algorithm")
			}
			return k.key, nil
		}
		if a.jwks != nil {
			if !a.jwks.has(kid) {
				a.jwks.refreshForKID(context.Background(), kid)
			}
			if a.jwks.has(kid) {
				keys := a.jwks.lookup(kid, alg)
				if len(keys) == 0 {
					return nil, errors.New("the key id names a key of another algorithm")
				}
				return keys[0], nil
			}
		}
	}
	var keys []jwt.VerificationKey
	switch alg {
	case "HS256":
		keys = a.hmac
	case "RS256":
		keys = a.rsa
	case "ES256", "ES384", "ES512":
		keys = a.ec[alg]
	}
	if a.jwks != nil && kid == "" {
		for _, k := range a.jwks.lookup("", alg) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return nil, errors.New("no key for the algorithm")
	}
	return jwt.VerificationKeySet{Keys: keys}, nil
}

// Principal is an authenticated client and what it may do. An admin may do
// everything.
type Principal struct {
	Admin   bool
	Subject string
	Grants  Grants
	Expires time.Time       // zero: never (admin, anonymous)
	Issued  time.Time       // the token's iat; zero when absent
	Info    json.RawMessage // the connect hook's info, compact JSON; nil when none
	// Credential is the token or admin key the principal was made from,
	// kept so that it can be checked again with other keys (a gateway's
	// reload); "" for Open, anonymous and connect-hook principals.
	Credential string
	// Anonymous marks the principal of clients without a credential
	// (Authenticator.Anonymous).
	Anonymous bool
}

// Open is the principal of every client when no key is configured.
var Open = &Principal{Admin: true, Subject: "open"}

// Error is why a credential was refused; Msg is safe to show (no key
// material, no parser details) and Reason is the metric label.
type Error struct{ Reason, Msg string }

func (e *Error) Error() string { return e.Msg }

// The reasons a credential is refused.
var (
	ErrNoCredential   = &Error{"missing", "a token is required"}
	ErrBadCredential  = &Error{"invalid", "the token is invalid"}
	ErrExpired        = &Error{"expired", "the token has expired"}
	ErrNotYetValid    = &Error{"not_yet_valid", "the token is not valid yet"}
	ErrBadTokenClaims = &Error{"invalid_claims", "the token's claims are invalid"}
)

// Enabled reports whether any key is configured; without one every client
// is Open.
func (a *Authenticator) Enabled() bool { return a.enabled }

// Anonymous is the principal of a client without a credential
// (Options.Anonymous); nil when such a client is refused.
func (a *Authenticator) Anonymous() *Principal { return a.anonymous }

// JWKS is the key set source; nil without JWKSURL or JWKSFile.
func (a *Authenticator) JWKS() *JWKS { return a.jwks }

// Authenticate turns a credential (a JWT or the admin key; "" for none) into
// a principal.
func (a *Authenticator) Authenticate(cred string) (*Principal, *Error) {
	if !a.enabled {
		return Open, nil
	}
	if cred == "" {
		if a.anonymous != nil {
			return a.anonymous, nil
		}
		return nil, ErrNoCredential
	}
	if a.admin != nil && subtle.ConstantTimeCompare([]byte(cred), a.admin) == 1 {
		return &Principal{Admin: true, Subject: "admin", Credential: cred}, nil
	}
	if a.parser == nil {
		return nil, ErrBadCredential
	}
	var cl jwt.MapClaims
	if _, err := a.parser.ParseWithClaims(cred, &cl, a.keyFor); err != nil {
		switch {
		case errors.Is(err, jwt.ErrTokenExpired):
			return nil, ErrExpired
		case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
			return nil, ErrNotYetValid
		}
		return nil, ErrBadCredential
	}
	var g Grants
	var ok1, ok2, ok3 bool
	g.Publish, ok1 = claimList(cl, a.claims.Publish)
	g.Subscribe, ok2 = claimList(cl, a.claims.Subscribe)
	g.Groups, ok3 = claimList(cl, a.claims.Groups)
	sub, err := cl.GetSubject()
	if !ok1 || !ok2 || !ok3 || err != nil {
		return nil, ErrBadCredential // a claim of the wrong type: as a malformed token
	}
	if g, err = ValidGrants(g); err != nil {
		return nil, ErrBadTokenClaims
	}
	p := &Principal{Subject: sub, Grants: g, Credential: cred}
	if exp, _ := cl.GetExpirationTime(); exp != nil {
		p.Expires = exp.Time
	}
	if iat, _ := cl.GetIssuedAt(); iat != nil {
		p.Issued = iat.Time
	}
	return p, nil
}

// claimList reads a grant claim: absent or a list of strings. ok is false
// for any other shape.
func claimList(cl jwt.MapClaims, name string) (list []string, ok bool) {
	switch v := cl[name].(type) {
	case nil:
		return nil, true
	case []any:
		list = make([]string, 0, len(v))
		for _, e := range v {
			s, isStr := e.(string)
			if !isStr {
				return nil, false
			}
			list = append(list, s)
		}
		return list, true
	}
	return nil, false
}

// ValidGrants checks every pattern of g. Group entries that are not
// patterns must be valid group names.
func ValidGrants(g Grants) (Grants, error) {
	for _, p := range g.Publish {
		if err := trie.ValidatePattern(p); err != nil {
			return Grants{}, fmt.Errorf("publish: %w", err)
		}
	}
	for _, p := range g.Subscribe {
		if err := trie.ValidatePattern(p); err != nil {
			return Grants{}, fmt.Errorf("subscribe: %w", err)
		}
	}
	for _, p := range g.Groups {
		if trie.ValidatePattern(p) != nil && ValidateGroupName(p) != nil {
			return Grants{}, fmt.Errorf("groups: %q is neither a group name nor a pattern", p)
		}
	}
	return g, nil
}

// CanPublish reports whether p may publish to the valid topic.
func (p *Principal) CanPublish(topic string) bool {
	if p.Admin {
		return true
	}
	for _, pat := range p.Grants.Publish {
		if trie.Matches(pat, topic) {
			return true
		}
	}
	return false
}

// CanSubscribe reports whether p may subscribe to the valid pattern (or
// read the valid topic).
func (p *Principal) CanSubscribe(pattern string) bool {
	if p.Admin {
		return true
	}
	for _, pat := range p.Grants.Subscribe {
		if trie.Covers(pat, pattern) {
			return true
		}
	}
	return false
}

// CanJoin reports whether p may use the group: a grant equal to its name, or
// a pattern matching its name when the name is shaped like a topic.
func (p *Principal) CanJoin(group string) bool {
	if p.Admin {
		return true
	}
	topicLike := trie.ValidateTopic(group) == nil
	for _, g := range p.Grants.Groups {
		if g == group || topicLike && trie.ValidatePattern(g) == nil && trie.Matches(g, group) {
			return true
		}
	}
	return false
}

// The errors of ValidateGroupName; their texts are what a client is told.
var (
	ErrGroupNameLength = errors.New("group must be 1 to 255 characters")
	ErrGroupNameChars  = errors.New("group may hold only A-Z a-z 0-9 _ - : .")
)

// ValidateGroupName checks that g is a group name: 1 to 255 bytes of
// A-Z a-z 0-9 _ - : . It is the one definition of the rule, for a grant's
// group entries here and for the group of a subscribe, a pull member and
// an MQTT shared subscription in the router.
func ValidateGroupName(g string) error {
	if g == "" || len(g) > trie.MaxNameBytes {
		return ErrGroupNameLength
	}
	if strings.Trim(g, groupNameChars) != "" {
		return ErrGroupNameChars
	}
	return nil
}

const groupNameChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-:."

// DefaultRefreshLead caps the warning before a token's exp.
const DefaultRefreshLead = 30 * time.Second

// RefreshLead is how long before p.Expires a session is warned: the
// configured lead (Options.RefreshLead; none when negative), else
// min(DefaultRefreshLead, a tenth of the token's lifetime), the lifetime
// counted from iat, or from now without one.
func (a *Authenticator) RefreshLead(p *Principal, now time.Time) time.Duration {
	if a.lead != 0 {
		return max(a.lead, 0)
	}
	start := p.Issued
	if start.IsZero() || start.After(now) {
		start = now
	}
	return min(DefaultRefreshLead, p.Expires.Sub(start)/10)
}
