package client_test

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/client"
	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

var refreshSecret = []byte("client-refresh-test-secret-0123456789abcdef")

// authGateway starts a gateway that requires HS256 tokens and warns lead
// before they expire.
func authGateway(t *testing.T, lead time.Duration) *testGateway {
	t.Helper()
	eng := memengine.New(memengine.Options{Policy: engine.GroupPolicy{}})
	rt, err := router.New(router.Options{Engine: eng, Registry: prometheus.NewRegistry(), StatsInterval: -1,
		Auth: router.AuthOptions{HMACSecrets: [][]byte{refreshSecret}, RefreshLead: lead}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(apiChecked(rt))
	ln := &trackingListener{Listener: srv.Listener, conns: make(map[net.Conn]struct{})}
	srv.Listener = ln
	srv.Start()
	g := &testGateway{URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/ws", HTTP: srv.URL, srv: srv, rt: rt, eng: eng, ln: ln}
	t.Cleanup(g.Close)
	return g
}

// mint signs a token for sub valid for life with the given subscribe and
// publish grants.
func mint(t *testing.T, life time.Duration, subscribe, publish []string) string {
	now := time.Now()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"sub": "client-test", "iat": jwt.NewNumericDate(now), "exp": jwt.NewNumericDate(now.Add(life)),
		"subscribe": subscribe, "publish": publish,
	}).SignedString(refreshSecret)
	if err != nil {
		t.Error(err)
	}
	return s
}

// TestTokenFuncRefreshesThreeLifetimes: with a TokenFunc the client answers
// every refresh_required, so one connection outlives three tokens and no
// message is lost.
func TestTokenFuncRefreshesThreeLifetimes(t *testing.T) {
	// A lead of most of a second leaves each refresh round trip time to
	// finish under the race detector on a loaded machine.
	const life = 2 * time.Second
	g := authGateway(t, 900*time.Millisecond)
	var calls atomic.Int32
	var mu sync.Mutex
	var states []client.State
	var errs []error
	start := time.Now()
	c := dial(t, g, &client.Options{
		TokenFunc: func(ctx context.Context) (string, error) {
			calls.Add(1)
			return mint(t, life, []string{"t.#"}, []string{"t.#"}), nil
		},
		OnState: func(s client.State, _ error) { mu.Lock(); states = append(states, s); mu.Unlock() },
		OnError: func(err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() },
	})
	sub, err := c.SubscribeChan(testCtx(t), "t.#", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for round := 0; round < 10 && (calls.Load() < 4 || time.Since(start) < 3*life); round++ {
		before := calls.Load()
		if _, err := c.Publish(testCtx(t), "t.x", n); err != nil {
			t.Fatalf("publish %d: %v", n, err)
		}
		if m := recv(t, sub.C); m.Offset != int64(n) {
			t.Fatalf("message offset %d, want %d", m.Offset, n)
		}
		n++
		eventually(t, "a token refresh", func() bool { return calls.Load() > before })
	}
	if _, err := c.Publish(testCtx(t), "t.x", n); err != nil {
		t.Fatalf("final publish: %v", err)
	}
	if m := recv(t, sub.C); m.Offset != int64(n) {
		t.Fatalf("message offset %d, want %d", m.Offset, n)
	}
	if lived := time.Since(start); lived < 3*life {
		t.Fatalf("lived %v", lived)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(states) != 0 || len(errs) != 0 {
		t.Fatalf("states %v, errors %v: want no reconnect and no error", states, errs)
	}
}

// TestTokenFuncOnReconnect: a reconnect asks the TokenFunc again; a
// refresh whose new token narrows the grants ends the subscription with a
// forbidden error.
func TestTokenFuncOnReconnect(t *testing.T) {
	g := authGateway(t, -1)
	var calls atomic.Int32
	errc := make(chan error, 4)
	c := dial(t, g, &client.Options{
		TokenFunc: func(ctx context.Context) (string, error) {
			calls.Add(1)
			return mint(t, time.Minute, []string{"a.#"}, nil), nil
		},
		OnError:   func(err error) { errc <- err },
		Reconnect: client.ReconnectPolicy{MinDelay: 10 * time.Millisecond},
	})
	sub, err := c.SubscribeChan(testCtx(t), "a.x", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g.KillConnections()
	eventually(t, "a token for the reconnect", func() bool { return calls.Load() >= 2 })
	if _, err := c.Refresh(testCtx(t), mint(t, time.Minute, []string{"b.#"}, nil)); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	select {
	case err := <-errc:
		var e *client.Error
		if !errors.As(err, &e) || e.Code != client.CodeForbidden {
			t.Fatalf("error %v, want forbidden", err)
		}
	case <-time.After(wait):
		t.Fatal("no error for the revoked subscription")
	}
	select {
	case _, ok := <-sub.C:
		if ok {
			t.Fatal("message on a revoked subscription")
		}
	case <-time.After(wait):
		t.Fatal("revoked subscription's channel not closed")
	}
	if _, err := c.Refresh(testCtx(t), "not-a-token"); err == nil {
		t.Fatal("Refresh with a bad token succeeded")
	}
}
