package router

// Authentication glue: the router's names for router/internal/auth, the
// HTTP and WebSocket credential checks, and the guards of the HTTP API.
// Tokens, keys, grants and principals live in router/internal/auth; what
// stays here needs the Router, echo or the protocol's error codes.

import (
	"bytes"
	"crypto"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/router/internal/auth"
	"github.com/switchyard/switchyard/trie"
)

// AuthOptions configure authentication and permissions (auth.Options). The
// zero value configures none: every client may do everything, including the
// admin calls, which is only fit for a gateway on a trusted network.
//
// Once any key is set (an HMAC secret, a public key or the admin key), every
// WebSocket session and every /v1 HTTP call needs a valid token or the admin
// key, unless Anonymous says what a client without one may do.
type AuthOptions = auth.Options

// ClaimNames name the claims holding a token's grants; each claim is a list
// of strings (auth.ClaimNames).
type ClaimNames = auth.ClaimNames

// Grants are the permissions of one client, as carried by a token's claims
// (auth.Grants).
type Grants = auth.Grants

// Claims is the payload of a Switchyard token: the registered claims (exp is
// required; nbf, iat and sub are honoured or recorded) plus the grants
// (auth.Claims).
type Claims = auth.Claims

// ParsePublicKeys reads every PEM block of data as an RSA or ECDSA public key
// ("PUBLIC KEY", "RSA PUBLIC KEY" or a "CERTIFICATE" whose key is used).
func ParsePublicKeys(data []byte) ([]crypto.PublicKey, error) { return auth.ParsePublicKeys(data) }

type (
	// principal is an authenticated client and what it may do.
	principal = auth.Principal
	// authError is why a credential was refused.
	authError = auth.Error
)

// openPrincipal is the principal of every client when no key is configured.
var openPrincipal = auth.Open

// authenticator is the Router's auth.Authenticator with the two answers
// the router reads on every request kept as fields.
type authenticator struct {
	*auth.Authenticator
	enabled   bool       // a key is configured
	anonymous *principal // a client without a credential; nil: refused
}

func newAuthenticator(o AuthOptions) (*authenticator, error) {
	a, err := auth.New(o)
	if err != nil {
		return nil, err
	}
	return &authenticator{Authenticator: a, enabled: a.Enabled(), anonymous: a.Anonymous()}, nil
}

// withPolicyGrants returns o with the anonymous grants of the topic
// policies added to o.Anonymous: the pattern of every policy granting
// anonymous publish to its publish patterns, of every one granting
// anonymous subscribe to its subscribe patterns, after the global ones.
// Grants combine as a token's do, any pattern allowing, so a policy's
// grant adds to what the global patterns (and the other policies) allow
// and a policy without one takes nothing away. Without anonymous access
// (o.Anonymous nil: --allow-anonymous off) the policies grant nothing,
// and with no key configured every client may do everything anyway.
// o.Anonymous is copied, never modified.
func withPolicyGrants(o AuthOptions, policies []TopicPolicy) AuthOptions {
	if o.Anonymous == nil {
		return o
	}
	g := *o.Anonymous
	g.Publish, g.Subscribe = slices.Clone(g.Publish), slices.Clone(g.Subscribe)
	for _, p := range policies {
		if p.Anonymous.Publish && !slices.Contains(g.Publish, p.Pattern) {
			g.Publish = append(g.Publish, p.Pattern)
		}
		if p.Anonymous.Subscribe && !slices.Contains(g.Subscribe, p.Pattern) {
			g.Subscribe = append(g.Subscribe, p.Pattern)
		}
	}
	o.Anonymous = &g
	return o
}

// authenticate turns a credential (a JWT or the admin key; "" for none) into
// a principal.
func (a *authenticator) authenticate(cred string) (*principal, *authError) {
	return a.Authenticate(cred)
}

// refreshLead is how long before p.Expires the session is warned
// (auth.Authenticator.RefreshLead).
func (a *authenticator) refreshLead(p *principal, now time.Time) time.Duration {
	return a.RefreshLead(p, now)
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

// errNotBearer refuses an Authorization header of another scheme than
// Bearer (counted as an invalid credential).
var errNotBearer = &authError{Reason: auth.ErrBadCredential.Reason, Msg: "the Authorization header is not a bearer credential"}

// unauthorized counts a refused credential and returns the 401 error. A
// missing credential, or one not sent as a bearer one, is answered with
// hint (wire.HintToken, wire.HintUpgradeToken): how to send one.
func (rt *Router) unauthorized(c echo.Context, ae *authError, hint string) error {
	rt.lim.authFailures.WithLabelValues(ae.Reason).Inc()
	c.Response().Header().Set("WWW-Authenticate", `Bearer realm="switchyard"`)
	if ae == auth.ErrNoCredential || ae == errNotBearer {
		return perr(codeUnauthorized, "%s%s", ae.Msg, hint)
	}
	return perr(codeUnauthorized, "%s", ae.Msg)
}

// authWS authenticates a WebSocket upgrade or SSE stream: the
// Authorization header, else the credential of a ticket (ticket.go), else
// the token query parameter.
func (rt *Router) authWS(c echo.Context) (*principal, error) {
	hook := rt.hooks.enabled(hookConnect)
	a := rt.authSettings(c).auth
	if !a.enabled {
		if hook {
			return rt.hookConnect(c)
		}
		return openPrincipal, nil
	}
	cred, ok := bearer(c.Request())
	if !ok {
		return nil, rt.unauthorized(c, errNotBearer, wire.HintUpgradeToken)
	}
	if cred == "" {
		tcred, err := rt.ticketCredential(c)
		if err != nil {
			return nil, err
		}
		if tcred != "" {
			return rt.authenticateWS(c, a, tcred)
		}
		cred = c.QueryParam("token")
	}
	if cred == "" && hook {
		// A token's grants, else the application's answer.
		return rt.hookConnect(c)
	}
	return rt.authenticateWS(c, a, cred)
}

// authenticateWS authenticates an upgrade's credential.
func (rt *Router) authenticateWS(c echo.Context, a *authenticator, cred string) (*principal, error) {
	p, ae := a.authenticate(cred)
	if ae != nil {
		return nil, rt.unauthorized(c, ae, wire.HintUpgradeToken)
	}
	return p, nil
}

// authAPI is the middleware of the HTTP API: every /v1 call except the
// WebSocket endpoint (which authenticates itself) needs a credential once
// authentication is configured. The principal is left in the context.
func (rt *Router) authAPI(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		path := c.Request().URL.Path
		a := rt.settings().auth
		if !a.enabled || !strings.HasPrefix(path, "/v1/") || path == "/v1/ws" || path == "/v1/sse" {
			return next(c)
		}
		cred, ok := bearer(c.Request())
		if !ok {
			return rt.unauthorized(c, errNotBearer, wire.HintToken)
		}
		p, ae := a.authenticate(cred)
		if ae != nil {
			return rt.unauthorized(c, ae, wire.HintToken)
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
	if !rt.settings().auth.enabled {
		return openPrincipal
	}
	return &principal{Subject: "anonymous"}
}

// requireAdmin guards the admin calls.
func (rt *Router) requireAdmin(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !rt.principalOf(c).Admin {
			return rt.forbidden("admin", "%s", "this call needs the admin key"+wire.HintAdminKey)
		}
		return next(c)
	}
}

// requireGroup guards calls on one group (path parameter "group").
func (rt *Router) requireGroup(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if g := param(c, "group"); !rt.principalOf(c).CanJoin(g) {
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
		if p.Admin {
			return next(c)
		}
		if g := param(c, "group"); !p.CanJoin(g) {
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
			!p.CanSubscribe(*req.Pattern) {
			return rt.forbidden("subscribe", "not allowed to subscribe to %q", *req.Pattern)
		}
		return next(c)
	}
}

// DefaultJWKSRefresh is AuthOptions.JWKSRefresh's default.
const DefaultJWKSRefresh = auth.DefaultJWKSRefresh

// startJWKS registers the key set's metrics: the fetch counters go on
// across reloads (Router.jwksCounts counts the fetches of every key set
// the Router has had), the key count follows the set in force (zero
// without one). It starts the refresh goroutine of the first key set
// (runJWKS, reload.go).
func (rt *Router) startJWKS() {
	jwks := func() *auth.JWKS { return rt.settings().auth.JWKS() }
	const ns = "switchyard"
	for _, outcome := range []string{"ok", "error", "rate_limited"} {
		n := &rt.jwksCounts.OK
		switch outcome {
		case "error":
			n = &rt.jwksCounts.Failed
		case "rate_limited":
			n = &rt.jwksCounts.Limited
		}
		rt.opts.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: ns, Name: "jwks_fetches_total",
			Help:        "JWKS fetches by outcome (rate_limited: an unknown kid arrived within the minimum interval).",
			ConstLabels: prometheus.Labels{"outcome": outcome}}, func() float64 { return float64(n.Load()) }))
	}
	rt.opts.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "jwks_keys",
		Help: "Keys in the current JWKS."}, func() float64 {
		if j := jwks(); j != nil {
			return float64(j.Keys())
		}
		return 0
	}))
	rt.runJWKS(rt.settings())
}
