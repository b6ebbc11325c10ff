package router

// Live settings: the options a running Router takes again without a
// restart (Reload), and the one value every request and new session reads
// them from.
//
// The live options are held in one immutable value, liveSettings, behind
// an atomic pointer (Router.set). A request or a new session loads the
// pointer once and reads what it needs from that value: no lock on the
// delivery, publish or subscribe paths, and one consistent set of keys,
// limits and origins per decision. Reload builds the whole next value
// first (keys parsed, hooks client made, JWKS fetched) and swaps the
// pointer only when all of it succeeded, so a refused reload changes
// nothing.
//
// What a swap changes:
//
//   - Keys (HMAC secrets, public and named keys, JWKS URL or file,
//     audience, issuer, claim names, admin key, anonymous grants): every
//     credential checked after the swap (a connect, an HTTP call, a
//     refresh) is checked with the new keys, and so is the credential of
//     every open session (recheck.go): a session whose credential is
//     refused is closed (1008), one whose grants shrank loses the
//     subscriptions they no longer allow.
//   - Hooks (URL, which hooks, timeout, fail-open, headers, cookies, slots,
//     cache): calls made after the swap use the new client and an empty
//     cache; calls in flight finish on the old one.
//   - Allowed origins: WebSocket upgrades and cross-site HTTP requests
//     after the swap.
//   - Limits: MaxConnections and MaxConnectionsPerIP apply to the next
//     connect, counting the sessions already open (lowering them closes
//     nothing); ConnectRatePerIP starts fresh buckets; MaxTopics applies to
//     the next topic created. MaxSubscriptions, PublishRate and
//     PublishBurst are per session: a session keeps those it was admitted
//     with (its welcome announced them), new sessions get the new ones.
//     MaxLast applies to the next subscribe. MaxMessageBytes applies to
//     the next HTTP or embedded publish and to sessions admitted after the
//     swap (their welcome announces it; MQTT sessions keep the bound of
//     start, their packet limit); it may not rise past what the read
//     limit fixed at start lets a publish frame carry. HTTPPublishRate
//     starts fresh per-address buckets when it changes. TopicPolicies
//     apply to the next topic a publish or subscribe creates
//     (topic_policies.go), their max_last and presence to the next
//     subscribe, their MQTT retained setting to the next retained
//     PUBLISH, and their anonymous grants as the global ones do (they
//     are part of the keys' settings: auth.go's withPolicyGrants).
//
// Every other option is fixed when the Router is made (New) and Reload
// ignores it; the gateway refuses a reload that changes one, naming it.
//
// Concurrency: Reload is safe for concurrent use; reloads are serialized
// by reloadMu, a leaf lock held while the next value is built and
// swapped. Readers never lock.

import (
	"errors"
	"fmt"
	"slices"

	"github.com/switchyard/switchyard/router/internal/auth"
	"github.com/switchyard/switchyard/router/internal/limit"
)

// liveSettings are the options Reload may change, as one immutable value:
// never modified once stored in Router.set.
type liveSettings struct {
	auth             *authenticator
	authOpts         AuthOptions // what auth was made from, to tell whether a reload changed it
	origins          []string
	maxSubscriptions int
	publishRate      float64
	publishBurst     int
	maxLast          int
	maxTopics        int
	maxConns         int
	maxConnsPerIP    int
	connectRate      float64
	connect          *limit.PerIP // buckets of connectRate
	maxMessageBytes  int
	httpPublishRate  float64
	httpPublish      *limit.PerIP // buckets of httpPublishRate
	policies         []TopicPolicy
	// jwksStop stops the refresh goroutine of auth's JWKS, if any; closed
	// when the next settings replace these or at Shutdown.
	jwksStop chan struct{}
}

// newLiveSettings builds the live settings of opts (defaults applied);
// reuse, when not nil, are the running ones whose per-address connect
// buckets are kept when the rate is unchanged; jwks counts the fetches of
// the key set, if any, across reloads (the jwks_fetches_total counters).
func newLiveSettings(opts Options, reuse *liveSettings, jwks *auth.FetchCounts) (*liveSettings, error) {
	if err := checkPolicies(opts.TopicPolicies); err != nil {
		return nil, err
	}
	opts.Auth.JWKSCounts = jwks
	opts.Auth = withPolicyGrants(opts.Auth, opts.TopicPolicies) // auth.go
	a, err := newAuthenticator(opts.Auth)
	if err != nil {
		return nil, err
	}
	s := &liveSettings{
		auth:             a,
		authOpts:         opts.Auth,
		origins:          slices.Clone(opts.OriginPatterns),
		maxSubscriptions: opts.MaxSubscriptions,
		publishRate:      opts.PublishRate,
		publishBurst:     opts.PublishBurst,
		maxLast:          opts.MaxLast,
		maxTopics:        opts.MaxTopics,
		maxConns:         opts.MaxConnections,
		maxConnsPerIP:    opts.MaxConnectionsPerIP,
		connectRate:      opts.ConnectRatePerIP,
		maxMessageBytes:  opts.MaxMessageBytes,
		httpPublishRate:  opts.HTTPPublishRate,
		policies:         slices.Clone(opts.TopicPolicies),
		jwksStop:         make(chan struct{}),
	}
	if reuse != nil && reuse.connectRate == s.connectRate {
		s.connect = reuse.connect
	} else {
		s.connect = limit.NewPerIP(s.connectRate)
	}
	if reuse != nil && reuse.httpPublishRate == s.httpPublishRate {
		s.httpPublish = reuse.httpPublish
	} else {
		s.httpPublish = limit.NewPerIP(s.httpPublishRate)
	}
	return s, nil
}

// settings returns the live settings now in force. Load it once per
// decision.
func (rt *Router) settings() *liveSettings { return rt.set.Load() }

// Reload applies the live options of opts to the running Router (see the
// list at the top of reload.go); every other field of opts is ignored.
// Defaults are applied to opts as New does. Reload is all or nothing: when
// the keys do not parse, the hooks are misconfigured or a JWKS URL cannot
// be read, it returns why and the running settings stay.
func (rt *Router) Reload(opts Options) error {
	// withDefaults of opts alone: the fields it derives from fixed
	// options (the read limit, the read budget) are not used here.
	opts = opts.withDefaults()
	rt.reloadMu.Lock()
	defer rt.reloadMu.Unlock()
	if rt.closing.Load() {
		// Checked under reloadMu: Shutdown waits for a Reload under way
		// before it waits for the goroutines (a JWKS refresh) it starts.
		return errors.New("router: shutting down")
	}
	if frame := int64(opts.MaxMessageBytes + PublishEnvelopeBytes(rt.opts.Bounds)); frame > rt.opts.Session.ReadLimit {
		return fmt.Errorf("router: MaxMessageBytes (--max-message-bytes) %d needs publish frames of up to %d bytes, past the largest frame fixed at start (%d bytes, --max-frame-bytes); restart to raise it past %d",
			opts.MaxMessageBytes, frame, rt.opts.Session.ReadLimit, rt.opts.Session.ReadLimit-int64(PublishEnvelopeBytes(rt.opts.Bounds)))
	}
	old := rt.settings()
	next, err := newLiveSettings(opts, old, rt.jwksCounts)
	if err != nil {
		return err
	}
	if j := next.auth.JWKS(); j != nil && opts.Auth.JWKSURL != "" {
		if ok, _, _ := j.Fetches(); ok == 0 {
			return fmt.Errorf("router: the JWKS at %s could not be read: %s", opts.Auth.JWKSURL, j.LastError())
		}
	}
	h, err := newHooks(opts.Hooks, rt.hookm)
	if err != nil {
		return err
	}
	rt.limits.conns.SetMax(next.maxConns, next.maxConnsPerIP)
	rt.hooks.use(h, rt.hookm)
	rt.set.Store(next)
	close(old.jwksStop)
	rt.runJWKS(next)
	if keysChanged(old, next) {
		rt.recheckStart(next)
	}
	return nil
}

// runJWKS starts the refresh goroutine of s's JWKS, if it has one; it
// exits when s is replaced (s.jwksStop) or at Shutdown (stopBG).
func (rt *Router) runJWKS(s *liveSettings) {
	j := s.auth.JWKS()
	if j == nil {
		return
	}
	if ok, _, _ := j.Fetches(); ok == 0 && j.LastError() != "" {
		rt.log.Warn("JWKS not loaded yet; tokens are refused until it is", "err", j.LastError())
	}
	j.OnKeysDropped(func() { rt.recheckDropped(s) })
	stop := make(chan struct{})
	rt.wg.Add(2)
	go func() {
		defer rt.wg.Done()
		defer close(stop)
		select {
		case <-s.jwksStop:
		case <-rt.stopBG:
		}
	}()
	go func() {
		defer rt.wg.Done()
		j.Run(stop, rt.log.Warn)
	}()
}

// recheckDropped re-checks every open session with s, as a reload that
// changes the keys does, after a refresh of s's JWKS dropped a key; a
// reload that replaced s (and re-checks by itself) or a Shutdown under
// way make it a no-op. recheckStart wants reloadMu held.
func (rt *Router) recheckDropped(s *liveSettings) {
	rt.reloadMu.Lock()
	defer rt.reloadMu.Unlock()
	if rt.closing.Load() || rt.settings() != s {
		return
	}
	rt.log.Info("the JWKS refresh dropped a key; checking the open sessions again")
	rt.recheckStart(s)
}
