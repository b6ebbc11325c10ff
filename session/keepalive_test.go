package session

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestKeepaliveEndsWithConnection: a client that goes away while the
// session's keepalive ping waits for its pong ends the session at once,
// not when the pong timeout (here 30 s) has passed: a vanished client
// keeps nothing of the gateway's (its subscriptions, its connection slot)
// for the length of a pong timeout.
func TestKeepaliveEndsWithConnection(t *testing.T) {
	for _, tc := range []struct {
		name  string
		leave func(c *rawClient) error
	}{
		{"TCP close", func(c *rawClient) error { return c.Close() }},
		{"close frame, then TCP close", func(c *rawClient) error {
			if _, err := c.Write(maskedFrame(0x80|opClose, "\x03\xe8")); err != nil {
				return err
			}
			return c.Close()
		}},
	} {
		for _, compressed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, compressed=%v", tc.name, compressed), func(t *testing.T) {
				const pongTimeout = 30 * time.Second
				rs := rawServeMode(t, compressed, Options{PingInterval: 10 * time.Millisecond, PongTimeout: pongTimeout}, echo{})
				if b0, _ := rs.client.readFrame(t); b0 != 0x80|opPing {
					t.Fatalf("first frame of the server starts %#x, want a ping", b0)
				}
				// The ping is outstanding: the client never answers it.
				if err := tc.leave(rs.client); err != nil {
					t.Fatal(err)
				}
				rs.waitEnded(t, pongTimeout/3, "the client left with a ping outstanding")
			})
		}
	}
}

// blockingHandler blocks in HandleFrame on a frame "block" until release
// is closed, telling entered when it starts to; other frames go to got.
type blockingHandler struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
	got     chan string
}

func (b *blockingHandler) releaseOnce() { b.once.Do(func() { close(b.release) }) }

func newBlockingHandler() *blockingHandler {
	return &blockingHandler{entered: make(chan struct{}, 1), release: make(chan struct{}), got: make(chan string, 16)}
}

func (b *blockingHandler) HandleFrame(_ *Session, data []byte) {
	if string(data) == "block" {
		b.entered <- struct{}{}
		<-b.release
		return
	}
	b.got <- string(data)
}

// TestKeepaliveSparesBusyReader: a client that answers the keepalive ping
// at once keeps its session while the session's reader is held in its
// handler (a publish waiting for room in a full pipeline, say) for many
// pong timeouts: its pong waits unread behind the handler, and is taken
// once the reader gets to it. Before, the keepalive ended the session
// although the client had answered.
func TestKeepaliveSparesBusyReader(t *testing.T) {
	for _, compressed := range []bool{false, true} {
		t.Run(fmt.Sprintf("compressed=%v", compressed), func(t *testing.T) { testKeepaliveSparesBusyReader(t, compressed) })
	}
}

func testKeepaliveSparesBusyReader(t *testing.T, compressed bool) {
	const pongTimeout = 100 * time.Millisecond
	h := newBlockingHandler()
	// The first ping comes well after the frame below is in the handler.
	rs := rawServeMode(t, compressed, Options{PingInterval: 500 * time.Millisecond, PongTimeout: pongTimeout}, h)
	t.Cleanup(h.releaseOnce) // before the session's cleanup waits for it
	if _, err := rs.client.Write(maskedText("block")); err != nil {
		t.Fatal(err)
	}
	<-h.entered
	b0, p := rs.client.readFrame(t)
	if b0 != 0x80|opPing {
		t.Fatalf("frame of the server starts %#x, want a ping", b0)
	}
	if _, err := rs.client.Write(maskedFrame(0x80|opPong, string(p))); err != nil {
		t.Fatal(err)
	}
	// Ten pong timeouts with the reader in its handler: the connection
	// stays open (nothing comes: no second ping while one waits).
	_ = rs.client.SetReadDeadline(time.Now().Add(10 * pongTimeout))
	var one [1]byte
	if _, err := rs.client.Read(one[:]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("with the reader in its handler the client read %v (byte %#x); want nothing", err, one[0])
	}
	_ = rs.client.SetReadDeadline(time.Time{})
	h.releaseOnce()
	if _, err := rs.client.Write(maskedText("after")); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-h.got:
		if f != "after" {
			t.Fatalf("handled %q", f)
		}
	case err := <-rs.runErr:
		t.Fatalf("the session ended: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the frame after the handler's wait was not handled")
	}
	// The keepalive goes on: the next ping comes, and the client answers.
	if b0, p := rs.client.readFrame(t); b0 != 0x80|opPing {
		t.Fatalf("frame of the server starts %#x, want the next ping", b0)
	} else if _, err := rs.client.Write(maskedFrame(0x80|opPong, string(p))); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-rs.runErr:
		t.Fatalf("the session ended: %v", err)
	default:
	}
}

// TestKeepaliveEndsSilentClientAfterBusyReader: a client that never
// answers is still ended by the keepalive when the pong timeout passed
// while the reader was in its handler: once the reader is back to waiting
// for its socket, after another pong timeout.
func TestKeepaliveEndsSilentClientAfterBusyReader(t *testing.T) {
	const pongTimeout = 50 * time.Millisecond
	h := newBlockingHandler()
	rs := rawServe(t, Options{PingInterval: 500 * time.Millisecond, PongTimeout: pongTimeout}, h)
	t.Cleanup(h.releaseOnce) // before the session's cleanup waits for it
	if _, err := rs.client.Write(maskedText("block")); err != nil {
		t.Fatal(err)
	}
	<-h.entered
	// The ping's pong timeout has passed with the reader busy: the ping
	// waits for the reader.
	waitFor(t, "the ping to wait for the reader", func() bool { return rs.sess.caughtUp.Load() != nil })
	h.releaseOnce()
	err := rs.waitEnded(t, 10*time.Second, "a silent client, its reader released")
	if err == nil || !strings.Contains(err.Error(), "keepalive") {
		t.Fatalf("Run = %v, want a keepalive error", err)
	}
}
