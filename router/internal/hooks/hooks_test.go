package hooks

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/internal/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newClient starts a backend answering with h and a client of every hook
// on it; both are closed when the test ends.
func newClient(t *testing.T, o Options, h http.HandlerFunc) (*Client, *prometheus.Registry) {
	t.Helper()
	srv := httptest.NewServer(h)
	o.URL = srv.URL + "/"
	o.Connect, o.Subscribe, o.Publish = true, true, true
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	c, err := New(o, m)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.client.CloseIdleConnections()
		srv.Close()
	})
	return c, reg
}

// count reads hook_calls_total{hook=name,outcome} from reg.
func count(t *testing.T, reg *prometheus.Registry, name, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_hook_calls_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["hook"] == name && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no hook_calls_total{%s,%s}", name, outcome)
	return 0
}

func TestNewOptions(t *testing.T) {
	m := NewMetrics(prometheus.NewRegistry())
	if c, err := New(Options{}, m); c != nil || err != nil {
		t.Fatalf("no hook: %v, %v; want nil, nil", c, err)
	}
	if _, err := New(Options{Subscribe: true}, m); err == nil {
		t.Fatal("a hook without a URL was accepted")
	}
	if _, err := New(Options{URL: "ftp://x", Publish: true}, m); err == nil {
		t.Fatal("a URL that is not http was accepted")
	}
	c, err := New(Options{URL: "http://127.0.0.1:1/", Connect: true, MaxConcurrent: 8}, m)
	if err != nil {
		t.Fatal(err)
	}
	o := c.Options()
	if o.URL != "http://127.0.0.1:1" || o.Timeout != DefaultTimeout || o.MaxConcurrentPerIP != 2 ||
		o.CacheEntries != DefaultCacheEntries || o.CacheBytes != DefaultCacheBytes {
		t.Fatalf("defaults not applied: %+v", o)
	}
	if !c.Enabled(Connect) || c.Enabled(Subscribe) || (*Client)(nil).Enabled(Connect) {
		t.Fatal("Enabled does not follow the options")
	}
}

func TestCallOutcomes(t *testing.T) {
	long := strings.Repeat("x", 300)
	c, m := newClient(t, Options{Timeout: 5 * time.Second}, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch {
		case r.URL.Path != "/"+Subscribe && r.URL.Path != "/"+Publish:
			w.WriteHeader(http.StatusNotFound)
		case strings.Contains(string(body), `"allow"`):
			io.WriteString(w, `{"allow":true,"user":"u","cache_ttl_ms":5}`)
		case strings.Contains(string(body), `"refuse"`):
			io.WriteString(w, `{"allow":false,"code":"internal_error","message":"`+long+`"}`)
		case strings.Contains(string(body), `"limited"`):
			io.WriteString(w, `{"allow":false,"code":"rate_limited"}`)
		case strings.Contains(string(body), `"status"`):
			w.WriteHeader(http.StatusInternalServerError)
		default:
			io.WriteString(w, `{"no":"allow"}`)
		}
	})
	ctx := context.Background()
	a, err := c.Call(ctx, Subscribe, map[string]string{"q": "allow"})
	if err != nil || !*a.Allow || a.User != "u" || a.CacheMS != 5 {
		t.Fatalf("allow: %+v, %v", a, err)
	}
	a, err = c.Call(ctx, Publish, map[string]string{"q": "refuse"})
	if err != nil || *a.Allow {
		t.Fatalf("refuse: %+v, %v", a, err)
	}
	// A code the backend may not choose becomes forbidden; the message is cut.
	if pe := a.Refusal(); pe.Code != wire.CodeForbidden || len(pe.Msg) != 256 {
		t.Fatalf("refusal %q with %d bytes; want forbidden, 256", pe.Code, len(pe.Msg))
	}
	a, _ = c.Call(ctx, Publish, map[string]string{"q": "limited"})
	if pe := a.Refusal(); pe.Code != wire.CodeRateLimited || pe.Msg != "refused by the application" {
		t.Fatalf("refusal %+v; want rate_limited with the default message", pe)
	}
	var failed *errHookFailed
	if _, err := c.Call(ctx, Publish, map[string]string{"q": "status"}); !errors.As(err, &failed) || failed.outcome != "error" {
		t.Fatalf("HTTP 500: %v; want error", err)
	}
	if _, err := c.Call(ctx, Connect, nil); !errors.As(err, &failed) || failed.outcome != "error" {
		t.Fatalf("HTTP 404: %v; want error", err)
	}
	if _, err := c.Call(ctx, Subscribe, map[string]string{"q": "other"}); !errors.As(err, &failed) || failed.outcome != "malformed" {
		t.Fatalf("an answer without allow: %v; want malformed", err)
	}
	for _, want := range []struct {
		name, outcome string
		n             float64
	}{
		{Subscribe, "allow", 1}, {Publish, "refuse", 2}, {Publish, "error", 1}, {Connect, "error", 1}, {Subscribe, "malformed", 1},
	} {
		if got := count(t, m, want.name, want.outcome); got != want.n {
			t.Errorf("hook_calls_total{%s,%s} = %v, want %v", want.name, want.outcome, got, want.n)
		}
	}
	if pe := c.Failed(Publish); pe.Code != wire.CodeUnavailable {
		t.Fatalf("Failed: %+v", pe)
	}
}

// TestSlots holds the only slot with a call the backend does not answer;
// a second call waits at most its timeout and fails as overloaded, and the
// held call ends as a timeout when its own deadline passes.
func TestSlots(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	c, m := newClient(t, Options{MaxConcurrent: 1, PublishTimeout: 50 * time.Millisecond, ConnectTimeout: 10 * time.Second},
		func(w http.ResponseWriter, r *http.Request) {
			close(entered)
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
	held := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		_, err := c.Call(ctx, Connect, nil)
		held <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first call never reached the backend")
	}
	start := time.Now()
	var failed *errHookFailed
	if _, err := c.Call(context.Background(), Publish, nil); !errors.As(err, &failed) || failed.outcome != "overloaded" {
		t.Fatalf("a call without a free slot: %v; want overloaded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the overloaded call waited %v, past its 50ms timeout", d)
	}
	if n := len(c.slots); n != 1 {
		t.Fatalf("%d slots held, want 1", n)
	}
	// The backend answers only once the cancelled call has ended: an
	// answer racing the cancellation could reach it first.
	defer close(release)
	cancel()
	select {
	case err := <-held:
		if !errors.As(err, &failed) || failed.outcome != "timeout" {
			t.Fatalf("the cancelled call: %v; want timeout", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the held call did not end")
	}
	if n := len(c.slots); n != 0 {
		t.Fatalf("%d slots held after the calls, want 0", n)
	}
	if count(t, m, Publish, "overloaded") != 1 || count(t, m, Connect, "timeout") != 1 {
		t.Fatal("overloaded and timeout not counted")
	}
}

func TestTakeIPShare(t *testing.T) {
	c, _ := newClient(t, Options{MaxConcurrent: 8}, func(http.ResponseWriter, *http.Request) {})
	var dones []func()
	for range 2 {
		done, ok := c.TakeIPShare("a")
		if !ok {
			t.Fatal("a share within MaxConcurrentPerIP was refused")
		}
		dones = append(dones, done)
	}
	if _, ok := c.TakeIPShare("a"); ok {
		t.Fatal("a third share of one IP was granted (MaxConcurrentPerIP 2)")
	}
	if done, ok := c.TakeIPShare("b"); !ok {
		t.Fatal("another IP was refused")
	} else {
		done()
	}
	dones[0]()
	if done, ok := c.TakeIPShare("a"); !ok {
		t.Fatal("a returned share was not reusable")
	} else {
		done()
	}
	dones[1]()
	if len(c.byIP) != 0 {
		t.Fatalf("%d addresses counted after every share came back", len(c.byIP))
	}
}
