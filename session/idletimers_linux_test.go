package session

import (
	"testing"
	"time"
)

// TestParkedReaderHoldsNoMessageTimer: once a session has handled a frame
// and its reader has parked its socket, it holds no message timer, on the
// first park (from the reader goroutine) and on later ones (from a resumed
// burst); the next frame makes one again.
func TestParkedReaderHoldsNoMessageTimer(t *testing.T) {
	got := make(chan struct{}, 1)
	rs := rawServe(t, Options{}, handlerFunc(func(*Session, []byte) { got <- struct{}{} }))
	s := rs.sess
	for i := range 3 {
		if _, err := rs.client.Write(maskedText("hi")); err != nil {
			t.Fatal(err)
		}
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("frame %d not handled", i)
		}
		// The reader lets the timer go before it parks (parkReader), and
		// Parked is set after.
		waitFor(t, "the reader parked", s.Parked)
		if s.msgTimer != nil {
			t.Fatalf("after frame %d the parked session holds a message timer", i)
		}
	}
}
