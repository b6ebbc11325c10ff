package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// runGateway starts run on a loopback port with args and stops it when the
// test ends, failing the test if shutdown fails.
func runGateway(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, append([]string{"--addr", "127.0.0.1:0", "--log-level", "error", "--stats-interval", "-1s"}, args...),
			func(string) string { return "" }, io.Discard, gatewayListening(func(a string) { addrc <- a }))
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-errc:
		cancel()
		t.Fatalf("run: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("gateway did not start")
	}
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("shutdown: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("gateway did not stop")
		}
	})
	return addr
}

// TestHandshakeTimeout: a client that opens TCP and never finishes its
// request headers (and so never completes a WebSocket handshake) is
// disconnected after --handshake-timeout, and others are served meanwhile.
func TestHandshakeTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	addr := runGateway(t, "--handshake-timeout", timeout.String())
	tests := []struct {
		name string
		send string
	}{
		{"silent", ""},
		{"partial upgrade request", "GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"},
		{"partial request line", "GET /v1/w"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			start := time.Now()
			if tt.send != "" {
				if _, err := io.WriteString(conn, tt.send); err != nil {
					t.Fatal(err)
				}
			}
			// Bound the test's own wait well above the server's timeout.
			_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = io.ReadAll(conn) // the server's close ends it
			elapsed := time.Since(start)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("still connected after %v", elapsed)
			}
			if elapsed < timeout-50*time.Millisecond {
				t.Fatalf("closed after %v, before the %v timeout", elapsed, timeout)
			}
		})
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}
}

// TestRunSecurityFlags checks the wiring of the auth and limit flags into
// the router.
func TestRunSecurityFlags(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secrets")
	if err := os.WriteFile(secretFile, []byte("an-old-secret-of-at-least-32-bytes-xx\nthe-new-secret-of-at-least-32-bytes-xx\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const admin = "gateway-admin-key-123"
	addr := runGateway(t, "--jwt-hmac-secret-file", secretFile, "--admin-key", admin, "--max-topics", "1", "--max-partitions", "2")
	do := func(method, path, cred, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if cred != "" {
			req.Header.Set("Authorization", "Bearer "+cred)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(data)
	}
	for _, tt := range []struct {
		name, method, path, cred, body string
		want                           int
	}{
		{"anonymous refused", "POST", "/v1/publish", "", `{"topic":"a","data":1}`, 401},
		{"partitions over the limit", "POST", "/v1/topics", admin, `{"name":"a","partitions":3}`, 400},
		{"admin creates", "POST", "/v1/topics", admin, `{"name":"a","partitions":2}`, 201},
		{"topics over the limit", "POST", "/v1/topics", admin, `{"name":"b"}`, 409},
		{"anonymous WebSocket refused", "GET", "/v1/ws", "", "", 401},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if st, body := do(tt.method, tt.path, tt.cred, tt.body); st != tt.want {
				t.Fatalf("%d %s, want %d", st, body, tt.want)
			}
		})
	}

	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"short secret", []string{"--jwt-hmac-secret", "short"}, "HMAC secret"},
		{"missing key file", []string{"--jwt-public-key", filepath.Join(dir, "none.pem")}, "jwt-public-key"},
		{"not a key", []string{"--jwt-public-key", secretFile}, "no PEM public key"},
		{"partitions above max", []string{"--partitions", "8", "--max-partitions", "4"}, "max-partitions"},
		{"bad proxy CIDR", []string{"--trusted-proxies", "10.0.0.0/99"}, "trusted-proxies"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), append([]string{"--addr", "127.0.0.1:0"}, tt.args...), func(string) string { return "" }, io.Discard, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want mention of %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "an-old-secret") {
				t.Fatalf("error leaks a secret: %v", err)
			}
		})
	}
}
