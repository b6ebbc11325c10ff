package session

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestKeepaliveResultsNeitherLostNorDoubled: pings every millisecond, their
// pongs arriving while the writer drains, parks or starts again (a
// producer sends meanwhile): one ping at a time, each result taken once (a
// lost success would stop the pings for good, a result read twice would
// let two pings overlap), and the first failed ping ends the session with
// its error, no ping after it.
func TestKeepaliveResultsNeitherLostNorDoubled(t *testing.T) {
	const okPings = 200
	fs := newFakeSocket()
	boom := errors.New("no pong")
	var calls, inFlight atomic.Int32
	var overlap atomic.Bool
	fs.pingFn = func(context.Context) error {
		if inFlight.Add(1) > 1 {
			overlap.Store(true)
		}
		defer inFlight.Add(-1)
		n := calls.Add(1)
		if n%4 == 0 {
			// A pong slower than the ping interval: the writer is kicked
			// for pings due while this one is in flight.
			<-time.After(3 * time.Millisecond)
		}
		if n > okPings {
			return boom
		}
		return nil
	}
	s := newSession("k", Options{EncodeGap: testGap, PingInterval: time.Millisecond, PongTimeout: time.Second}, fs.socket())
	done := startWriter(s)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for off := int64(0); off < 100000; off++ {
			select {
			case <-stop:
				return
			default:
			}
			s.Send(msg(1, off, 0, DropOld))
			if off%16 == 0 {
				// Let the writer drain, so that it parks now and then.
				for i := 0; i < 1000 && s.q.Len() > 0; i++ {
					runtime.Gosched()
				}
			}
		}
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		close(stop)
		wg.Wait()
		t.Fatalf("the session did not end: %d pings, the last result never taken", calls.Load())
	}
	close(stop)
	wg.Wait()
	if !errors.Is(s.causeNow(), boom) || !errors.Is(s.causeNow(), ErrKeepalive) {
		t.Fatalf("cause %v, want the failed ping's", s.causeNow())
	}
	if n := calls.Load(); n != okPings+1 {
		t.Fatalf("%d pings, want %d: none after the failed one", n, okPings+1)
	}
	if overlap.Load() {
		t.Fatal("two pings were in flight at once")
	}
}
