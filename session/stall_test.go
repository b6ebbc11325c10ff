package session

import (
	"errors"
	"testing"
	"time"
)

// TestStalledFrameEndsByMessageTimeout: a client that sends the start of a
// frame (a few bytes of its header, or of a control frame) and then
// nothing is closed by the message timeout, counted from the frame's
// first byte, with 1008, not only when a keepalive finds it silent (here
// an hour away). Before, the message timeout started only once the
// library had read a data frame's whole header.
func TestStalledFrameEndsByMessageTimeout(t *testing.T) {
	text := maskedText("hello")
	ping := maskedFrame(0x80|opPing, "p1")
	for _, tc := range []struct {
		name string
		sent []byte
	}{
		{"one byte of a text frame", text[:1]},
		{"a text frame's header without its mask", text[:4]},
		{"one byte of a ping", ping[:1]},
		{"a ping without its payload", ping[:6]},
		{"a text frame, then one byte of the next", append(append([]byte{}, text...), text[0])},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var handled int
			rs := rawServe(t, Options{MessageTimeout: 100 * time.Millisecond, PingInterval: time.Hour},
				handlerFunc(func(*Session, []byte) { handled++ }))
			if _, err := rs.client.Write(tc.sent); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			// readFrame waits 10 s at most.
			if b0, p := rs.client.readFrame(t); b0 != 0x80|opClose || len(p) < 2 || int(p[0])<<8|int(p[1]) != 1008 {
				t.Fatalf("the client got % x % x, want a close frame with 1008", b0, p)
			}
			t.Logf("closed with 1008 after %v", time.Since(start).Round(time.Millisecond))
			// The client cannot answer the close in the middle of its
			// frame; it goes.
			_ = rs.client.Close()
			err := rs.waitEnded(t, 10*time.Second, "the client went")
			if !errors.Is(err, ErrMessageTimeout) {
				t.Fatalf("Run = %v, want ErrMessageTimeout", err)
			}
		})
	}
}

// TestFrameInPiecesIsHandled: a frame whose bytes arrive one write at a
// time, its header split, is handled whole; a client idle after a
// complete control frame is not timed out.
func TestFrameInPiecesIsHandled(t *testing.T) {
	got := make(chan string, 1)
	// Long enough for the one-byte writes below on a loaded machine.
	const timeout = time.Second
	rs := rawServe(t, Options{MessageTimeout: timeout, PingInterval: time.Hour},
		handlerFunc(func(_ *Session, data []byte) { got <- string(data) }))
	for _, b := range maskedText("pieces") {
		if _, err := rs.client.Write([]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case f := <-got:
		if f != "pieces" {
			t.Fatalf("handled %q", f)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the frame sent in pieces was not handled")
	}
	ping := maskedFrame(0x80|opPing, "p1")
	for _, b := range ping {
		if _, err := rs.client.Write([]byte{b}); err != nil {
			t.Fatal(err)
		}
	}
	if b0, p := rs.client.readFrame(t); b0 != 0x80|opPong || string(p) != "p1" {
		t.Fatalf("the answer to the ping sent in pieces: % x %q", b0, p)
	}
	// Idle after a complete frame: several message timeouts pass quietly.
	select {
	case err := <-rs.runErr:
		t.Fatalf("an idle session ended: %v", err)
	case <-time.After(3 * timeout):
	}
}
