package session

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// idleFleet is n idle sessions accepted by Accept behind a loopback
// server, each with a raw client connection (no goroutines of its own)
// that has sent one frame, handled by the session.
type idleFleet struct {
	srv      *httptest.Server
	conns    []net.Conn
	sessions []*Session
	ended    sync.WaitGroup
	handled  atomic.Int64
	errs     chan error // each session's end, in the order they end
}

// newIdleFleet opens n idle sessions with opts; ctx is the one they run
// with. Cleanup closes the clients and waits for every session.
func newIdleFleet(tb testing.TB, ctx context.Context, n int, opts Options) *idleFleet {
	tb.Helper()
	if opts.EncodeGap == nil {
		opts.EncodeGap = testGap
	}
	f := &idleFleet{errs: make(chan error, n)}
	accepted := make(chan *Session, 1)
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := Accept(w, r, nil, "s", opts)
		if err != nil {
			tb.Error(err)
			return
		}
		f.ended.Add(1)
		h := handlerFunc(func(*Session, []byte) { f.handled.Add(1) })
		if err := s.Start(ctx, h, func(err error) { f.errs <- err; f.ended.Done() }); err != nil {
			tb.Error(err)
		}
		accepted <- s
	}))
	tb.Cleanup(func() {
		f.closeAll()
		f.ended.Wait()
		f.srv.Close()
	})
	addr := strings.TrimPrefix(f.srv.URL, "http://")
	for range n {
		c := rawDial(tb, addr, "/")
		f.conns = append(f.conns, c)
		f.sessions = append(f.sessions, <-accepted)
		if _, err := c.Write(maskedText("hi")); err != nil {
			tb.Fatal(err)
		}
	}
	waitForTB(tb, "every first frame handled", func() bool { return f.handled.Load() == int64(n) })
	return f
}

// closeAll closes every client connection.
func (f *idleFleet) closeAll() {
	for _, c := range f.conns {
		_ = c.Close()
	}
}

// goroutines returns the number of goroutines after a collection (which
// lets exited ones go).
func goroutines() int {
	runtime.GC()
	return runtime.NumGoroutine()
}

// waitForTB is waitFor for a benchmark too.
func waitForTB(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	if t, ok := tb.(*testing.T); ok {
		waitFor(t, what, cond)
		return
	}
	if !poll(cond) {
		tb.Fatalf("timed out waiting for %s", what)
	}
}

// BenchmarkIdleSessionMemory opens b.N idle sessions (each has handled
// one frame) and reports what each holds on the server: live heap (the
// raw client's net.Conn, about 0.3 KiB, included), goroutine stacks and
// goroutines, after two collections.
//
//	go test -run '^$' -bench BenchmarkIdleSessionMemory -benchtime=2000x ./session/
func BenchmarkIdleSessionMemory(b *testing.B) {
	g0, m0 := goroutines(), collected()
	newIdleFleet(b, context.Background(), b.N, Options{})
	g1, m1 := goroutines(), collected()
	n := float64(b.N)
	b.ReportMetric(float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc))/n, "heap-B/conn")
	b.ReportMetric(float64(int64(m1.StackInuse)-int64(m0.StackInuse))/n, "stack-B/conn")
	b.ReportMetric(float64(g1-g0)/n, "goroutines/conn")
}
