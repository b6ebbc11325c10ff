package session

import (
	"fmt"
	"testing"
	"time"
)

// TestUnparkedReaderKeepsMessageTimer: a reader that does not park
// its socket (NoIdlePark here; a TLS connection, another OS or a fallen
// back idle poller alike) keeps one message timer for its frames: the
// timer is reused while the reader runs and let go only when the reader
// parks. The handler runs on the reader, after the frame's timer has
// stopped, and records which timer the frame used.
func TestUnparkedReaderKeepsMessageTimer(t *testing.T) {
	type seen struct {
		data  string
		timer *time.Timer
	}
	got := make(chan seen, 1)
	rs := rawServe(t, Options{NoIdlePark: true}, handlerFunc(func(s *Session, data []byte) {
		got <- seen{string(data), s.msgTimer}
	}))
	var first *time.Timer
	for i := range 4 {
		want := fmt.Sprint("frame ", i)
		if _, err := rs.client.Write(maskedText(want)); err != nil {
			t.Fatal(err)
		}
		var g seen
		select {
		case g = <-got:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s not handled", want)
		}
		if g.data != want || g.timer == nil {
			t.Fatalf("handled %q with timer %p, want %q with a timer", g.data, g.timer, want)
		}
		if i == 0 {
			first = g.timer
		} else if g.timer != first {
			t.Fatalf("frame %d used a new message timer (%p, the first frame's %p): a reader that never parks made one again", i, g.timer, first)
		}
	}
}
