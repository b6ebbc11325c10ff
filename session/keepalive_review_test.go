package session

import (
	"bufio"
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// rawServeAccept is rawServe with the AcceptOptions ao.
func rawServeAccept(t *testing.T, ao *websocket.AcceptOptions, opts Options, h Handler) *rawSession {
	t.Helper()
	if opts.EncodeGap == nil {
		opts.EncodeGap = testGap
	}
	rs := &rawSession{runErr: make(chan error, 1)}
	sessions := make(chan *Session, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := Accept(w, r, ao, "raw", opts)
		if err != nil {
			t.Error(err)
			close(sessions)
			return
		}
		if err := s.Start(context.Background(), h, func(err error) { rs.runErr <- err }); err != nil {
			t.Error(err)
		}
		sessions <- s
	}))
	t.Cleanup(srv.Close)
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	req := "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + "\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	rs.client = &rawClient{Conn: c, br: bufio.NewReader(c)}
	resp, err := http.ReadResponse(rs.client.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade reply %d", resp.StatusCode)
	}
	rs.sess = <-sessions
	if rs.sess == nil {
		t.FailNow()
	}
	t.Cleanup(func() {
		_ = c.Close()
		<-rs.sess.Done()
	})
	return rs
}

// TestReviewKeepaliveEndsSilentClientAfterItsPing: a session accepted with
// AcceptOptions.OnPingReceived (the client's pings are left to the
// library) is ended by its keepalive when its client has sent one ping and
// then gone silent without closing its TCP connection (a client that lost
// power, a dropped NAT mapping), within PingInterval + PongTimeout (here
// 20 ms + 200 ms; the bound is 15 s). Before, it was never ended: the ping
// went to the library (headControl), whose reader then waited inside the
// library for the next data frame, so the burst never ended, and ownPing,
// its pong timeout passed while a burst was in progress, waited for that
// burst to catch up with its input forever.
func TestReviewKeepaliveEndsSilentClientAfterItsPing(t *testing.T) {
	ao := &websocket.AcceptOptions{OnPingReceived: func(context.Context, []byte) bool { return true }}
	rs := rawServeAccept(t, ao, Options{PingInterval: 20 * time.Millisecond, PongTimeout: 200 * time.Millisecond}, echo{})
	if _, err := rs.client.Write(maskedFrame(0x80|opPing, "hi")); err != nil {
		t.Fatal(err)
	}
	// The client reads what the server sends (so no write of the server
	// blocks) and never answers: it is dead as far as the keepalive can
	// tell.
	go func() {
		buf := make([]byte, 512)
		for {
			if _, err := rs.client.Read(buf); err != nil {
				return
			}
		}
	}()
	rs.waitEnded(t, 15*time.Second, "a silent client whose one ping went to the library")
}
