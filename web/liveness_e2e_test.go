package web_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/faults"
	"github.com/switchyard/switchyard/router"
)

// silentCutScript drives the client in Node through a silent cut. It
// prints "ready" once five records arrived, waits for "cut" on stdin,
// then for the client to notice by itself and reconnect, publishes one
// more record and prints "ok" and the offsets it handled.
const silentCutScript = `
import { connect } from %q;
import { createInterface } from "node:readline";

const rl = createInterface({ input: process.stdin });
const lines = rl[Symbol.asyncIterator]();
const url = process.argv[2];
const client = await connect(url, { pingIntervalMs: 100, pongTimeoutMs: 500, reconnect: { minDelayMs: 10, maxDelayMs: 50 } });
const got = [];
let arrived = () => {};
await client.subscribe("feed", (m) => { got.push(m.offset); arrived(); });
const until = (n) => new Promise((resolve) => {
  arrived = () => { if (got.length >= n) resolve(); };
  arrived();
});
for (let i = 0; i < 5; i++) await client.publish("feed", i);
await until(5);
const closed = new Promise((resolve) => client.on("close", resolve));
const reopened = new Promise((resolve) => client.on("open", resolve));
console.log("ready");
await lines.next(); // "cut"
const t0 = Date.now();
const ev = await Promise.race([closed, new Promise((resolve) => setTimeout(resolve, 10000))]);
if (!ev) {
  console.log("the silent cut went unnoticed for 10 s");
  process.exit(1);
}
console.log("closed " + ev.code + " after " + (Date.now() - t0) + " ms: " + ev.reason);
await reopened;
await client.publish("feed", 10);
await until(11);
client.close();
rl.close();
console.log("ok " + JSON.stringify(got));
// The dead socket's closing handshake never completes (the proxy swallows
// it) and would keep Node running until TCP gives up.
process.exit(0);
`

// TestNodeClientNoticesSilentCut runs the client in Node through a loopback
// proxy that stops forwarding without closing anything. The client must
// notice by itself, reconnect and resume: the records published during the
// cut arrive, in order and once. Skipped without a Node that has WebSocket
// (see TestNodeClientAgainstGateway).
func TestNodeClientNoticesSilentCut(t *testing.T) {
	node, args := nodeWithWebSocket(t)
	eng := memengine.New(memengine.Options{})
	rt, err := router.New(router.Options{Engine: eng, Registry: prometheus.NewRegistry(), StatsInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
		srv.Close()
		_ = eng.Close(ctx)
	}()
	// The fault harness's proxy: Silence cuts the link open then silently
	// (nothing arrives, nothing is closed), as a NAT that forgot the flow
	// would; links made later forward normally.
	p, err := faults.NewProxy("gateway", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	lib, err := filepath.Abs("static/switchyard.js")
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(t.TempDir(), "silentcut.mjs")
	src := strings.Replace(silentCutScript, "%q", jsonString("file://"+filepath.ToSlash(lib)), 1)
	if err := os.WriteFile(script, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, append(args, script, "ws://"+p.Addr()+"/v1/ws")...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	out := bufio.NewScanner(stdout)
	line := func() string {
		if !out.Scan() {
			_ = cmd.Wait()
			t.Fatalf("node ended early; stderr: %s", stderr.String())
		}
		return out.Text()
	}
	if l := line(); l != "ready" {
		t.Fatalf("node said %q, want ready; stderr: %s", l, stderr.String())
	}
	if n := p.Silence(); n != 1 {
		t.Fatalf("cut %d links, want 1", n)
	}
	for i := range 5 { // published during the cut, straight to the gateway
		body := strings.NewReader(`{"topic":"feed","data":` + strconv.Itoa(5+i) + `}`)
		resp, err := http.Post(srv.URL+"/v1/publish", "application/json", body)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			t.Fatalf("publish: HTTP %d", resp.StatusCode)
		}
	}
	if _, err := io.WriteString(stdin, "cut\n"); err != nil {
		t.Fatal(err)
	}
	if l := line(); !strings.HasPrefix(l, "closed ") {
		_ = cmd.Wait()
		t.Fatalf("node said %q; stderr: %s", l, stderr.String())
	} else {
		t.Log(l)
	}
	last := line()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("node: %v; stderr: %s", err, stderr.String())
	}
	if want := "ok [0,1,2,3,4,5,6,7,8,9,10]"; last != want {
		t.Fatalf("node said %q, want %q", last, want)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// findNode finds node, or skips the test (fails it when
// SWITCHYARD_REQUIRE_NPM is set).
func findNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if os.Getenv("SWITCHYARD_REQUIRE_NPM") != "" {
			t.Fatal("node not found and SWITCHYARD_REQUIRE_NPM is set")
		}
		t.Skip("node not found")
	}
	return node
}

// nodeWithWebSocket finds a node that has WebSocket, with the flag it
// needs, or skips the test.
func nodeWithWebSocket(t *testing.T) (string, []string) {
	t.Helper()
	node := findNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, try := range [][]string{nil, {"--experimental-websocket"}} {
		probe := append(append([]string(nil), try...), "-e", `if (typeof WebSocket !== "function") process.exit(1)`)
		if exec.CommandContext(ctx, node, probe...).Run() == nil {
			return node, try
		}
	}
	t.Skip("this node has no WebSocket")
	return "", nil
}
