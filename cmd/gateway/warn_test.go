package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/router"
)

// TestWarnOpen: a listener beyond loopback with no keys, or with anonymous
// publishing, gets one warning line naming the fix; loopback and keyed
// gateways get none.
func TestWarnOpen(t *testing.T) {
	all := &net.TCPAddr{IP: net.IPv4zero, Port: 8080}
	for _, tt := range []struct {
		name string
		addr net.Addr
		auth router.AuthOptions
		want string // "": no warning
	}{
		{"all interfaces, no keys", all, router.AuthOptions{}, "--jwt-hmac-secret-file"},
		{"all IPv6 interfaces, no keys", &net.TCPAddr{IP: net.IPv6unspecified, Port: 8080}, router.AuthOptions{}, "listen on 127.0.0.1"},
		{"a public address, no keys", &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 8080}, router.AuthOptions{}, "no keys"},
		{"loopback, no keys", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 8080}, router.AuthOptions{}, ""},
		{"IPv6 loopback, no keys", &net.TCPAddr{IP: net.IPv6loopback, Port: 8080}, router.AuthOptions{}, ""},
		{"token secret", all, router.AuthOptions{HMACSecrets: [][]byte{[]byte("s")}}, ""},
		{"admin key only", all, router.AuthOptions{AdminKey: "k"}, ""},
		{"JWKS", all, router.AuthOptions{JWKSURL: "https://id.example/jwks"}, ""},
		{"anonymous readers", all, router.AuthOptions{AdminKey: "k", Anonymous: &router.Grants{Subscribe: []string{"#"}}}, ""},
		{"anonymous publishers", all, router.AuthOptions{AdminKey: "k", Anonymous: &router.Grants{Publish: []string{"chat.#"}}}, "--anonymous-publish"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			warnOpen(slog.New(slog.NewTextHandler(&out, nil)), tt.addr, tt.auth)
			lines := strings.Count(out.String(), "\n")
			switch {
			case tt.want == "" && lines != 0:
				t.Fatalf("warned: %s", out.String())
			case tt.want != "" && (lines != 1 || !strings.Contains(out.String(), "level=WARN") || !strings.Contains(out.String(), tt.want)):
				t.Fatalf("want one warning naming %q, got %q", tt.want, out.String())
			}
		})
	}
}

// TestNoWarningOnLoopback: the gateway as the tests and a developer run it
// (loopback, no keys) starts without the warning, and its start-up lines
// reach the warning's check (the listening line is logged just before).
func TestNoWarningOnLoopback(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var out lockedBuffer
	errc := make(chan error, 1)
	addrc := make(chan string, 1)
	go func() {
		errc <- run(ctx, []string{"--addr", "127.0.0.1:0", "--stats-interval", "-1s"}, noEnv, &out, gatewayListening(func(a string) { addrc <- a }))
	}()
	select {
	case <-addrc:
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("gateway did not start")
	}
	cancel()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if s := out.String(); strings.Contains(s, "INSECURE") || !strings.Contains(s, "switchyard gateway listening") {
		t.Fatalf("start-up lines:\n%s", s)
	}
}
