package session

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/coder/websocket"
)

// TestSessionStructFits640: a Session fits the 640-byte size class, as
// the idle-session layout counts (it was 712 bytes, in the 768-byte
// class, with its end channels and close state inline): a field added
// later must find room or move to a part made on demand (ends.go).
func TestSessionStructFits640(t *testing.T) {
	t.Logf("Session %d bytes, endState %d", unsafe.Sizeof(Session{}), unsafe.Sizeof(endState{}))
	if n := unsafe.Sizeof(Session{}); n > 640 {
		t.Fatalf("Session is %d bytes, past the 640-byte size class", n)
	}
	if n := unsafe.Sizeof(endState{}); n > 96 {
		t.Fatalf("endState is %d bytes, want at most 96", n)
	}
}

// endStateMade reports whether s has made its close state (ends.go).
func endStateMade(s *Session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end != nil
}

// TestIdleSessionMakesNoEndState: a session that has handled frames,
// answered a ping and written replies holds no close state and no end
// channel until someone waits on its end or closes it; a channel taken
// from Closing or Done before is closed at its step, one taken after is
// closed already.
func TestIdleSessionMakesNoEndState(t *testing.T) {
	sv := serve(t, Options{}, echo{}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 3 {
		if err := sv.client.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
			t.Fatal(err)
		}
		if _, p, err := sv.client.Read(ctx); err != nil || string(p) != "c:hi" {
			t.Fatalf("read %q, %v", p, err)
		}
	}
	s := sv.sess
	if endStateMade(s) || s.ends.Load() != 0 {
		t.Fatalf("an idle session holds its close state (made %v, steps %b)", endStateMade(s), s.ends.Load())
	}
	closing, done := s.Closing(), s.Done()
	if !endStateMade(s) {
		t.Fatal("no close state after a wait was asked for")
	}
	select {
	case <-closing:
		t.Fatal("Closing closed before a close")
	case <-done:
		t.Fatal("Done closed before the end")
	default:
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		// The client reads the close frame and answers it.
		_, _, _ = sv.client.Read(ctx)
	}()
	defer func() { <-read }()
	s.Close(websocket.StatusNormalClosure, "bye")
	for _, c := range []<-chan struct{}{closing, done, s.Closing(), s.Done()} {
		select {
		case <-c:
		case <-ctx.Done():
			t.Fatal("an end channel was not closed at its step")
		}
	}
	if err := <-sv.runErr; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := s.Cause(); err != nil {
		t.Fatalf("Cause after Close: %v", err)
	}
}

// TestQueueStructFits352: a Queue fits the 352-byte size class (it was
// 360 bytes, in the 384-byte class).
func TestQueueStructFits352(t *testing.T) {
	t.Logf("Queue %d bytes", unsafe.Sizeof(Queue{}))
	if n := unsafe.Sizeof(Queue{}); n > 352 {
		t.Fatalf("Queue is %d bytes, past the 352-byte size class", n)
	}
}
