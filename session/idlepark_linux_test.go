package session

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// idleReaders is the number of goroutines n idle sessions run: none, their
// sockets parked in the idle poller.
func idleReaders(int) int { return 0 }

// TestParkedSessionsHoldNoGoroutine: 1,000 idle sessions accepted by
// Accept hold no goroutine each: their sockets wait in the idle poller's
// epoll set (idlepoll_linux.go). Before, each parked its reader on one
// goroutine.
func TestParkedSessionsHoldNoGoroutine(t *testing.T) {
	const n = 1000
	before := goroutines()
	f := newIdleFleet(t, context.Background(), n, Options{})
	var extra int
	waitFor(t, "the readers to park", func() bool {
		extra = goroutines() - before
		return extra < n/10
	})
	t.Logf("%d idle sessions hold %d goroutines", n, extra)
	_ = f
}

// waitParked waits until the session's reader has parked its socket in the
// idle poller.
func waitParked(t *testing.T, s *Session) {
	t.Helper()
	waitFor(t, "the reader to park", s.parked.Load)
}

// TestParkedWakesOnData: a parked session is woken by each frame of its
// client, handles it and parks again; a client's ping is answered from a
// parked session too.
func TestParkedWakesOnData(t *testing.T) {
	got := make(chan string, 4)
	rs := rawServe(t, Options{}, handlerFunc(func(_ *Session, data []byte) { got <- string(data) }))
	for i := range 3 {
		waitParked(t, rs.sess)
		want := fmt.Sprint("frame ", i)
		writeHandled(t, rs, got, want)
	}
	waitParked(t, rs.sess)
	if _, err := rs.client.Write(maskedFrame(0x80|opPing, "p1")); err != nil {
		t.Fatal(err)
	}
	if b0, p := rs.client.readFrame(t); b0 != 0x80|opPong || string(p) != "p1" {
		t.Fatalf("answer to the ping: %#x %q, want a pong \"p1\"", b0, p)
	}
	waitParked(t, rs.sess)
}

// TestParkedEndsOnPeerClose: a parked session ends at once when its
// client closes the connection (FIN) or resets it (RST).
func TestParkedEndsOnPeerClose(t *testing.T) {
	for _, reset := range []bool{false, true} {
		t.Run(fmt.Sprintf("reset=%v", reset), func(t *testing.T) {
			rs := rawServe(t, Options{}, echo{})
			waitParked(t, rs.sess)
			if reset {
				if err := rs.client.Conn.(*net.TCPConn).SetLinger(0); err != nil {
					t.Fatal(err)
				}
			}
			if err := rs.client.Close(); err != nil {
				t.Fatal(err)
			}
			if err := rs.waitEnded(t, 5*time.Second, "the client left a parked session"); err == nil {
				t.Fatal("Run reported nil for a connection the client dropped")
			}
		})
	}
}

// TestParkedEndsOnClose: Close ends a parked session: with the close
// handshake when the client answers, and when it never does once the
// library gives up on it and closes the connection, which no event of the
// socket reports (lazyConn.Close resumes the reader).
func TestParkedEndsOnClose(t *testing.T) {
	t.Run("answered", func(t *testing.T) {
		rs := rawServe(t, Options{}, echo{})
		waitParked(t, rs.sess)
		rs.sess.Close(websocket.StatusGoingAway, "shutdown")
		if b0, _ := rs.client.readFrame(t); b0 != 0x80|opClose {
			t.Fatalf("first frame %#x, want a close frame", b0)
		}
		if _, err := rs.client.Write(maskedFrame(0x80|opClose, "\x03\xe9")); err != nil {
			t.Fatal(err)
		}
		if err := rs.waitEnded(t, 5*time.Second, "Close of a parked session"); err != nil {
			t.Fatalf("Run: %v, want nil", err)
		}
	})
	t.Run("unanswered", func(t *testing.T) {
		rs := rawServe(t, Options{}, echo{})
		waitParked(t, rs.sess)
		rs.sess.Close(websocket.StatusGoingAway, "shutdown")
		// The library waits 5 s for the client's close frame.
		rs.waitEnded(t, 15*time.Second, "Close of a parked session, unanswered")
	})
}

// TestParkedEndsOnShutdown: cancelling the context the sessions run with
// (as a gateway's shutdown does) ends every parked session.
func TestParkedEndsOnShutdown(t *testing.T) {
	const n = 8
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := newIdleFleet(t, ctx, n, Options{})
	for _, s := range f.sessions {
		waitParked(t, s)
	}
	cancel()
	// Each client reads the close frame and drops the connection.
	for i, c := range f.conns {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var hdr [2]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil || hdr[0] != 0x80|opClose {
			t.Fatalf("client %d: % x (%v), want a close frame", i, hdr, err)
		}
		_ = c.Close()
	}
	for i := range n {
		select {
		case <-f.errs:
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d parked sessions still run after the shutdown", n-i, n)
		}
	}
}

// TestParkedEndsOnKeepaliveTimeout: a parked session whose client never
// answers the keepalive ping ends when the pong timeout has passed,
// although its socket never becomes readable.
func TestParkedEndsOnKeepaliveTimeout(t *testing.T) {
	rs := rawServe(t, Options{PingInterval: 50 * time.Millisecond, PongTimeout: 200 * time.Millisecond}, echo{})
	waitParked(t, rs.sess)
	err := rs.waitEnded(t, 5*time.Second, "a silent client")
	if !errors.Is(err, ErrKeepalive) {
		t.Fatalf("Run: %v, want ErrKeepalive", err)
	}
}

// TestParkedWakesUnderLoad: many sessions, each woken from the idle poller
// for every frame of a request and reply exchange, all at once: no wake is
// lost (each reply comes within 10 seconds).
func TestParkedWakesUnderLoad(t *testing.T) {
	const sessions, rounds = 32, 300
	clients := make([]*rawClient, sessions)
	for i := range clients {
		clients[i] = rawServe(t, Options{}, echo{}).client
	}
	errs := make(chan error, sessions)
	for i, c := range clients {
		go func() {
			errs <- exchange(c, i, rounds)
		}()
	}
	for range sessions {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// exchange writes rounds frames to c, each after the reply to the one
// before, and checks the replies (echo's).
func exchange(c *rawClient, id, rounds int) error {
	for r := range rounds {
		want := fmt.Sprintf("%d-%d", id, r)
		if _, err := c.Write(maskedText(want)); err != nil {
			return err
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		var hdr [2]byte
		if _, err := io.ReadFull(c, hdr[:]); err != nil {
			return fmt.Errorf("client %d, round %d: %w", id, r, err)
		}
		p := make([]byte, hdr[1]&0x7f)
		if _, err := io.ReadFull(c, p); err != nil {
			return fmt.Errorf("client %d, round %d: %w", id, r, err)
		}
		if string(p) != "c:"+want {
			return fmt.Errorf("client %d, round %d: reply %q, want %q", id, r, p, "c:"+want)
		}
	}
	return nil
}

// writeHandled writes want to rs's client as a text frame and waits until
// the session's handler passed it on got.
func writeHandled(t *testing.T, rs *rawSession, got <-chan string, want string) {
	t.Helper()
	if _, err := rs.client.Write(maskedText(want)); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-got:
		if f != want {
			t.Fatalf("handled %q, want %q", f, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%q not handled", want)
	}
}
