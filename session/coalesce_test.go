package session

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// writeLog returns a fake socket whose writes are also sent, as their
// frames, on the returned channel.
func writeLog() (*fakeSocket, chan []string) {
	fs := newFakeSocket()
	ch := make(chan []string, 64)
	fs.writeFn = func(_ context.Context, p []byte) error {
		ch <- strings.Split(string(p), "\n")
		return nil
	}
	return fs, ch
}

func nextWrite(t *testing.T, ch <-chan []string) []string {
	t.Helper()
	select {
	case w := <-ch:
		return w
	case <-time.After(10 * time.Second):
		t.Fatal("no write within 10s")
		return nil
	}
}

func msgItem(off int64) Item {
	return Item{Frame: fmt.Appendf(nil, "m%d", off), Stream: Stream{Sub: 1, Topic: "t"}, Offset: off}
}

// TestWriteDelayFlushesAtCap: with a delay far longer than the test, the
// writer writes when a batch's worth of frames is queued, never more than
// that in one write, and what waits below the cap goes out with the next
// reply, in order.
func TestWriteDelayFlushesAtCap(t *testing.T) {
	fs, writes := writeLog()
	s := newSession("c", Options{WriteDelay: time.Hour, WriteDelayFrames: 5, EncodeGap: testGap}, fs.socket())
	done := startWriter(s)
	for i := range int64(5) {
		s.Send(msgItem(i))
	}
	if w := nextWrite(t, writes); strings.Join(w, ",") != "m0,m1,m2,m3,m4" {
		t.Fatalf("first write %q, want the 5 frames of the cap", w)
	}
	for i := int64(5); i < 12; i++ {
		s.Send(msgItem(i))
	}
	if w := nextWrite(t, writes); strings.Join(w, ",") != "m5,m6,m7,m8,m9" {
		t.Fatalf("second write %q, want m5..m9", w)
	}
	// m10 and m11 wait for the delay; a reply is written at once and takes
	// them along.
	s.Send(Item{Frame: []byte("reply")})
	if w := nextWrite(t, writes); strings.Join(w, ",") != "reply,m10,m11" {
		t.Fatalf("third write %q, want reply,m10,m11", w)
	}
	s.Close(websocket.StatusNormalClosure, "")
	<-done
	if st := s.Stats(); st.Writes != 3 || st.Sent != 13 {
		t.Errorf("stats %+v, want 3 writes of 13 frames", st)
	}
}

// TestWriteDelayExpires: frames below the cap are written once the delay
// has passed.
func TestWriteDelayExpires(t *testing.T) {
	fs, writes := writeLog()
	s := newSession("c", Options{WriteDelay: 5 * time.Millisecond, EncodeGap: testGap}, fs.socket())
	done := startWriter(s)
	for i := range int64(3) {
		s.Send(msgItem(i))
	}
	got := nextWrite(t, writes)
	for len(got) < 3 { // the writer may have woken before the third Send
		got = append(got, nextWrite(t, writes)...)
	}
	if strings.Join(got, ",") != "m0,m1,m2" {
		t.Fatalf("frames %q, want m0,m1,m2", got)
	}
	s.Close(websocket.StatusNormalClosure, "")
	<-done
}

// TestWriteDelayKeepsDropsAndOrder: under coalescing a full queue drops and
// records gaps as without it; the gap and the kept messages go out in
// offset order, and a close flushes what is waiting.
func TestWriteDelayKeepsDropsAndOrder(t *testing.T) {
	fs, writes := writeLog()
	s := newSession("c", Options{WriteDelay: time.Hour, QueueMessages: 4, EncodeGap: testGap}, fs.socket())
	done := startWriter(s)
	for i := range int64(10) {
		s.Send(msgItem(i))
	}
	s.Close(websocket.StatusNormalClosure, "")
	<-done
	close(writes)
	var got []string
	for w := range writes {
		got = append(got, w...)
	}
	if strings.Join(got, ",") != "g1:0-6,m6,m7,m8,m9" {
		t.Fatalf("frames %q, want the gap of the 6 dropped, then m6..m9", got)
	}
	if st := s.Stats(); st.Dropped != 6 || st.Gaps != 1 {
		t.Errorf("stats %+v, want 6 dropped, 1 gap", st)
	}
	if len(fs.closes) != 1 {
		t.Errorf("closes %v, want one", fs.closes)
	}
}

// TestWriteDelayOff: without a delay a batch has no frame cap (today's
// behaviour): 100 queued frames go in one write.
func TestWriteDelayOff(t *testing.T) {
	for _, tt := range []struct {
		delay      time.Duration
		wantWrites int
	}{{0, 1}, {time.Hour, 2}} { // with a delay, the default cap of 64
		t.Run(fmt.Sprint(tt.delay), func(t *testing.T) {
			fs := newFakeSocket()
			s := newSession("c", Options{WriteDelay: tt.delay, EncodeGap: testGap}, fs.socket())
			for i := range int64(100) {
				s.Send(msgItem(i))
			}
			s.Close(websocket.StatusNormalClosure, "")
			<-startWriter(s)
			if len(fs.writes) != tt.wantWrites || len(fs.frames()) != 100 {
				t.Errorf("%d writes of %d frames, want %d writes of 100", len(fs.writes), len(fs.frames()), tt.wantWrites)
			}
		})
	}
}
