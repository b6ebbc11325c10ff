package router_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

// TestWSHandlerReturnsAfterUpgrade: the HTTP handler of /v1/ws returns once
// the connection is upgraded (net/http then drops the request's state),
// while the session goes on: it answers ops, delivers, and Shutdown still
// waits for it and closes it.
func TestWSHandlerReturnsAfterUpgrade(t *testing.T) {
	eng := memengine.New(memengine.Options{})
	rt, err := router.New(router.Options{Engine: eng, Registry: prometheus.NewRegistry(), StatsInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	var inHandler atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inHandler.Add(1)
		defer inHandler.Add(-1)
		rt.ServeHTTP(w, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	defer eng.Close(ctx)

	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/ws"
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	read := func(op string) {
		t.Helper()
		for {
			_, data, err := c.Read(ctx)
			if err != nil {
				t.Fatalf("waiting for %s: %v", op, err)
			}
			if strings.Contains(string(data), `"op":"`+op+`"`) {
				return
			}
		}
	}
	read("welcome")
	deadline := time.Now().Add(waitTimeout)
	for inHandler.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the /v1/ws handler has not returned after the upgrade")
		}
		time.Sleep(time.Millisecond)
	}
	write := func(s string) {
		t.Helper()
		if err := c.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"op":"subscribe","id":"1","pattern":"up.t"}`)
	read("subscribed")
	write(`{"op":"publish","id":"2","topic":"up.t","data":1}`)
	read("message")

	if err := rt.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	for {
		if _, _, err := c.Read(ctx); err != nil {
			if s := websocket.CloseStatus(err); s != websocket.StatusGoingAway {
				t.Fatalf("close status %v (%v), want 1001", s, err)
			}
			break
		}
	}
}
