package router_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/router"
)

// TestUpgradeDuringShutdownIsClosed holds a WebSocket upgrade in its
// connect hook until Shutdown has begun, then lets it finish: the session
// the gateway refuses after the 101 gets a close frame with 1001 and its
// socket is closed, instead of a socket nobody serves.
func TestUpgradeDuringShutdownIsClosed(t *testing.T) {
	entered := make(chan struct{})
	proceed := make(chan struct{})
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request, hook string, _ map[string]any) {
		if hook == "connect" {
			close(entered) // one connect only
			select {
			case <-proceed:
			case <-r.Context().Done():
			}
		}
		reply(w, map[string]any{"allow": true})
	})
	g := newGateway(t, withHooks(b, func(h *router.HookOptions) { h.Timeout = waitTimeout }))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	type dialed struct {
		conn *websocket.Conn
		err  error
	}
	dialc := make(chan dialed, 1)
	go func() {
		conn, _, err := websocket.Dial(ctx, g.wsURL(), nil)
		dialc <- dialed{conn, err}
	}()
	select {
	case <-entered:
	case <-ctx.Done():
		t.Fatal("the upgrade never reached the connect hook")
	}
	shut := make(chan error, 1)
	go func() { shut <- g.rt.Shutdown(ctx) }()
	waitUntil(t, "the gateway is shutting down", func() bool { return g.rt.Ready(ctx) != nil })
	close(proceed)

	d := <-dialc
	if d.err != nil {
		t.Fatalf("dial: %v (want the upgrade to complete)", d.err)
	}
	defer d.conn.CloseNow()
	_, _, err := d.conn.Read(ctx)
	if got := websocket.CloseStatus(err); got != websocket.StatusGoingAway {
		t.Fatalf("first read: %v (status %d), want a close frame with %d", err, got, websocket.StatusGoingAway)
	}
	if err := <-shut; err != nil {
		t.Fatalf("shutdown: %v", err)
	}
}
