package web_test

// The harness of the browser tests: headless chromium driven by chromedp
// (skipped without chromium, unless SWITCHYARD_REQUIRE_BROWSER is set), an
// in-process gateway serving web.FS, started through router.New on a
// listener a test can cut, and the waits and evaluations the tests share.

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/web"
)

// waitTimeout bounds each wait of the browser tests outside the page: a
// gateway's shutdown, a WebSocket handshake, the statistics a test waits
// for before it opens the dashboard.
const waitTimeout = 10 * time.Second

// The credentials of the gateways the dashboard tests sign in to.
var (
	hmacSecret = []byte("0123456789abcdef0123456789abcdef-web-test")
	adminKey   = "admin-key-for-web-tests-only"
)

// userToken signs, with hmacSecret, a token for user valid for a minute
// that may subscribe to the given patterns and do nothing else.
func userToken(t *testing.T, user string, subscribe ...string) string {
	t.Helper()
	now := time.Now()
	c := jwt.MapClaims{"sub": user, "iat": now.Unix(), "exp": now.Add(time.Minute).Unix(), "subscribe": subscribe}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(hmacSecret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// cutListener lets a test drop every open connection and refuse new ones,
// as a network outage would.
type cutListener struct {
	net.Listener
	mu    sync.Mutex
	conns []net.Conn
	down  bool
}

func (l *cutListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.down {
			l.mu.Unlock()
			c.Close()
			continue
		}
		l.conns = append(l.conns, c)
		l.mu.Unlock()
		return c, nil
	}
}

func (l *cutListener) cut(down bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = down
	if down {
		for _, c := range l.conns {
			c.Close()
		}
		l.conns = nil
	}
}

// browser starts headless chromium, or skips when it is absent (unless
// SWITCHYARD_REQUIRE_BROWSER is set, as in CI).
func browser(t *testing.T) context.Context {
	t.Helper()
	path := os.Getenv("SWITCHYARD_CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(path); err != nil {
		if os.Getenv("SWITCHYARD_REQUIRE_BROWSER") != "" {
			t.Fatalf("chromium required but not found at %s", path)
		}
		t.Skipf("no chromium at %s", path)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1440, 1000),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, tcancel := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() {
		tcancel()
		cancel()
		acancel()
	})
	// Start the browser now so that a failure is reported here.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

func newWebGateway(t *testing.T, stats time.Duration, policies ...router.TopicPolicy) (*httptest.Server, *cutListener, engine.Engine) {
	t.Helper()
	eng := memengine.New(memengine.Options{})
	rt, err := router.New(router.Options{Engine: eng, Registry: prometheus.NewRegistry(), Static: web.FS(), StatsInterval: stats,
		TopicPolicies: policies})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &cutListener{Listener: ln}
	srv := httptest.NewUnstartedServer(rt)
	srv.Listener = cl
	srv.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = rt.Shutdown(ctx)
		srv.Close()
		_ = eng.Close(ctx)
	})
	return srv, cl, eng
}

// evalUntil evaluates expr until it returns true or the deadline passes.
func evalUntil(t *testing.T, ctx context.Context, expr string, what string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

// navigate opens url in the browser, failing the test if it cannot.
func navigate(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
}

// browserStrings evaluates expr (a JSON.stringify of a string array) in
// the page.
func browserStrings(t *testing.T, ctx context.Context, expr string) []string {
	t.Helper()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// appendNumbers appends the records {"n":from} to {"n":to-1} to topic,
// straight to the engine.
func appendNumbers(t *testing.T, eng engine.Engine, topic string, from, to int) {
	t.Helper()
	for i := from; i < to; i++ {
		if _, err := eng.Append(context.Background(), engine.Message{Topic: topic, Data: []byte(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
			t.Fatal(err)
		}
	}
}
