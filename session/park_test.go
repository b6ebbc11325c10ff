package session

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// writerGoroutines counts the goroutines running a writer of this package.
func writerGoroutines() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Count(string(buf), "session.(*Session).writeLoop(")
}

// poll reports whether cond became true within five seconds, checking it
// every millisecond.
func poll(cond func() bool) bool {
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(time.Millisecond)
	}
	return true
}

func parked(s *Session) func() bool {
	return func() bool { return s.writer.Load() == writerParked }
}

// parkedSession makes a session on a fake socket and starts its writer,
// returning once the writer has parked; done is closed when the writer
// exits.
func parkedSession(t *testing.T) (f *fakeSocket, s *Session, done <-chan struct{}) {
	t.Helper()
	f = newFakeSocket()
	s = newSession("s", Options{EncodeGap: testGap}, f.socket())
	done = startWriter(s)
	waitFor(t, "the writer to park", parked(s))
	return f, s, done
}

// TestWriterParksWhenIdle: with nothing to write the writer goroutine
// exits; a Send starts it again and the frame is written; Close ends the
// session from a parked writer.
func TestWriterParksWhenIdle(t *testing.T) {
	f := newFakeSocket()
	s := newSession("s", Options{EncodeGap: testGap}, f.socket())
	s.Send(ctl("welcome"))
	done := startWriter(s)
	waitFor(t, "the writer to park", parked(s))
	if got := f.frames(); len(got) != 1 || got[0] != "c:welcome" {
		t.Fatalf("frames = %q, want the welcome", got)
	}
	waitFor(t, "the writer goroutine to exit", func() bool { return writerGoroutines() == 0 })

	s.Send(msg(1, 0, 0, DropOld))
	waitFor(t, "the message", func() bool { return len(f.frames()) == 2 })
	waitFor(t, "the writer to park again", parked(s))
	s.q.mu.Lock()
	kept := s.q.streams != nil || s.q.lastSt != nil || ringSlots(s.q) > 0
	s.q.mu.Unlock()
	if kept {
		t.Fatal("a parked writer's queue keeps its stream state or ring slots")
	}
	s.Close(websocket.StatusNormalClosure, "")
	<-done
	if len(f.closes) != 1 || f.closes[0] != websocket.StatusNormalClosure {
		t.Fatalf("closes = %v, want one 1000", f.closes)
	}
	if st := s.writer.Load(); st != writerDone {
		t.Fatalf("writer state %d after close, want done", st)
	}
}

// TestWriterParkedDeliversInOrder sends from several producers, each
// waiting now and then until the writer has parked, so that many frames
// meet a parked writer and many a running one: every frame arrives once,
// in each producer's order, and no two writes ever overlap.
func TestWriterParkedDeliversInOrder(t *testing.T) {
	const producers, perProducer = 4, 200
	f := newFakeSocket()
	f.pingFn = func(context.Context) error { return nil }
	var inWrite atomic.Int32
	f.writeFn = func(context.Context, []byte) error {
		if inWrite.Add(1) != 1 {
			t.Error("two writes at once: two writers ran")
		}
		runtime.Gosched()
		inWrite.Add(-1)
		return nil
	}
	// Frequent keepalive ticks make a busy writer park again and again.
	opts := Options{EncodeGap: testGap, QueueMessages: producers * perProducer, PingInterval: 2 * time.Millisecond}
	s := newSession("s", opts, f.socket())
	done := startWriter(s)
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := range perProducer {
				if i%10 == 0 {
					// A busy writer stays resident instead (see
					// residentWindow); the next tick is far away.
					if !poll(func() bool { return parked(s)() || s.busy.Load() }) {
						t.Error("the writer neither parked nor stayed resident")
						return
					}
				}
				if !s.Send(Item{Frame: fmt.Appendf(nil, "p%d-%d", p, i)}) {
					t.Errorf("send p%d-%d refused", p, i)
				}
			}
		})
	}
	wg.Wait()
	waitFor(t, "every frame", func() bool { return len(f.frames()) == producers*perProducer })
	s.Close(websocket.StatusNormalClosure, "")
	<-done
	next := make([]int, producers)
	for _, fr := range f.frames() {
		var p, i int
		if _, err := fmt.Sscanf(fr, "p%d-%d", &p, &i); err != nil {
			t.Fatalf("frame %q: %v", fr, err)
		}
		if i != next[p] {
			t.Fatalf("producer %d: frame %d arrived when %d was due", p, i, next[p])
		}
		next[p]++
	}
}

// TestWriterResidentWhileBusy: a session with frequent writer runs keeps
// its writer waiting instead of parking; the next keepalive tick without
// that traffic lets it park.
func TestWriterResidentWhileBusy(t *testing.T) {
	f := newFakeSocket()
	pinged := make(chan struct{}, 16)
	f.pingFn = func(context.Context) error {
		select {
		case pinged <- struct{}{}:
		default:
		}
		return nil
	}
	// Long enough that the sends below fall between two ticks.
	s := newSession("s", Options{EncodeGap: testGap, PingInterval: time.Second}, f.socket())
	done := startWriter(s)
	for i := range residentRuns + 2 {
		waitFor(t, "the writer to park", func() bool { st := s.writer.Load(); return st == writerParked || s.busy.Load() })
		s.Send(ctl(fmt.Sprint(i)))
		waitFor(t, "frame written", func() bool { return len(f.frames()) == i+1 })
	}
	if !s.busy.Load() {
		t.Fatal("writer not resident after runs in quick succession")
	}
	<-pinged
	waitFor(t, "the writer to park after a tick", parked(s))
	s.Close(websocket.StatusNormalClosure, "")
	<-done
}
