package router

// The decision glue of the backend authorization hooks: when to ask, what
// to send, and what the answer does to the session, the subscription or the
// publish. The HTTP client, its slots, the answer's shape and the subscribe
// cache are in router/internal/hooks, whose package doc describes the hooks.

import (
	"bytes"
	"context"
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/router/internal/auth"
	hookc "github.com/switchyard/switchyard/router/internal/hooks"
)

// HookOptions configure the backend authorization hooks (hooks.Options).
// The zero value configures none.
type HookOptions = hookc.Options

// Hook names, also the last path segment of their URL and the "hook"
// metric label.
const (
	hookConnect   = hookc.Connect
	hookSubscribe = hookc.Subscribe
	hookPublish   = hookc.Publish
)

// Defaults of HookOptions, as the gateway's flags show them.
const (
	DefaultHookTimeout       = hookc.DefaultTimeout
	DefaultHookMaxConcurrent = hookc.DefaultMaxConcurrent
	DefaultHookCacheEntries  = hookc.DefaultCacheEntries
	DefaultHookCacheBytes    = hookc.DefaultCacheBytes
)

// defaultHookTimeout bounds a hook call by default (hooks.DefaultTimeout).
const defaultHookTimeout = hookc.DefaultTimeout

// hooks holds the Router's hook client in force: Reload swaps it
// (reload.go). Load it once per decision with client.
type hooks struct {
	cur atomic.Pointer[hookc.Client] // nil: no hook enabled
}

// newHooks builds the client of o; nil when o enables no hook.
func newHooks(o HookOptions, m *hookc.Metrics) (*hookc.Client, error) {
	return hookc.New(o, m)
}

// use puts h (nil: no hook) in force and makes m's gauges show it.
func (h *hooks) use(c *hookc.Client, m *hookc.Metrics) {
	h.cur.Store(c)
	m.Track(c)
}

// client returns the hook client in force; nil when no hook is enabled.
func (h *hooks) client() *hookc.Client { return h.cur.Load() }

// newHookMetrics registers the hooks' metrics, at zero without hooks.
func newHookMetrics(reg prometheus.Registerer) *hookc.Metrics { return hookc.NewMetrics(reg) }

// enabled reports whether the named hook is configured now.
func (h *hooks) enabled(name string) bool { return h.client().Enabled(name) }

// hookConnect asks the connect hook about a WebSocket upgrade or SSE
// stream, within the client IP's share of the hook's slots.
func (rt *Router) hookConnect(c echo.Context) (*principal, error) {
	r := c.Request()
	ip := c.RealIP()
	h := rt.hooks.client()
	if !h.Enabled(hookConnect) {
		// A reload took the connect hook away since the caller looked.
		return nil, perr(codeUnauthorized, "the gateway's settings changed during the connect; retry")
	}
	done, ok := h.TakeIPShare(ip)
	if !ok {
		c.Response().Header().Set("Retry-After", "1")
		return nil, refuse(limitConnectHookAddr, codeRateLimited,
			"%d connects from this address are waiting for the application; retry later", h.Options().MaxConcurrentPerIP)
	}
	defer done()
	body := map[string]any{"hook": hookConnect, "remote_addr": ip}
	if hs := h.Options().Headers; len(hs) > 0 {
		m := map[string]string{}
		for _, name := range hs {
			if v := r.Header.Get(name); v != "" {
				m[name] = v
			}
		}
		body["headers"] = m
	}
	if cs := h.Options().Cookies; len(cs) > 0 {
		m := map[string]string{}
		for _, name := range cs {
			if ck, err := r.Cookie(name); err == nil {
				m[name] = ck.Value
			}
		}
		body["cookies"] = m
	}
	a, err := h.Call(r.Context(), hookConnect, body)
	if err != nil {
		return nil, h.Failed(hookConnect)
	}
	if !*a.Allow {
		pe := a.Refusal()
		if pe.Code != codeUnauthorized {
			pe.Code = codeForbidden
		}
		return nil, pe
	}
	p := &principal{Subject: a.User}
	if a.Grants != nil {
		g, err := auth.ValidGrants(*a.Grants)
		if err != nil {
			h.Count(hookConnect, "malformed")
			return nil, h.Failed(hookConnect)
		}
		p.Grants = g
	}
	if len(a.Info) > 0 && string(a.Info) != "null" {
		var buf bytes.Buffer
		if len(a.Info) > hookc.MaxInfoBytes || json.Compact(&buf, a.Info) != nil {
			h.Count(hookConnect, "malformed")
			return nil, h.Failed(hookConnect)
		}
		p.Info = buf.Bytes()
	}
	if a.Expires != "" {
		exp, err := time.Parse(time.RFC3339, a.Expires)
		if err != nil {
			h.Count(hookConnect, "malformed")
			return nil, h.Failed(hookConnect)
		}
		p.Expires = exp
	}
	return p, nil
}

// authorizeSubscribe decides a subscription: the session's grants, else
// the subscribe hook (cached per user, pattern and group). viaHook reports
// that the hook allowed it.
func (cn *conn) authorizeSubscribe(pattern, group string) (viaHook bool, pe *protoError) {
	who := cn.who.load()
	grantsOK := who.CanSubscribe(pattern)
	groupOK := group == "" || who.CanJoin(group)
	if grantsOK && groupOK {
		return false, nil
	}
	h := cn.rt.hooks.client()
	if !h.Enabled(hookSubscribe) {
		if !grantsOK {
			return false, cn.rt.forbidden("subscribe", "not allowed to subscribe to %q", pattern)
		}
		return false, cn.rt.forbidden("group", "not allowed to join group %q", group)
	}
	key := who.Subject + "\x00" + group + "\x00" + pattern
	if who.Subject != "" {
		if e, ok := h.Cache().Get(key, h.Now()); ok {
			h.Count(hookSubscribe, "cached")
			if e.Allow {
				return true, nil
			}
			cn.rt.lim.forbidden.WithLabelValues("subscribe").Inc()
			return false, &protoError{Code: e.Code, Msg: e.Msg}
		}
	}
	body := map[string]any{"hook": hookSubscribe, "session": cn.id, "user": who.Subject, "pattern": pattern}
	if group != "" {
		body["group"] = group
	}
	a, err := h.Call(cn.ctx, hookSubscribe, body)
	if err != nil {
		if h.Options().FailOpen {
			return true, nil
		}
		return false, h.Failed(hookSubscribe)
	}
	var refusal *protoError
	if !*a.Allow {
		refusal = a.Refusal()
	}
	if ttl := time.Duration(a.CacheMS) * time.Millisecond; ttl > 0 && who.Subject != "" {
		e := hookc.CacheEntry{Allow: refusal == nil}
		if refusal != nil {
			e.Code, e.Msg = refusal.Code, refusal.Msg
		}
		h.Cache().Put(key, e, h.Now().Add(min(ttl, hookc.MaxCacheTTL)))
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
	if cn.who.CanPublish(topic) {
		return nil
	}
	if !cn.rt.hooks.enabled(hookPublish) {
		return cn.rt.forbidden("publish", "not allowed to publish to %q", topic)
	}
	cn.flushDeferred() // before the round trip (deferral.go)
	return cn.rt.hookPublish(cn.ctx, cn.id, cn.who.load(), req.Key, data, headers, topic)
}

// hookPublish asks the publish hook about a publish the grants of who do
// not allow, for a WebSocket session (session is its id) or POST
// /v1/publish (session ""). An allowing answer may replace *data and
// *headers. The hook must be enabled.
func (rt *Router) hookPublish(ctx context.Context, session string, who *principal, key *string, data *[]byte, headers *map[string]string, topic string) *protoError {
	h := rt.hooks.client()
	if h == nil {
		// A reload took the hooks away since the caller looked.
		return rt.forbidden("publish", "not allowed to publish to %q", topic)
	}
	body := map[string]any{"hook": hookPublish, "user": who.Subject, "topic": topic, "data": json.RawMessage(*data)}
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
	a, err := h.Call(ctx, hookPublish, body)
	if err != nil {
		if h.Options().FailOpen {
			return nil
		}
		return h.Failed(hookPublish)
	}
	if !*a.Allow {
		rt.lim.forbidden.WithLabelValues("publish").Inc()
		return a.Refusal()
	}
	if len(a.Data) > 0 {
		var buf bytes.Buffer
		if json.Compact(&buf, a.Data) != nil {
			return h.Failed(hookPublish)
		}
		if max := rt.settings().maxMessageBytes; max > 0 && buf.Len() > max {
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
	for _, s := range cn.byID {
		if s.group == group && s.hookAllowed {
			return true
		}
	}
	return false
}
