package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(checkedMain{m})
}

func TestConfigPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "gateway.yaml")
	if err := os.WriteFile(file, []byte("addr: 127.0.0.1:1111\nack-timeout: 5s\nqueue-messages: 64\nmax-attempts: 9\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"SWITCHYARD_CONFIG":         file,
		"SWITCHYARD_ACK_TIMEOUT":    "7s",
		"SWITCHYARD_QUEUE_MESSAGES": "128",
	}
	cfg, err := loadConfig([]string{"--queue-messages", "256"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		got, want any
	}{
		{"file only", cfg.Addr, "127.0.0.1:1111"},
		{"env beats file", cfg.AckTimeout, 7 * time.Second},
		{"flag beats env and file", cfg.QueueMessages, 256},
		{"file beats default", cfg.MaxAttempts, 9},
		{"default", cfg.Engine, "memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Fatalf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

func TestConfigErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("no-such-setting: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"unknown flag", []string{"--bogus"}, nil, "bogus"},
		{"unknown file key", []string{"--config", bad}, nil, "no-such-setting"},
		{"missing file", []string{"--config", filepath.Join(dir, "none.yaml")}, nil, "no such file"},
		{"bad env value", nil, map[string]string{"SWITCHYARD_ACK_TIMEOUT": "soon"}, "SWITCHYARD_ACK_TIMEOUT"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := loadConfig(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want mention of %q", err, tt.want)
			}
		})
	}
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"unknown engine", []string{"--engine", "carrier-pigeon"}, "carrier-pigeon"},
		{"no replicas", []string{"--engine", "nats", "--nats-replicas", "0"}, "nats-replicas must be 1 to 5"},
		{"too many replicas", []string{"--engine", "nats", "--nats-replicas", "6"}, "nats-replicas must be 1 to 5"},
		{"replicas without a cluster", []string{"--engine", "embedded", "--nats-replicas", "3"}, "needs --engine nats"},
		{"bad data sync", []string{"--engine", "embedded", "--data-dir", dir, "--data-sync", "sometimes"}, `data-sync must be "always" or a positive duration`},
		{"data sync without embedded", []string{"--data-sync", "2m"}, "data-sync needs --engine embedded"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), append(tt.args, "--addr", "127.0.0.1:0"), func(string) string { return "" }, io.Discard, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want mention of %q", err, tt.want)
			}
		})
	}
}

// TestRunServesAndStops starts the real binary's run loop on a loopback
// port, uses it, and stops it as SIGTERM would.
func TestRunServesAndStops(t *testing.T) {
	base := "http://" + runGateway(t) // stopped, as SIGTERM would, when the test ends
	resp, err := http.Post(base+"/v1/publish", "application/json", strings.NewReader(`{"topic":"tour.hello","data":{"hi":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"offset":0`) {
		t.Fatalf("publish: %d %s", resp.StatusCode, body)
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/", "/switchyard.js"} {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("GET %s: %d", path, resp.StatusCode)
		}
	}
}
