package session

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// upgradePair serves one Upgrade on a loopback server and returns both
// ends: the client's connection and the server's Upgraded.
func upgradePair(t *testing.T) (*websocket.Conn, *Upgraded) {
	t.Helper()
	got := make(chan *Upgraded, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, err := Upgrade(w, r, nil)
		if err != nil {
			t.Error(err)
		}
		got <- u
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	u := <-got
	if u == nil {
		t.FailNow()
	}
	t.Cleanup(func() { u.Conn.CloseNow() })
	return c, u
}

// TestUpgradeLazyStream: an Upgraded connection takes the lazy path on
// TCP; Wait returns once input arrived, Buffered tells what is left after
// a partial read, NetConn reads a byte stream across binary messages and
// WriteBinary writes one binary message that the client reads whole.
func TestUpgradeLazyStream(t *testing.T) {
	c, u := upgradePair(t)
	if !u.Lazy() || !u.direct {
		t.Fatalf("lazy %v, direct %v: want both on a plain TCP connection", u.Lazy(), u.direct)
	}
	if u.Buffered() {
		t.Fatal("Buffered before any input")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Write(ctx, websocket.MessageBinary, []byte("hello ")); err != nil {
		t.Fatal(err)
	}
	if err := c.Write(ctx, websocket.MessageBinary, []byte("world")); err != nil {
		t.Fatal(err)
	}
	u.Wait() // returns: input arrived
	nc := u.NetConn()
	p := make([]byte, 3)
	if _, err := io.ReadFull(nc, p); err != nil {
		t.Fatal(err)
	}
	rest := make([]byte, 8)
	if _, err := io.ReadFull(nc, rest); err != nil {
		t.Fatal(err)
	}
	if got := string(p) + string(rest); got != "hello world" {
		t.Fatalf("read %q", got)
	}
	if u.Buffered() {
		t.Fatal("Buffered after everything was read")
	}

	payload := bytes.Repeat([]byte("x"), 1000)
	if err := u.WriteBinary(payload); err != nil {
		t.Fatal(err)
	}
	typ, data, err := c.Read(ctx)
	if err != nil || typ != websocket.MessageBinary || !bytes.Equal(data, payload) {
		t.Fatalf("client read %v, %d bytes, %v", typ, len(data), err)
	}
	// The close handshake: the client answers while it reads.
	read := make(chan error, 1)
	go func() { _, _, err := c.Read(ctx); read <- err }()
	if err := nc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-read; websocket.CloseStatus(err) != websocket.StatusNormalClosure {
		t.Fatalf("client read %v after the close", err)
	}
}

// TestInputWaitReturnsOnInput: InputWait's function returns once the
// peer wrote, and reads nothing.
func TestInputWaitReturnsOnInput(t *testing.T) {
	client, server := tcpPair(t)
	wait := InputWait(server)
	if wait == nil {
		t.Fatal("no InputWait for a TCP connection")
	}
	done := make(chan struct{})
	go func() { wait(); close(done) }()
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	<-done
	b := make([]byte, 1)
	if _, err := io.ReadFull(server, b); err != nil || b[0] != 'x' {
		t.Fatalf("read %q, %v", b, err)
	}
}

// TestOneWayReadRunsOnSessionGoroutine: a one-way session with
// Transport.Read runs it on its own goroutine, and ends once it returned
// and the transport is closed.
func TestOneWayReadRunsOnSessionGoroutine(t *testing.T) {
	read := make(chan struct{})
	var s *Session
	s = NewOneWay("r", Options{EncodeGap: testGap}, Transport{
		Write:    func(context.Context, []byte) error { return nil },
		Close:    func(websocket.StatusCode, string) error { return nil },
		CloseNow: func() error { return nil },
		Read: func() {
			close(read)
			s.Close(websocket.StatusNormalClosure, "reader done")
		},
	})
	ended := make(chan error, 1)
	if err := s.Start(context.Background(), nil, func(err error) { ended <- err }); err != nil {
		t.Fatal(err)
	}
	<-read
	if err := <-ended; err != nil {
		t.Fatalf("ended with %v", err)
	}
}
