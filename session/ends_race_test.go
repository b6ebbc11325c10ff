package session

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestKickRacesWriterPark: kicks (most carrying no control work,
// some a keepalive tick that makes the writer park when idle again) race
// the writer parking and waking while items are sent one at a time; every
// item is written (no wake is lost between the kick's flag, the Ready
// signal and the park).
func TestKickRacesWriterPark(t *testing.T) {
	const items = 3000
	written := make(chan struct{}, items)
	fs := newFakeSocket()
	fs.pingFn = func(context.Context) error { return nil }
	fs.writeFn = func(_ context.Context, p []byte) error {
		for range 1 + countNL(p) {
			written <- struct{}{}
		}
		return nil
	}
	s := newSession("k", Options{EncodeGap: testGap, PingInterval: time.Hour}, fs.socket())
	done := startWriter(s)
	stop := make(chan struct{})
	var kicks sync.WaitGroup
	for range 2 {
		kicks.Add(1)
		go func() {
			defer kicks.Done()
			for i := 0; i < 1_000_000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if i%64 == 0 {
					// A keepalive tick: the writer is not busy
					// again, and parks when idle.
					s.pingDue.Store(true)
				}
				s.kick()
			}
		}()
	}
	for i := range items {
		if !s.Send(ctl(fmt.Sprint(i))) {
			t.Fatalf("item %d refused", i)
		}
		select {
		case <-written:
		case <-time.After(10 * time.Second):
			close(stop)
			kicks.Wait()
			t.Fatalf("item %d not written within 10 s (writer state %d, ctlDue %v, ready %d)",
				i, s.writer.Load(), s.ctlDue.Load(), len(s.q.ready))
		}
	}
	close(stop)
	kicks.Wait()
	s.Close(websocket.StatusNormalClosure, "")
	<-done
}

func countNL(p []byte) int {
	n := 0
	for _, b := range p {
		if b == '\n' {
			n++
		}
	}
	return n
}

// TestEndChannelsRaceTheirStep: end channels asked for by many
// goroutines while the step is taken are all closed at it, one way or the
// other (made before, made after, fast path).
func TestEndChannelsRaceTheirStep(t *testing.T) {
	for round := range 300 {
		fs := newFakeSocket()
		s := newSession("e", Options{EncodeGap: testGap, PingInterval: time.Hour}, fs.socket())
		done := startWriter(s)
		var ready, wg sync.WaitGroup
		var stuck atomic.Int32
		start := make(chan struct{})
		for g := range 8 {
			ready.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ready.Done()
				<-start
				step := []endStep{stepClosing, stepWriterEnded}[g%2]
				c := s.endChan(step)
				if g%4 < 2 {
					c = s.Closing()
				}
				select {
				case <-c:
				case <-time.After(10 * time.Second):
					stuck.Add(1)
				}
			}()
		}
		ready.Wait()
		close(start)
		s.Close(websocket.StatusCode(4000+round%2), "r")
		s.Close(websocket.StatusNormalClosure, "second")
		wg.Wait()
		<-done
		if n := stuck.Load(); n > 0 {
			t.Fatalf("round %d: %d waiters never saw their step", round, n)
		}
		fs.mu.Lock()
		closes := append([]websocket.StatusCode(nil), fs.closes...)
		fs.mu.Unlock()
		if len(closes) != 1 || closes[0] != websocket.StatusCode(4000+round%2) {
			t.Fatalf("round %d: closes %v, want the first Close's code only", round, closes)
		}
	}
}
