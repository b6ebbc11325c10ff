// Package hooks is the client of the backend authorization hooks.
//
// Instead of (or besides) minting tokens with pattern grants, an
// application can answer the gateway's questions over HTTP. With
// Options.URL set, the gateway POSTs a JSON body to URL+"/connect",
// URL+"/subscribe" or URL+"/publish", for the hooks that are enabled only:
//
//   - connect: a WebSocket upgrade or an SSE stream (GET /v1/sse) without
//     a token (or any of them when no key is configured). The body holds
//     the configured request headers and cookies and the client's address;
//     the answer names the user, and may give grants, info (shown to
//     presence subscribers) and an expiry.
//   - subscribe: a subscription the session's grants do not allow. Answers
//     may be cached per (user, pattern, group) for the TTL they carry.
//   - publish: a publish the session's grants (or, for POST /v1/publish,
//     the token's) do not allow. An allowing answer may replace the
//     record's data and headers.
//
// A token's grants always come first: a hook is asked only about what they
// do not allow. Every answer is {"allow":true,…} or
// {"allow":false,"code":"…","message":"…"}; anything else (another HTTP
// status, a body that is not such an object, no answer within the hook's
// timeout) is a failure, which refuses the request (fail closed: connect
// with 503 unavailable, subscribe and publish with the error code
// unavailable) unless Options.FailOpen allows subscribe and publish.
//
// Bounds: at most Options.MaxConcurrent requests are outstanding; a
// call that cannot get a slot within its timeout fails as "overloaded", so
// a slow backend makes callers wait at most the timeout and never piles up
// requests or goroutines (calls run on the caller's goroutine: the HTTP
// handler of the upgrade, SSE stream or publish, or the session's reader).
// The subscribe cache is bounded in entries and bytes (least recently used
// entries go first).
// A connect is asked about only once it has passed every local limit
// (the router's admitConn), and one client IP has at most Options.MaxConcurrentPerIP
// connect calls in flight, so an address cannot take every slot.
//
// The router decides with the answers (router/hooks.go); this package
// holds the HTTP client, its slots, the answer's shape, the refusal as a
// protocol error, the subscribe cache and the hooks' metrics.
//
// Concurrency: a Client is safe for concurrent use; the cache and the
// per-IP connect counts have a leaf mutex each. A Client starts no
// goroutine: calls run on their caller's.
package hooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/router/internal/auth"
)

// Hook names, also the last path segment of their URL and the "hook"
// metric label.
const (
	Connect   = "connect"
	Subscribe = "subscribe"
	Publish   = "publish"
)

// Defaults of Options.
const (
	// DefaultTimeout bounds a hook call when Options set none: a backend
	// answering slower than this is treated as down.
	DefaultTimeout       = 2 * time.Second
	DefaultMaxConcurrent = 64 // enough for a few thousand connects per second at 10-20 ms each
	DefaultCacheEntries  = 10000
	DefaultCacheBytes    = 4 << 20
	maxAnswerBytes       = 64 << 10
	// MaxInfoBytes bounds the info a connect answer may give.
	MaxInfoBytes = 4 << 10
	// MaxCacheTTL bounds the TTL an answer may ask to be cached for.
	MaxCacheTTL = time.Hour
)

// Options configure the backend authorization hooks. The zero value
// configures none.
type Options struct {
	// URL is the base URL of the hooks; each enabled hook is POSTed to
	// URL + "/" + its name. Default: none (no hooks).
	URL string
	// Connect, Subscribe and Publish enable each hook; only enabled hooks
	// are called. Default: none.
	Connect, Subscribe, Publish bool
	// Timeout bounds each hook call, including the wait for a free slot.
	// Default: 2s. ConnectTimeout, SubscribeTimeout and PublishTimeout
	// override it per hook.
	Timeout                                          time.Duration
	ConnectTimeout, SubscribeTimeout, PublishTimeout time.Duration
	// FailOpen allows subscribes and publishes when their hook fails
	// (timeout, error, malformed answer). Default: false, fail closed.
	// A failed connect hook always refuses the connection.
	FailOpen bool
	// Headers are the names of request headers sent to the connect hook;
	// Cookies the names of cookies. Default: none (nothing of the request
	// is forwarded but the client's address).
	Headers []string
	Cookies []string
	// MaxConcurrent bounds the hook requests in flight. Default: 64.
	MaxConcurrent int
	// MaxConcurrentPerIP bounds the connect hook calls of one client IP
	// in flight or waiting for a slot; a connect past it is refused at
	// once with 429 rate_limited, so one address cannot take every slot
	// and make other addresses' connects wait. Default: a quarter of
	// MaxConcurrent (16), at least 1.
	MaxConcurrentPerIP int
	// CacheEntries and CacheBytes bound the cache of subscribe answers.
	// Default: 10000 entries, 4 MiB.
	CacheEntries int
	CacheBytes   int
	// Client sends the requests. Default: a client whose transport keeps
	// at most MaxConcurrent connections to the backend.
	Client *http.Client
}

// Client calls the backend.
type Client struct {
	opts    Options
	client  *http.Client
	slots   chan struct{}
	cache   *Cache
	calls   *prometheus.CounterVec   // hook, outcome
	latency *prometheus.HistogramVec // hook
	now     func() time.Time

	ipMu sync.Mutex     // guards byIP; a leaf lock
	byIP map[string]int // connect calls in flight per client IP, none at 0
}

// TakeIPShare counts a connect call for ip, from before it waits for a
// slot until it is answered, unless ip already has MaxConcurrentPerIP;
// done gives it back.
func (h *Client) TakeIPShare(ip string) (done func(), ok bool) {
	h.ipMu.Lock()
	defer h.ipMu.Unlock()
	if h.byIP[ip] >= h.opts.MaxConcurrentPerIP {
		return nil, false
	}
	h.byIP[ip]++
	return func() {
		h.ipMu.Lock()
		defer h.ipMu.Unlock()
		if h.byIP[ip]--; h.byIP[ip] <= 0 {
			delete(h.byIP, ip)
		}
	}, true
}

// New checks o and builds its Client; nil (and no error) when o enables no
// hook. m are the metrics the client counts in.
func New(o Options, m *Metrics) (*Client, error) {
	if o.URL == "" || !(o.Connect || o.Subscribe || o.Publish) {
		if o.Connect || o.Subscribe || o.Publish {
			return nil, errors.New("router: hooks are enabled but HookOptions.URL is empty")
		}
		return nil, nil
	}
	if !strings.HasPrefix(o.URL, "http://") && !strings.HasPrefix(o.URL, "https://") {
		return nil, errors.New("router: HookOptions.URL must be an http or https URL")
	}
	o.URL = strings.TrimRight(o.URL, "/")
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = DefaultMaxConcurrent
	}
	if o.MaxConcurrentPerIP <= 0 {
		o.MaxConcurrentPerIP = max(1, o.MaxConcurrent/4)
	}
	if o.CacheEntries <= 0 {
		o.CacheEntries = DefaultCacheEntries
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = DefaultCacheBytes
	}
	h := &Client{opts: o, client: o.Client, slots: make(chan struct{}, o.MaxConcurrent), byIP: map[string]int{}, now: time.Now}
	if h.client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxConnsPerHost = o.MaxConcurrent
		tr.MaxIdleConnsPerHost = o.MaxConcurrent
		h.client = &http.Client{Transport: tr}
	}
	h.cache = NewCache(o.CacheEntries, o.CacheBytes)
	h.calls, h.latency = m.calls, m.latency
	return h, nil
}

// Metrics are registered whether or not hooks are configured, so that
// dashboards and alerts find their series at zero. The counters go on
// across the clients made with them; the gauges show the client in force
// (Track).
type Metrics struct {
	calls   *prometheus.CounterVec   // hook, outcome
	latency *prometheus.HistogramVec // hook
	hooks   atomic.Pointer[Client]   // the client the gauges show; nil without hooks
}

// Track makes the gauges show h, the client now in force; nil (no hook
// enabled) sets them to zero, so that a client replaced or removed leaves
// no value of its own behind.
func (m *Metrics) Track(h *Client) { m.hooks.Store(h) }

// NewMetrics registers the hooks' metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns = "switchyard"
	m := &Metrics{}
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "hook_calls_total",
		Help: "Authorization hook calls by hook (connect, subscribe, publish) and outcome (allow, refuse, cached, timeout, overloaded, error, malformed)."},
		[]string{"hook", "outcome"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "hook_seconds",
		Help: "Time of authorization hook requests (not counting cache hits or waits for a slot that failed).", Buckets: prometheus.ExponentialBuckets(0.001, 4, 8)},
		[]string{"hook"})
	for _, h := range []string{Connect, Subscribe, Publish} {
		m.latency.WithLabelValues(h)
		for _, o := range []string{"allow", "refuse", "cached", "timeout", "overloaded", "error", "malformed"} {
			m.calls.WithLabelValues(h, o)
		}
	}
	reg.MustRegister(m.calls, m.latency,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "hook_in_flight",
			Help: "Authorization hook requests in flight."}, func() float64 {
			if h := m.hooks.Load(); h != nil {
				return float64(len(h.slots))
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "hook_cache_entries",
			Help: "Cached subscribe hook answers."}, func() float64 {
			if h := m.hooks.Load(); h != nil {
				return float64(h.cache.Len())
			}
			return 0
		}))
	return m
}

// Enabled reports whether the named hook is configured; h may be nil.
func (h *Client) Enabled(name string) bool {
	if h == nil {
		return false
	}
	switch name {
	case Connect:
		return h.opts.Connect
	case Subscribe:
		return h.opts.Subscribe
	case Publish:
		return h.opts.Publish
	}
	return false
}

func (h *Client) timeout(name string) time.Duration {
	d := time.Duration(0)
	switch name {
	case Connect:
		d = h.opts.ConnectTimeout
	case Subscribe:
		d = h.opts.SubscribeTimeout
	case Publish:
		d = h.opts.PublishTimeout
	}
	if d <= 0 {
		d = h.opts.Timeout
	}
	return d
}

// Answer is every hook's reply.
type Answer struct {
	Allow   *bool             `json:"allow"`
	Code    string            `json:"code"`
	Message string            `json:"message"`
	User    string            `json:"user"`
	Grants  *auth.Grants      `json:"grants"`
	Info    json.RawMessage   `json:"info"`
	Expires string            `json:"expires"`
	CacheMS int64             `json:"cache_ttl_ms"`
	Data    json.RawMessage   `json:"data"`
	Headers map[string]string `json:"headers"`
}

// errHookFailed is a hook that did not answer usably; outcome says how.
type errHookFailed struct{ outcome string }

func (e *errHookFailed) Error() string { return "hook " + e.outcome }

// Call POSTs body to the named hook and decodes the answer. It waits at
// most the hook's timeout in all, slot included.
func (h *Client) Call(ctx context.Context, name string, body any) (*Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, h.timeout(name))
	defer cancel()
	select {
	case h.slots <- struct{}{}:
	case <-ctx.Done():
		h.calls.WithLabelValues(name, "overloaded").Inc()
		return nil, &errHookFailed{"overloaded"}
	}
	defer func() { <-h.slots }()
	payload, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.opts.URL+"/"+name, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := h.client.Do(req)
	if err != nil {
		h.latency.WithLabelValues(name).Observe(time.Since(start).Seconds())
		outcome := "error"
		if ctx.Err() != nil {
			outcome = "timeout"
		}
		h.calls.WithLabelValues(name, outcome).Inc()
		return nil, &errHookFailed{outcome}
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes+1))
	resp.Body.Close()
	h.latency.WithLabelValues(name).Observe(time.Since(start).Seconds())
	switch {
	case err != nil && ctx.Err() != nil:
		h.calls.WithLabelValues(name, "timeout").Inc()
		return nil, &errHookFailed{"timeout"}
	case err != nil || resp.StatusCode != http.StatusOK:
		h.calls.WithLabelValues(name, "error").Inc()
		return nil, &errHookFailed{"error"}
	}
	var a Answer
	if len(data) > maxAnswerBytes || json.Unmarshal(data, &a) != nil || a.Allow == nil {
		h.calls.WithLabelValues(name, "malformed").Inc()
		return nil, &errHookFailed{"malformed"}
	}
	if *a.Allow {
		h.calls.WithLabelValues(name, "allow").Inc()
	} else {
		h.calls.WithLabelValues(name, "refuse").Inc()
	}
	return &a, nil
}

// Refusal turns a refusing answer into a protocol error; only the client
// codes a backend may choose are passed on.
func (a *Answer) Refusal() *wire.Error {
	code := a.Code
	switch code {
	case wire.CodeUnauthorized, wire.CodeForbidden, wire.CodeRateLimited, wire.CodeBadRequest, wire.CodeUnknownTopic:
	default:
		code = wire.CodeForbidden
	}
	msg := a.Message
	if msg == "" {
		msg = "refused by the application"
	}
	if len(msg) > 256 {
		msg = msg[:256]
	}
	return wire.Errorf(code, "%s", msg)
}

// Failed is the answer to a request whose hook failed.
func (h *Client) Failed(name string) *wire.Error {
	return wire.Errorf(wire.CodeUnavailable, "the %s authorization backend is unavailable; retry later", name)
}

// Options is the client's configuration with every default applied.
func (h *Client) Options() Options { return h.opts }

// Cache is the cache of subscribe answers.
func (h *Client) Cache() *Cache { return h.cache }

// Count counts one call of the named hook with outcome (allow, refuse,
// cached, timeout, overloaded, error, malformed) in hook_calls_total: for
// the outcomes the router decides, a cached answer or an answer it finds
// malformed.
func (h *Client) Count(name, outcome string) { h.calls.WithLabelValues(name, outcome).Inc() }

// Now is the client's clock, for cache expiry.
func (h *Client) Now() time.Time { return h.now() }
