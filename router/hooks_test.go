package router_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/router"
)

// backend is an application answering the gateway's hooks.
type backend struct {
	srv    *httptest.Server
	calls  map[string]*atomic.Int32
	mu     sync.Mutex // guards bodies
	bodies map[string][]map[string]any
}

// newBackend serves answer(hook, body) for every hook call; answer writes
// the reply itself.
func newBackend(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, hook string, body map[string]any)) *backend {
	b := &backend{calls: map[string]*atomic.Int32{}, bodies: map[string][]map[string]any{}}
	for _, h := range []string{"connect", "subscribe", "publish"} {
		b.calls[h] = new(atomic.Int32)
	}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hook := r.URL.Path[len("/hooks/"):]
		var body map[string]any
		data, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(data, &body)
		if c := b.calls[hook]; c != nil {
			c.Add(1)
		}
		b.mu.Lock()
		b.bodies[hook] = append(b.bodies[hook], body)
		b.mu.Unlock()
		answer(w, r, hook, body)
	}))
	t.Cleanup(b.srv.Close)
	return b
}

func (b *backend) last(hook string) map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	l := b.bodies[hook]
	if len(l) == 0 {
		return nil
	}
	return l[len(l)-1]
}

func reply(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func withHooks(b *backend, mods ...func(*router.HookOptions)) func(*gwConfig) {
	return func(c *gwConfig) {
		c.router.Hooks = router.HookOptions{URL: b.srv.URL + "/hooks", Connect: true, Subscribe: true, Publish: true,
			Timeout: 2 * time.Second, Headers: []string{"X-App-Session"}, Cookies: []string{"sid"}}
		for _, m := range mods {
			m(&c.router.Hooks)
		}
	}
}

// dialHeader opens a session with extra handshake headers.
func (g *gateway) dialWithHeader(t *testing.T, h http.Header) *client {
	t.Helper()
	c := g.dialWith(t, "", &websocket.DialOptions{HTTPHeader: h})
	c.welcome = c.nextOp(t, "welcome")
	return c
}

// appBackend allows users with an X-App-Session header, lets them
// subscribe to a.# by grant, to b.# by the hook (cached), never to c.#;
// publishes to p.# are wrapped.
func appBackend(t *testing.T) *backend {
	return newBackend(t, func(w http.ResponseWriter, r *http.Request, hook string, body map[string]any) {
		switch hook {
		case "connect":
			h, _ := body["headers"].(map[string]any)
			ck, _ := body["cookies"].(map[string]any)
			switch {
			case h["X-App-Session"] == "good" && ck["sid"] == "s1":
				reply(w, map[string]any{"allow": true, "user": "ann", "info": map[string]any{"name": "Ann"},
					"grants": map[string]any{"subscribe": []string{"a.#"}}})
			case h["X-App-Session"] == "expired":
				reply(w, map[string]any{"allow": false, "code": "unauthorized", "message": "log in again"})
			default:
				reply(w, map[string]any{"allow": false, "message": "who are you"})
			}
		case "subscribe":
			p, _ := body["pattern"].(string)
			if len(p) > 1 && p[0] == 'b' {
				reply(w, map[string]any{"allow": true, "cache_ttl_ms": 60000})
				return
			}
			reply(w, map[string]any{"allow": false, "code": "forbidden", "message": "not in " + p})
		case "publish":
			if topic, _ := body["topic"].(string); len(topic) > 1 && topic[0] == 'p' {
				reply(w, map[string]any{"allow": true, "data": map[string]any{"by": body["user"], "was": body["data"]},
					"headers": map[string]string{"checked": "yes"}})
				return
			}
			reply(w, map[string]any{"allow": false, "code": "rate_limited", "message": "slow down"})
		}
	})
}

func appHeaders() http.Header {
	h := http.Header{}
	h.Set("X-App-Session", "good")
	h.Set("Cookie", "sid=s1; other=x")
	return h
}

func TestHookAllowAndRefuse(t *testing.T) {
	b := appBackend(t)
	g := newGateway(t, withHooks(b))
	c := g.dialWithHeader(t, appHeaders())
	if ck, _ := b.last("connect")["cookies"].(map[string]any); ck["other"] != nil {
		t.Fatalf("an unlisted cookie was forwarded: %v", ck)
	}

	c.subscribe(t, "a.x") // by the hook's grants: no subscribe call
	if n := b.calls["subscribe"].Load(); n != 0 {
		t.Fatalf("subscribe hook called %d times for a granted pattern", n)
	}
	c.subscribe(t, "b.x")
	if got := b.last("subscribe"); got["user"] != "ann" || got["pattern"] != "b.x" {
		t.Fatalf("subscribe hook body %v", got)
	}
	c.mustOK(t, map[string]any{"op": "unsubscribe", "pattern": "b.x"}, "unsubscribed")
	c.subscribe(t, "b.x") // cached
	if n := b.calls["subscribe"].Load(); n != 1 {
		t.Fatalf("subscribe hook called %d times, want 1 (second answer cached)", n)
	}
	if e := c.call(t, map[string]any{"op": "subscribe", "pattern": "c.x"}); e["code"] != "forbidden" || e["message"] != "not in c.x" {
		t.Fatalf("refused subscribe: %v", e)
	}

	// Publish: the hook wraps the data of p.# and refuses the rest.
	c.subscribe(t, "b.#", "group", "workers")
	c2 := g.dialWithHeader(t, appHeaders())
	if e := c2.call(t, map[string]any{"op": "subscribe", "pattern": "p.x"}); e["code"] != "forbidden" {
		t.Fatalf("subscribe p.x: %v", e)
	}
	c2.subscribe(t, "b.#")
	p := c.call(t, map[string]any{"op": "publish", "topic": "b.q", "data": 1})
	if p["code"] != "rate_limited" {
		t.Fatalf("publish refused by the hook: %v", p)
	}
	st, _, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "p.x"})
	if st != 201 {
		t.Fatalf("create p.x: %d", st)
	}
	c.publish(t, "p.x", map[string]any{"n": 1})
	code, body, _ := g.httpDo(t, "GET", "/v1/topics/p.x/messages?partition=0&from=0", nil)
	msgs, _ := body["messages"].([]any)
	if code != 200 || len(msgs) != 1 {
		t.Fatalf("log of p.x: %d %v", code, body)
	}
	m := msgs[0].(map[string]any)
	data, _ := json.Marshal(m["data"])
	if string(data) != `{"by":"ann","was":{"n":1}}` || m["headers"].(map[string]any)["checked"] != "yes" {
		t.Fatalf("published record %v: want the hook's data and headers", m)
	}
	for outcome, want := range map[string]float64{"allow": 3, "refuse": 2, "cached": 1} {
		if n := metricValue(t, g.reg, "switchyard_hook_calls_total", map[string]string{"hook": "subscribe", "outcome": outcome}); n != want {
			t.Errorf("hook_calls_total{subscribe,%s} = %v, want %v", outcome, n, want)
		}
	}

	// Refused connects: 403 by default, 401 when the backend says so.
	st, e, _ := g.dialRefused(t, "", http.Header{"X-App-Session": {"bad"}})
	if st != http.StatusForbidden || e["code"] != "forbidden" || e["message"] != "who are you" {
		t.Fatalf("refused connect: %d %v", st, e)
	}
	st, e, _ = g.dialRefused(t, "", http.Header{"X-App-Session": {"expired"}})
	if st != http.StatusUnauthorized || e["code"] != "unauthorized" {
		t.Fatalf("unauthorized connect: %d %v", st, e)
	}
}

// TestHookFailures: timeouts, errors and malformed answers fail closed
// (503 unavailable on connect, unavailable on subscribe), or open for
// subscribe and publish with FailOpen.
func TestHookFailures(t *testing.T) {
	var mode atomic.Value
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request, hook string, _ map[string]any) {
		if hook == "connect" && mode.Load() == "ok" {
			reply(w, map[string]any{"allow": true, "user": "u"})
			return
		}
		switch mode.Load() {
		case "slow":
			<-r.Context().Done()
		case "status":
			http.Error(w, "boom", http.StatusInternalServerError)
		case "not json":
			_, _ = w.Write([]byte("<html>"))
		case "no allow":
			reply(w, map[string]any{"user": "u"})
		case "bad grants":
			reply(w, map[string]any{"allow": true, "grants": map[string]any{"subscribe": []string{"a..b"}}})
		case "ok":
			reply(w, map[string]any{"allow": "yes"})
		}
	})
	g := newGateway(t, withHooks(b, func(o *router.HookOptions) { o.Timeout = 500 * time.Millisecond }))
	for _, tt := range []struct{ mode, outcome string }{
		{"slow", "timeout"}, {"status", "error"}, {"not json", "malformed"}, {"no allow", "malformed"}, {"bad grants", "malformed"},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			mode.Store(tt.mode)
			before := metricValue(t, g.reg, "switchyard_hook_calls_total", map[string]string{"hook": "connect", "outcome": tt.outcome})
			st, e, _ := g.dialRefused(t, "", nil)
			if st != http.StatusServiceUnavailable || e["code"] != "unavailable" {
				t.Fatalf("connect with a %s backend: %d %v", tt.mode, st, e)
			}
			if n := metricValue(t, g.reg, "switchyard_hook_calls_total", map[string]string{"hook": "connect", "outcome": tt.outcome}); n != before+1 {
				t.Fatalf("hook_calls_total{connect,%s} = %v, want %v", tt.outcome, n, before+1)
			}
		})
	}
	mode.Store("ok")
	c := g.dialRaw(t)
	c.nextOp(t, "welcome")
	if e := c.call(t, map[string]any{"op": "subscribe", "pattern": "a.x"}); e["code"] != "unavailable" {
		t.Fatalf("subscribe with a malformed answer: %v", e)
	}

	open := newGateway(t, withHooks(b, func(o *router.HookOptions) { o.Timeout = 500 * time.Millisecond; o.FailOpen = true }))
	c = open.dialRaw(t)
	c.nextOp(t, "welcome")
	c.subscribe(t, "a.x")
	c.publish(t, "a.x", 1)
}

// TestHookSlowBackendManyConnects: 1000 concurrent connects against a slow
// backend keep at most MaxConcurrent requests in flight, are all answered
// within about the timeout, and leave no goroutine behind.
func TestHookSlowBackendManyConnects(t *testing.T) {
	const limit, clients = 8, 1000
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request, hook string, _ map[string]any) {
		select {
		case <-time.After(20 * time.Millisecond):
		case <-r.Context().Done():
		}
		reply(w, map[string]any{"allow": false})
	})
	// The gateway's outstanding requests, from RoundTrip to the body's Close.
	counting := &countingTransport{next: &http.Transport{MaxConnsPerHost: limit, MaxIdleConnsPerHost: limit}}
	defer counting.next.CloseIdleConnections()
	g := newGateway(t, withHooks(b, func(o *router.HookOptions) {
		o.MaxConcurrent = limit
		o.MaxConcurrentPerIP = clients // every client is on 127.0.0.1: no share of the slots here
		o.ConnectTimeout = 300 * time.Millisecond
		o.Client = &http.Client{Transport: counting}
	}))
	tr := &http.Transport{DisableKeepAlives: true, MaxConnsPerHost: 0}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: waitTimeout}
	baseline := runtime.NumGoroutine()

	var wg sync.WaitGroup
	var refused, unavailable, other atomic.Int32
	var firstOther atomic.Value // the first unexpected outcome, for the failure
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := hc.Get(g.srv.URL + "/v1/ws")
			if err != nil {
				other.Add(1)
				firstOther.CompareAndSwap(nil, err.Error())
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusForbidden:
				refused.Add(1)
			case http.StatusServiceUnavailable:
				unavailable.Add(1)
			default:
				other.Add(1)
				firstOther.CompareAndSwap(nil, resp.Status)
			}
		}()
	}
	wg.Wait()
	if n := counting.peak.Load(); n > limit {
		t.Fatalf("%d hook requests in flight, limit %d", n, limit)
	}
	if other.Load() != 0 || refused.Load()+unavailable.Load() != clients {
		t.Fatalf("refused %d, unavailable %d, other %d (first: %v)", refused.Load(), unavailable.Load(), other.Load(), firstOther.Load())
	}
	if b.calls["connect"].Load() == 0 || unavailable.Load() == 0 {
		t.Fatalf("backend calls %d, unavailable %d: want the backend reached and overload refused", b.calls["connect"].Load(), unavailable.Load())
	}
	total := 0.0
	for _, o := range []string{"refuse", "overloaded", "timeout"} {
		total += metricValue(t, g.reg, "switchyard_hook_calls_total", map[string]string{"hook": "connect", "outcome": o})
	}
	if total != clients {
		t.Fatalf("hook_calls_total{connect} = %v, want %d", total, clients)
	}
	deadline := time.Now().Add(waitTimeout)
	for runtime.NumGoroutine() > baseline+2*limit+10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after the connects, %d before", runtime.NumGoroutine(), baseline)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// countingTransport counts requests from RoundTrip until their body is
// closed, and keeps the peak.
type countingTransport struct {
	next           *http.Transport
	inFlight, peak atomic.Int32
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	n := c.inFlight.Add(1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	resp, err := c.next.RoundTrip(r)
	if err != nil {
		c.inFlight.Add(-1)
		return nil, err
	}
	resp.Body = &countedBody{ReadCloser: resp.Body, done: func() { c.inFlight.Add(-1) }}
	return resp, nil
}

type countedBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *countedBody) Close() error {
	b.once.Do(b.done)
	return b.ReadCloser.Close()
}
