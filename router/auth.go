package router

import (
	"bytes"
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
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/labstack/echo/v4"

	"github.com/switchyard/switchyard/trie"
)

// AuthOptions configure authentication and permissions. The zero value
// configures none: every client may do everything, including the admin
// calls, which is only fit for a gateway on a trusted network.
//
// Once any key is set (an HMAC secret, a public key or the admin key), every
// WebSocket session and every /v1 HTTP call needs a valid token or the admin
// key, unless Anonymous says what a client without one may do.
type AuthOptions struct {
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

// authenticator verifies tokens and admin keys. It is immutable after
// newAuthenticator and safe for concurrent use.
type authenticator struct {
	enabled   bool
	admin     []byte
	anonymous *principal
	parser    *jwt.Parser
	hmac      []jwt.VerificationKey
	rsa       []jwt.VerificationKey
	ec        map[string][]jwt.VerificationKey // by alg
	lead      time.Duration                    // AuthOptions.RefreshLead
	named     map[string]jwk                   // AuthOptions.NamedKeys
	jwks      *jwksSource                      // nil without a JWKS
	claims    ClaimNames
	now       func() time.Time
}

func newAuthenticator(o AuthOptions) (*authenticator, error) {
	a := &authenticator{ec: map[string][]jwt.VerificationKey{}, lead: o.RefreshLead, claims: o.Claims.withDefaults(), now: time.Now}
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
		a.jwks = newJWKSSource(o)
		if err := a.jwks.fetch(context.Background()); err != nil {
			return nil, err
		}
	case o.JWKSURL != "":
		// A provider that is down at start-up is tried again on the first
		// token and every refresh period; tokens are refused meanwhile.
		a.jwks = newJWKSSource(o)
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
		g, err := validGrants(*o.Anonymous)
		if err != nil {
			return nil, fmt.Errorf("router: anonymous grants: %w", err)
		}
		a.anonymous = &principal{grants: g, subject: "anonymous"}
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
func (a *authenticator) keyFor(t *jwt.Token) (any, error) {
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

// principal is an authenticated client and what it may do. A nil principal
// (no authentication configured) and an admin may do everything.
type principal struct {
	admin   bool
	subject string
	grants  Grants
	expires time.Time       // zero: never (admin, anonymous)
	issued  time.Time       // the token's iat; zero when absent
	info    json.RawMessage // the connect hook's info, compact JSON; nil when none
}

// openPrincipal is the principal of every client when no key is configured.
var openPrincipal = &principal{admin: true, subject: "open"}

// authError is why a credential was refused; its message is safe to show
// (no key material, no parser details).
type authError struct{ reason, msg string }

func (e *authError) Error() string { return e.msg }

var (
	errNoCredential   = &authError{"missing", "a token is required"}
	errBadCredential  = &authError{"invalid", "the token is invalid"}
	errExpired        = &authError{"expired", "the token has expired"}
	errNotYetValid    = &authError{"not_yet_valid", "the token is not valid yet"}
	errBadTokenClaims = &authError{"invalid_claims", "the token's claims are invalid"}
)

// authenticate turns a credential (a JWT or the admin key; "" for none) into
// a principal.
func (a *authenticator) authenticate(cred string) (*principal, *authError) {
	if !a.enabled {
		return openPrincipal, nil
	}
	if cred == "" {
		if a.anonymous != nil {
			return a.anonymous, nil
		}
		return nil, errNoCredential
	}
	if a.admin != nil && subtle.ConstantTimeCompare([]byte(cred), a.admin) == 1 {
		return &principal{admin: true, subject: "admin"}, nil
	}
	if a.parser == nil {
		return nil, errBadCredential
	}
	var cl jwt.MapClaims
	if _, err := a.parser.ParseWithClaims(cred, &cl, a.keyFor); err != nil {
		switch {
		case errors.Is(err, jwt.ErrTokenExpired):
			return nil, errExpired
		case errors.Is(err, jwt.ErrTokenNotValidYet), errors.Is(err, jwt.ErrTokenUsedBeforeIssued):
			return nil, errNotYetValid
		}
		return nil, errBadCredential
	}
	var g Grants
	var ok1, ok2, ok3 bool
	g.Publish, ok1 = claimList(cl, a.claims.Publish)
	g.Subscribe, ok2 = claimList(cl, a.claims.Subscribe)
	g.Groups, ok3 = claimList(cl, a.claims.Groups)
	sub, err := cl.GetSubject()
	if !ok1 || !ok2 || !ok3 || err != nil {
		return nil, errBadCredential // a claim of the wrong type: as a malformed token
	}
	if g, err = validGrants(g); err != nil {
		return nil, errBadTokenClaims
	}
	p := &principal{subject: sub, grants: g}
	if exp, _ := cl.GetExpirationTime(); exp != nil {
		p.expires = exp.Time
	}
	if iat, _ := cl.GetIssuedAt(); iat != nil {
		p.issued = iat.Time
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

// validGrants checks every pattern of g. Group entries that are not
// patterns must be valid group names.
func validGrants(g Grants) (Grants, error) {
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
		if trie.ValidatePattern(p) != nil && validGroup(p) != nil {
			return Grants{}, fmt.Errorf("groups: %q is neither a group name nor a pattern", p)
		}
	}
	return g, nil
}

// canPublish reports whether p may publish to the valid topic.
func (p *principal) canPublish(topic string) bool {
	if p.admin {
		return true
	}
	for _, pat := range p.grants.Publish {
		if trie.Matches(pat, topic) {
			return true
		}
	}
	return false
}

// canSubscribe reports whether p may subscribe to the valid pattern (or
// read the valid topic).
func (p *principal) canSubscribe(pattern string) bool {
	if p.admin {
		return true
	}
	for _, pat := range p.grants.Subscribe {
		if trie.Covers(pat, pattern) {
			return true
		}
	}
	return false
}

// canJoin reports whether p may use the group: a grant equal to its name, or
// a pattern matching its name when the name is shaped like a topic.
func (p *principal) canJoin(group string) bool {
	if p.admin {
		return true
	}
	topicLike := trie.ValidateTopic(group) == nil
	for _, g := range p.grants.Groups {
		if g == group || topicLike && trie.ValidatePattern(g) == nil && trie.Matches(g, group) {
			return true
		}
	}
	return false
}

// forbidden counts a refusal and returns its error.
func (rt *Router) forbidden(op, format string, args ...any) *protoError {
	rt.lim.forbidden.WithLabelValues(op).Inc()
	return perr(codeForbidden, format, args...)
}

// principalKey is the echo.Context key of the request's principal.
const principalKey = "switchyard.principal"

// bearer returns the credential of an Authorization: Bearer header, "" when
// there is none, and false when the header is present but not Bearer.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", true
	}
	scheme, cred, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(cred), true
}

// unauthorized counts a refused credential and returns the 401 error.
func (rt *Router) unauthorized(c echo.Context, ae *authError) error {
	rt.lim.authFailures.WithLabelValues(ae.reason).Inc()
	c.Response().Header().Set("WWW-Authenticate", `Bearer realm="switchyard"`)
	return perr(codeUnauthorized, "%s", ae.msg)
}

// authWS authenticates a WebSocket upgrade: the Authorization header, else
// the token query parameter.
func (rt *Router) authWS(c echo.Context) (*principal, error) {
	hook := rt.hooks.enabled(hookConnect)
	if !rt.auth.enabled {
		if hook {
			return rt.hookConnect(c)
		}
		return openPrincipal, nil
	}
	cred, ok := bearer(c.Request())
	if !ok {
		return nil, rt.unauthorized(c, errBadCredential)
	}
	if cred == "" {
		cred = c.QueryParam("token")
	}
	if cred == "" && hook {
		// A token's grants, else the application's answer.
		return rt.hookConnect(c)
	}
	p, ae := rt.auth.authenticate(cred)
	if ae != nil {
		return nil, rt.unauthorized(c, ae)
	}
	return p, nil
}

// authAPI is the middleware of the HTTP API: every /v1 call except the
// WebSocket endpoint (which authenticates itself) needs a credential once
// authentication is configured. The principal is left in the context.
func (rt *Router) authAPI(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		path := c.Request().URL.Path
		if !rt.auth.enabled || !strings.HasPrefix(path, "/v1/") || path == "/v1/ws" || path == "/v1/sse" {
			return next(c)
		}
		cred, ok := bearer(c.Request())
		if !ok {
			return rt.unauthorized(c, errBadCredential)
		}
		p, ae := rt.auth.authenticate(cred)
		if ae != nil {
			return rt.unauthorized(c, ae)
		}
		c.Set(principalKey, p)
		return next(c)
	}
}

// principalOf returns the principal authAPI stored; without one (a route
// outside /v1) the caller is treated as anonymous with no grants when
// authentication is on.
func (rt *Router) principalOf(c echo.Context) *principal {
	if p, ok := c.Get(principalKey).(*principal); ok {
		return p
	}
	if !rt.auth.enabled {
		return openPrincipal
	}
	return &principal{subject: "anonymous"}
}

// requireAdmin guards the admin calls.
func (rt *Router) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !rt.principalOf(c).admin {
			return rt.forbidden("admin", "this call needs the admin key")
		}
		return next(c)
	}
}

// requireGroup guards calls on one group (path parameter "group").
func (rt *Router) requireGroup(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if g := param(c, "group"); !rt.principalOf(c).canJoin(g) {
			return rt.forbidden("group", "not allowed to use group %q", g)
		}
		return next(c)
	}
}

// requirePoll guards a poll: the group, and a subscribe grant covering the
// body's pattern. The body is read here (under the body limit) and handed on
// unchanged; a body it cannot read is left to the handler to reject.
func (rt *Router) requirePoll(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		p := rt.principalOf(c)
		if p.admin {
			return next(c)
		}
		if g := param(c, "group"); !p.canJoin(g) {
			return rt.forbidden("group", "not allowed to use group %q", g)
		}
		r := c.Request()
		data, err := io.ReadAll(http.MaxBytesReader(c.Response(), r.Body, rt.opts.MaxBodyBytes))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return perr(codeTooLarge, "request body is larger than %d bytes", rt.opts.MaxBodyBytes)
			}
			return perr(codeBadRequest, "reading body failed")
		}
		r.Body = io.NopCloser(bytes.NewReader(data))
		var req struct {
			Pattern *string `json:"pattern"`
		}
		if json.Unmarshal(data, &req) == nil && req.Pattern != nil && trie.ValidatePattern(*req.Pattern) == nil &&
			!p.canSubscribe(*req.Pattern) {
			return rt.forbidden("subscribe", "not allowed to subscribe to %q", *req.Pattern)
		}
		return next(c)
	}
}
