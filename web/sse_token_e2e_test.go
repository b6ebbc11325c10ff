package web_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

// requestLog records every request's URL and whether it carried an
// Authorization header, as an access log would.
type requestLog struct {
	next http.Handler
	mu   sync.Mutex // guards following
	urls []string
	auth map[string]bool // path -> a request to it carried Authorization
}

func (l *requestLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	l.urls = append(l.urls, r.URL.RequestURI())
	if r.Header.Get("Authorization") != "" {
		l.auth[r.URL.Path] = true
	}
	l.mu.Unlock()
	l.next.ServeHTTP(w, r)
}

// TestNodeClientSSETokenStaysOutOfURLs runs testdata/node-e2e/sse_token.mjs:
// the client in Node falls back to SSE against a gateway that needs a
// credential. Every request it makes is recorded; none may carry the
// credential in its URL, and the stream and the publishes must carry it
// in the Authorization header. A delta subscription's stream gets deltas
// from the gateway, which the client applies.
func TestNodeClientSSETokenStaysOutOfURLs(t *testing.T) {
	node := findNode(t)
	const key = "sse-e2e-admin-key-0123456789"
	eng := memengine.New(memengine.Options{})
	reg := prometheus.NewRegistry()
	rt, err := router.New(router.Options{Engine: eng, Registry: reg, StatsInterval: -1, Auth: router.AuthOptions{AdminKey: key}})
	if err != nil {
		t.Fatal(err)
	}
	log := &requestLog{next: rt, auth: map[string]bool{}}
	srv := httptest.NewServer(log)
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = rt.Shutdown(sctx)
		srv.Close()
		_ = eng.Close(sctx)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "sse_token.mjs", srv.URL+"/", key)
	cmd.Dir = "testdata/node-e2e"
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("node sse_token.mjs: %v\nstdout: %s\nstderr: %s", err, out, stderr.String())
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for _, u := range log.urls {
		if strings.Contains(u, key) || strings.Contains(u, "token=") {
			t.Errorf("a request carried the credential in its URL: %s", u)
		}
	}
	// The delta subscription's stream got deltas, which the client applied.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	deltas := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "switchyard_delta_deliveries_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "kind" && lp.GetValue() == "delta" {
					deltas += m.GetCounter().GetValue()
				}
			}
		}
	}
	if deltas < 1 {
		t.Errorf("no delta messages were sent to the SSE delta subscription")
	}
	for _, path := range []string{"/v1/sse", "/v1/publish"} {
		if !log.auth[path] {
			t.Errorf("no request to %s carried an Authorization header (requests: %v)", path, log.urls)
		}
	}
}
