package router

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/internal/wire"
)

// Backend authorization hooks.
//
// Instead of (or besides) minting tokens with pattern grants, an
// application can answer the gateway's questions over HTTP. With
// HookOptions.URL set, the gateway POSTs a JSON body to URL+"/connect",
// URL+"/subscribe" or URL+"/publish", for the hooks that are enabled only:
//
//   - connect: a WebSocket upgrade or an SSE stream (GET /v1/sse) without
//     a token (or any of them when no key is configured). The body holds the configured request headers and
//     cookies and the client's address; the answer names the user, and may
//     give grants, info (shown to presence subscribers) and an expiry.
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
// unavailable) unless HookOptions.FailOpen allows subscribe and publish.
//
// Bounds: at most HookOptions.MaxConcurrent requests are outstanding; a
// call that cannot get a slot within its timeout fails as "overloaded", so
// a slow backend makes callers wait at most the timeout and never piles up
// requests or goroutines (calls run on the caller's goroutine: the HTTP
// handler of the upgrade, SSE stream or publish, or the session's reader). The subscribe cache is
// bounded in entries and bytes (least recently used entries go first).
// A connect is asked about only once it has passed every local limit
// (admitConn), and one client IP has at most HookOptions.MaxConcurrentPerIP
// connect calls in flight, so an address cannot take every slot.
//
// Concurrency: a hooks value is safe for concurrent use; the cache and the
// per-IP connect counts have a leaf mutex each.

// Hook names, also the last path segment of their URL and the "hook"
// metric label.
const (
	hookConnect   = "connect"
	hookSubscribe = "subscribe"
	hookPublish   = "publish"
)

// Defaults of HookOptions.
const (
	defaultHookTimeout    = 2 * time.Second // a backend answering slower than this is treated as down
	defaultHookConcurrent = 64              // enough for a few thousand connects per second at 10-20 ms each
	defaultHookCacheCount = 10000
	defaultHookCacheBytes = 4 << 20
	maxHookAnswerBytes    = 64 << 10
	maxHookInfoBytes      = 4 << 10
	maxHookCacheTTL       = time.Hour
)

// HookOptions configure the backend authorization hooks. The zero value
// configures none.
type HookOptions struct {
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

// hooks calls the backend. nil when no hook is configured.
type hooks struct {
	opts    HookOptions
	client  *http.Client
	slots   chan struct{}
	cache   *hookCache
	calls   *prometheus.CounterVec   // hook, outcome
	latency *prometheus.HistogramVec // hook
	now     func() time.Time

	ipMu sync.Mutex     // guards byIP; a leaf lock
	byIP map[string]int // connect calls in flight per client IP, none at 0
}

// takeIPShare counts a connect call for ip, from before it waits for a
// slot until it is answered, unless ip already has MaxConcurrentPerIP;
// done gives it back.
func (h *hooks) takeIPShare(ip string) (done func(), ok bool) {
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

func newHooks(o HookOptions, m *hookMetrics) (*hooks, error) {
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
		o.Timeout = defaultHookTimeout
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = defaultHookConcurrent
	}
	if o.MaxConcurrentPerIP <= 0 {
		o.MaxConcurrentPerIP = max(1, o.MaxConcurrent/4)
	}
	if o.CacheEntries <= 0 {
		o.CacheEntries = defaultHookCacheCount
	}
	if o.CacheBytes <= 0 {
		o.CacheBytes = defaultHookCacheBytes
	}
	h := &hooks{opts: o, client: o.Client, slots: make(chan struct{}, o.MaxConcurrent), byIP: map[string]int{}, now: time.Now}
	if h.client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxConnsPerHost = o.MaxConcurrent
		tr.MaxIdleConnsPerHost = o.MaxConcurrent
		h.client = &http.Client{Transport: tr}
	}
	h.cache = newHookCache(o.CacheEntries, o.CacheBytes)
	h.calls, h.latency = m.calls, m.latency
	m.hooks.Store(h)
	return h, nil
}

// hookMetrics are registered whether or not hooks are configured, so that
// dashboards and alerts find their series at zero.
type hookMetrics struct {
	calls   *prometheus.CounterVec   // hook, outcome
	latency *prometheus.HistogramVec // hook
	hooks   atomic.Pointer[hooks]    // nil without hooks
}

func newHookMetrics(reg prometheus.Registerer) *hookMetrics {
	const ns = "switchyard"
	m := &hookMetrics{}
	m.calls = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "hook_calls_total",
		Help: "Authorization hook calls by hook (connect, subscribe, publish) and outcome (allow, refuse, cached, timeout, overloaded, error, malformed)."},
		[]string{"hook", "outcome"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Name: "hook_seconds",
		Help: "Time of authorization hook requests (not counting cache hits or waits for a slot that failed).", Buckets: prometheus.ExponentialBuckets(0.001, 4, 8)},
		[]string{"hook"})
	for _, h := range []string{hookConnect, hookSubscribe, hookPublish} {
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
				return float64(h.cache.len())
			}
			return 0
		}))
	return m
}

// enabled reports whether the named hook is configured; h may be nil.
func (h *hooks) enabled(name string) bool {
	if h == nil {
		return false
	}
	switch name {
	case hookConnect:
		return h.opts.Connect
	case hookSubscribe:
		return h.opts.Subscribe
	case hookPublish:
		return h.opts.Publish
	}
	return false
}

func (h *hooks) timeout(name string) time.Duration {
	d := time.Duration(0)
	switch name {
	case hookConnect:
		d = h.opts.ConnectTimeout
	case hookSubscribe:
		d = h.opts.SubscribeTimeout
	case hookPublish:
		d = h.opts.PublishTimeout
	}
	if d <= 0 {
		d = h.opts.Timeout
	}
	return d
}

// hookAnswer is every hook's reply.
type hookAnswer struct {
	Allow   *bool             `json:"allow"`
	Code    string            `json:"code"`
	Message string            `json:"message"`
	User    string            `json:"user"`
	Grants  *Grants           `json:"grants"`
	Info    json.RawMessage   `json:"info"`
	Expires string            `json:"expires"`
	CacheMS int64             `json:"cache_ttl_ms"`
	Data    json.RawMessage   `json:"data"`
	Headers map[string]string `json:"headers"`
}

// errHookFailed is a hook that did not answer usably; outcome says how.
type errHookFailed struct{ outcome string }

func (e *errHookFailed) Error() string { return "hook " + e.outcome }

// call POSTs body to the named hook and decodes the answer. It waits at
// most the hook's timeout in all, slot included.
func (h *hooks) call(ctx context.Context, name string, body any) (*hookAnswer, error) {
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
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxHookAnswerBytes+1))
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
	var a hookAnswer
	if len(data) > maxHookAnswerBytes || json.Unmarshal(data, &a) != nil || a.Allow == nil {
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

// refusal turns a refusing answer into a protocol error; only the client
// codes a backend may choose are passed on.
func (a *hookAnswer) refusal() *protoError {
	code := a.Code
	switch code {
	case codeUnauthorized, codeForbidden, codeRateLimited, codeBadRequest, codeUnknownTopic:
	default:
		code = codeForbidden
	}
	msg := a.Message
	if msg == "" {
		msg = "refused by the application"
	}
	if len(msg) > 256 {
		msg = msg[:256]
	}
	return perr(code, "%s", msg)
}

// failed is the answer to a request whose hook failed.
func (h *hooks) failed(name string) *protoError {
	return perr(codeUnavailable, "the %s authorization backend is unavailable; retry later", name)
}

// hookConnect asks the connect hook about a WebSocket upgrade or SSE
// stream, within the client IP's share of the hook's slots.
func (rt *Router) hookConnect(c echo.Context) (*principal, error) {
	r := c.Request()
	ip := c.RealIP()
	done, ok := rt.hooks.takeIPShare(ip)
	if !ok {
		c.Response().Header().Set("Retry-After", "1")
		return nil, refuse(limitConnectHookAddr, codeRateLimited,
			"%d connects from this address are waiting for the application; retry later", rt.hooks.opts.MaxConcurrentPerIP)
	}
	defer done()
	body := map[string]any{"hook": hookConnect, "remote_addr": ip}
	if hs := rt.hooks.opts.Headers; len(hs) > 0 {
		m := map[string]string{}
		for _, name := range hs {
			if v := r.Header.Get(name); v != "" {
				m[name] = v
			}
		}
		body["headers"] = m
	}
	if cs := rt.hooks.opts.Cookies; len(cs) > 0 {
		m := map[string]string{}
		for _, name := range cs {
			if ck, err := r.Cookie(name); err == nil {
				m[name] = ck.Value
			}
		}
		body["cookies"] = m
	}
	a, err := rt.hooks.call(r.Context(), hookConnect, body)
	if err != nil {
		return nil, rt.hooks.failed(hookConnect)
	}
	if !*a.Allow {
		pe := a.refusal()
		if pe.Code != codeUnauthorized {
			pe.Code = codeForbidden
		}
		return nil, pe
	}
	p := &principal{subject: a.User}
	if a.Grants != nil {
		g, err := validGrants(*a.Grants)
		if err != nil {
			rt.hooks.calls.WithLabelValues(hookConnect, "malformed").Inc()
			return nil, rt.hooks.failed(hookConnect)
		}
		p.grants = g
	}
	if len(a.Info) > 0 && string(a.Info) != "null" {
		var buf bytes.Buffer
		if len(a.Info) > maxHookInfoBytes || json.Compact(&buf, a.Info) != nil {
			rt.hooks.calls.WithLabelValues(hookConnect, "malformed").Inc()
			return nil, rt.hooks.failed(hookConnect)
		}
		p.info = buf.Bytes()
	}
	if a.Expires != "" {
		exp, err := time.Parse(time.RFC3339, a.Expires)
		if err != nil {
			rt.hooks.calls.WithLabelValues(hookConnect, "malformed").Inc()
			return nil, rt.hooks.failed(hookConnect)
		}
		p.expires = exp
	}
	return p, nil
}

// authorizeSubscribe decides a subscription: the session's grants, else
// the subscribe hook (cached per user, pattern and group). viaHook reports
// that the hook allowed it.
func (cn *conn) authorizeSubscribe(pattern, group string) (viaHook bool, pe *protoError) {
	who := cn.who
	grantsOK := who.canSubscribe(pattern)
	groupOK := group == "" || who.canJoin(group)
	if grantsOK && groupOK {
		return false, nil
	}
	h := cn.rt.hooks
	if !h.enabled(hookSubscribe) {
		if !grantsOK {
			return false, cn.rt.forbidden("subscribe", "not allowed to subscribe to %q", pattern)
		}
		return false, cn.rt.forbidden("group", "not allowed to join group %q", group)
	}
	key := who.subject + "\x00" + group + "\x00" + pattern
	if who.subject != "" {
		if e, ok := h.cache.get(key, h.now()); ok {
			h.calls.WithLabelValues(hookSubscribe, "cached").Inc()
			if e.allow {
				return true, nil
			}
			cn.rt.lim.forbidden.WithLabelValues("subscribe").Inc()
			return false, &protoError{Code: e.code, Msg: e.msg}
		}
	}
	body := map[string]any{"hook": hookSubscribe, "session": cn.id, "user": who.subject, "pattern": pattern}
	if group != "" {
		body["group"] = group
	}
	a, err := h.call(cn.ctx, hookSubscribe, body)
	if err != nil {
		if h.opts.FailOpen {
			return true, nil
		}
		return false, h.failed(hookSubscribe)
	}
	var refusal *protoError
	if !*a.Allow {
		refusal = a.refusal()
	}
	if ttl := time.Duration(a.CacheMS) * time.Millisecond; ttl > 0 && who.subject != "" {
		e := hookCacheEntry{allow: refusal == nil}
		if refusal != nil {
			e.code, e.msg = refusal.Code, refusal.Msg
		}
		h.cache.put(key, e, h.now().Add(min(ttl, maxHookCacheTTL)))
	}
	if refusal != nil {
		cn.rt.lim.forbidden.WithLabelValues("subscribe").Inc()
		return false, refusal
	}
	return true, nil
}

// authorizePublish decides a publish: the session's grants, else the
// publish hook, whose answer may replace the data and headers of msg.
func (cn *conn) authorizePublish(req *request, data *[]byte, headers *map[string]string, topic string) *protoError {
	if cn.who.canPublish(topic) {
		return nil
	}
	if !cn.rt.hooks.enabled(hookPublish) {
		return cn.rt.forbidden("publish", "not allowed to publish to %q", topic)
	}
	cn.flushDeferred() // before the round trip (deferral.go)
	return cn.rt.hookPublish(cn.ctx, cn.id, cn.who, req.Key, data, headers, topic)
}

// hookPublish asks the publish hook about a publish the grants of who do
// not allow, for a WebSocket session (session is its id) or POST
// /v1/publish (session ""). An allowing answer may replace *data and
// *headers. The hook must be enabled.
func (rt *Router) hookPublish(ctx context.Context, session string, who *principal, key *string, data *[]byte, headers *map[string]string, topic string) *protoError {
	h := rt.hooks
	body := map[string]any{"hook": hookPublish, "user": who.subject, "topic": topic, "data": json.RawMessage(*data)}
	if session != "" {
		body["session"] = session
	}
	binary := wire.IsBinary(*headers) // bytes: base64 for the hook, as for readers
	if binary {
		body["data"], body["encoding"] = wire.DataField(*data, true)
	}
	if hs := wire.UserHeaders(*headers); len(hs) > 0 {
		body["headers"] = hs
	}
	if key != nil {
		body["key"] = *key
	}
	a, err := h.call(ctx, hookPublish, body)
	if err != nil {
		if h.opts.FailOpen {
			return nil
		}
		return h.failed(hookPublish)
	}
	if !*a.Allow {
		rt.lim.forbidden.WithLabelValues("publish").Inc()
		return a.refusal()
	}
	if len(a.Data) > 0 {
		var buf bytes.Buffer
		if json.Compact(&buf, a.Data) != nil {
			return h.failed(hookPublish)
		}
		if max := rt.opts.MaxMessageBytes; max > 0 && buf.Len() > max {
			return perr(codeTooLarge, "the data the application returned is %d bytes; the limit is %d", buf.Len(), max)
		}
		*data, binary = buf.Bytes(), false
		*headers = wire.UserHeaders(*headers)
	}
	if a.Headers != nil {
		*headers = wire.UserHeaders(a.Headers)
	}
	if binary {
		*headers = wire.MarkBinary(*headers, *data)
	}
	return nil
}

// hookMember reports whether the session is in group by a subscription the
// subscribe hook allowed (so it may ack and nack there).
func (cn *conn) hookMember(group string) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for k, s := range cn.subs {
		if k.group == group && s.hookAllowed {
			return true
		}
	}
	return false
}

// hookCache is a bounded LRU of subscribe answers. It is safe for
// concurrent use; mu is a leaf lock.
type hookCache struct {
	maxCount, maxBytes int

	mu    sync.Mutex // guards the fields below
	bytes int
	order *list.List // of *hookCacheItem, most recent first
	items map[string]*list.Element
}

type hookCacheEntry struct {
	allow     bool
	code, msg string
}

type hookCacheItem struct {
	key     string
	entry   hookCacheEntry
	expires time.Time
}

// hookCacheOverhead approximates the bytes of an entry beyond its strings.
const hookCacheOverhead = 160

func (it *hookCacheItem) size() int {
	return len(it.key) + len(it.entry.code) + len(it.entry.msg) + hookCacheOverhead
}

func newHookCache(count, bytes int) *hookCache {
	return &hookCache{maxCount: count, maxBytes: bytes, order: list.New(), items: map[string]*list.Element{}}
}

func (c *hookCache) get(key string, now time.Time) (hookCacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return hookCacheEntry{}, false
	}
	it := el.Value.(*hookCacheItem)
	if !now.Before(it.expires) {
		c.removeLocked(el)
		return hookCacheEntry{}, false
	}
	c.order.MoveToFront(el)
	return it.entry, true
}

func (c *hookCache) put(key string, e hookCacheEntry, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.removeLocked(el)
	}
	it := &hookCacheItem{key: key, entry: e, expires: expires}
	if it.size() > c.maxBytes {
		return
	}
	c.items[key] = c.order.PushFront(it)
	c.bytes += it.size()
	for len(c.items) > c.maxCount || c.bytes > c.maxBytes {
		c.removeLocked(c.order.Back())
	}
}

func (c *hookCache) removeLocked(el *list.Element) {
	it := c.order.Remove(el).(*hookCacheItem)
	delete(c.items, it.key)
	c.bytes -= it.size()
}

func (c *hookCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}
