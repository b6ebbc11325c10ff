package web_test

// mqtt.js, the npm package `mqtt` pinned by testdata/mqttjs/package-lock.json,
// against an in-process gateway's GET /mqtt: from Node (TestMQTTJSNode runs
// mqtt.test.mjs) and in chromium (mqttjs_browser_test.go serves the
// package's browser bundle). Both install the fixture with `npm ci`, so they
// need npm and the npm registry (or npm's cache): they skip without npm
// unless SWITCHYARD_REQUIRE_NPM is set (as .ci/run does), and with -short.

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

// installMQTTJS copies testdata/mqttjs (package.json, package-lock.json)
// to a temporary directory, installs it with npm ci and returns the
// directory, whose node_modules holds mqtt and ws.
func installMQTTJS(t *testing.T) string {
	t.Helper()
	npmPath, err := exec.LookPath("npm")
	if err != nil {
		if os.Getenv("SWITCHYARD_REQUIRE_NPM") != "" {
			t.Fatal("npm not found and SWITCHYARD_REQUIRE_NPM is set")
		}
		t.Skip("npm not found")
	}
	if testing.Short() {
		t.Skip("installs mqtt.js with npm")
	}
	dir := t.TempDir()
	for _, name := range []string{"package.json", "package-lock.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", "mqttjs", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	npmCI := func(extra ...string) (string, error) {
		cmd := exec.CommandContext(ctx, npmPath, append([]string{"ci", "--no-audit", "--no-fund", "--ignore-scripts"}, extra...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "NO_COLOR=1", "npm_config_update_notifier=false")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// npm's cache makes --prefer-offline fast; cached metadata older than
	// the lock file's versions makes it fail, then ask the registry.
	if out, err := npmCI("--prefer-offline"); err != nil {
		t.Logf("npm ci --prefer-offline failed, retrying online: %v\n%s", err, out)
		if out, err := npmCI(); err != nil {
			t.Fatalf("npm ci in %s: %v\n%s", dir, err, out)
		}
	}
	return dir
}

// newMQTTGateway starts an in-process gateway on the memory engine (which
// keeps retained messages) behind an httptest server; extra, when not nil,
// serves the paths it is given before the gateway.
func newMQTTGateway(t *testing.T, extra map[string]http.Handler) *httptest.Server {
	t.Helper()
	eng := memengine.New(memengine.Options{})
	rt, err := router.New(router.Options{Engine: eng, Registry: prometheus.NewRegistry(), StatsInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	var h http.Handler = rt
	if extra != nil {
		mux := http.NewServeMux()
		for path, eh := range extra {
			mux.Handle(path, eh)
		}
		mux.Handle("/", rt)
		h = mux
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = rt.Shutdown(ctx)
		srv.Close()
		_ = eng.Close(ctx)
	})
	return srv
}

var nodeTestCounts = regexp.MustCompile(`(?m)^# (pass|fail|skipped|todo|cancelled) (\d+)$`)

// TestMQTTJSNode runs mqtt.test.mjs with node's test runner against an
// in-process gateway: mqtt.js over WebSocket at /mqtt, MQTT 5 and 3.1.1,
// wildcard filters, QoS 0/1/2 both ways, a shared subscription, a retained
// message, wills, and publishes across protocols. It fails unless every
// test of the file ran and passed.
func TestMQTTJSNode(t *testing.T) {
	node := findNode(t)
	dir := installMQTTJS(t)
	srv := newMQTTGateway(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=tap", "mqtt.test.mjs")
	cmd.Env = append(os.Environ(),
		"SWITCHYARD_MQTT_URL=ws"+strings.TrimPrefix(srv.URL, "http")+"/mqtt",
		"SWITCHYARD_HTTP_URL="+srv.URL,
		"SWITCHYARD_MQTTJS_DIR="+dir,
		"NO_COLOR=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	counts := map[string]string{}
	for _, m := range nodeTestCounts.FindAllStringSubmatch(out.String(), -1) {
		counts[m[1]] = m[2]
	}
	if err != nil || counts["fail"] != "0" || counts["skipped"] != "0" || counts["pass"] == "" || counts["pass"] == "0" {
		t.Fatalf("node --test mqtt.test.mjs: %v, counts %v\n%s", err, counts, out.String())
	}
	t.Logf("node --test mqtt.test.mjs: %s passed", counts["pass"])
}
