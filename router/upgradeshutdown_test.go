package router_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/router"
)

// TestUpgradeDuringShutdownIsClosed holds a WebSocket upgrade in its
// connect hook until Shutdown has returned, then lets it finish: the
// session the gateway refuses after the 101 gets a close frame with 1001
// and its socket is closed, instead of a socket nobody serves.
//
// The upgrade waits for Shutdown's return, an event, and not for Ready to
// fail: a Ready that passes its shutting-down check just before Shutdown
// begins runs a readiness probe whose record Shutdown's stopped live tail
// never announces, so it would answer only when its context ends, and the
// upgrade would be let go too late for the dial sharing that context.
// Shutdown does not wait for an upgrade still in its connect hook: the
// session is not yet the Router's.
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
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("Shutdown did not return while an upgrade waited in its connect hook")
	}
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
}
