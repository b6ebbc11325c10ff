package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestVersionFlag(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--version"}, func(string) string { return "" }, &out, nil); err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "switchyard gateway "+gatewayVersion()+"\n" || gatewayVersion() == "" {
		t.Errorf("--version printed %q", got)
	}
	old := version
	version = "v0.0.0-ldflags"
	defer func() { version = old }()
	if gatewayVersion() != "v0.0.0-ldflags" {
		t.Errorf("-X main.version is not used: %q", gatewayVersion())
	}
}

// lockedBuffer is a bytes.Buffer the gateway's logger may write to while
// the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestStartupLines: the gateway says where its dashboard, WebSocket
// endpoint and metrics are, /healthz reports its version and /v1/info
// its engine.
func TestStartupLines(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out lockedBuffer
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, []string{"--addr", "127.0.0.1:0"}, func(string) string { return "" }, &out, gatewayListening(func(a string) { addrc <- a }))
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-errc:
		t.Fatalf("run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("gateway did not start")
	}
	for _, want := range []string{
		"url=http://" + addr + "/",
		"url=ws://" + addr + "/v1/ws",
		"url=http://" + addr + "/metrics",
		"version=",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("start-up log lacks %q:\n%s", want, out.String())
		}
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	var health map[string]string
	err = json.NewDecoder(resp.Body).Decode(&health)
	resp.Body.Close()
	if err != nil || health["version"] != gatewayVersion() {
		t.Errorf("/healthz = %v (%v), want version %q", health, err, gatewayVersion())
	}
	// /v1/info names the engine as --engine does, as the log line above.
	resp, err = http.Get("http://" + addr + "/v1/info")
	if err != nil {
		t.Fatal(err)
	}
	var info map[string]string
	err = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if err != nil || info["engine"] != "memory" || !strings.Contains(out.String(), "engine=memory") {
		t.Errorf("/v1/info = %v (%v), want engine \"memory\", as the log says", info, err)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("gateway did not stop")
	}
}
