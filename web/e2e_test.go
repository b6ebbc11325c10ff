package web_test

import (
	"context"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/web"
)

// TestNodeClientAgainstGateway runs testdata/node-e2e/e2e.mjs, the client
// in Node, against an in-process gateway. It needs a Node with WebSocket
// (20.10+ with --experimental-websocket, or 22+) and skips otherwise
// unless SWITCHYARD_REQUIRE_NPM is set.
func TestNodeClientAgainstGateway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, args := nodeWithWebSocket(t)

	eng := memengine.New(memengine.Options{})
	rt, err := router.New(router.Options{Engine: eng, Registry: prometheus.NewRegistry(), StatsInterval: -1, Static: web.FS()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt)
	defer func() {
		sctx, scancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer scancel()
		_ = rt.Shutdown(sctx)
		srv.Close()
		_ = eng.Close(sctx)
	}()
	ws := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/ws"
	cmd := exec.CommandContext(ctx, node, append(args, "e2e.mjs", ws)...)
	cmd.Dir = "testdata/node-e2e"
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "ok" {
		t.Fatalf("node e2e.mjs: %v\nstdout: %s\nstderr: %s", err, out, stderr.String())
	}
}
