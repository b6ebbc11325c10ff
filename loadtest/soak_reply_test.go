package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestSoakConnRequestUnansweredEnds is a gateway that accepts a
// subscriber's connection and never answers its request: the soak client
// gives up after soakReplyTimeout with an error naming the request,
// instead of waiting for ever with the run's context (which has no
// deadline), which hung a whole soak run.
func TestSoakConnRequestUnansweredEnds(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		c, err := websocket.Accept(w, req, nil)
		if err != nil {
			return
		}
		defer c.CloseNow()
		select {
		case <-release:
		case <-req.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)

	defer func(d time.Duration) { soakReplyTimeout = d }(soakReplyTimeout)
	soakReplyTimeout = 200 * time.Millisecond

	r := newRunner(&config{}, io.Discard)
	conn, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	var c soakConn
	errc := make(chan error, 1)
	go func() {
		errc <- c.run(context.Background(), r, conn, map[string]any{"op": "subscribe", "id": 1}, func([]byte) bool { return true }, "subscribed")
	}()
	select {
	case err := <-errc:
		if err == nil || !strings.Contains(err.Error(), "subscribed") {
			t.Fatalf("run = %v, want an error naming the unanswered request", err)
		}
	case <-time.After(10 * time.Second):
		conn.CloseNow()
		<-errc
		t.Fatal("a request the gateway never answers still waits after 10s")
	}
	r.wg.Wait()
}
