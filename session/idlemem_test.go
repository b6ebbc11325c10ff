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
	"time"
)

// collected returns the memory statistics after two collections, which
// drop the pooled buffers nobody holds and shrink the stacks that can be
// shrunk.
func collected() runtime.MemStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m
}

// liveHeap returns the bytes of live heap objects.
func liveHeap() int64 { return int64(collected().HeapAlloc) }

// stackInUse returns the bytes of goroutine stacks in use.
func stackInUse() int64 { return int64(collected().StackInuse) }

// TestIdleAfterControlFrameHoldsNoBuffer: a session that has handled a
// control frame (here the client's ping; the gateway's keepalive pongs
// take the same path) waits for its next frame without holding a read
// buffer, as it does before its first frame. Before, the wait after a
// control frame happened inside the library's frame reader, holding a
// pooled 4 KiB buffer: every idle connection held one once its first
// keepalive had been answered.
func TestIdleAfterControlFrameHoldsNoBuffer(t *testing.T) {
	const n = 64
	clients := make([]*served, n)
	for i := range clients {
		clients[i] = serve(t, Options{}, echo{}, nil)
		clients[i].client.CloseRead(context.Background()) // answers control frames
	}
	before := liveHeap()
	for _, sv := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := sv.client.Ping(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	// A held read buffer is 4 KiB a session; without one the increase is
	// about 0.4 KiB (the client's own ping bookkeeping), and up to about
	// 2.5 KiB under the race detector.
	const bound = 3584
	per := (liveHeap() - before) / n
	t.Logf("each session holds %d more bytes after a ping", per)
	if per >= bound {
		t.Fatalf("each idle session holds %d more bytes after a ping; want no read buffer (< %d)", per, bound)
	}
}

// TestIdleSessionSmallStack: an idle session, after it has handled a
// frame and a keepalive pong, waits on one goroutine with the runtime's
// smallest stack (2 KiB), holding no buffer. Before, the reader waited
// under the frames of everything it had run (4 KiB and more), and after a
// pong inside the library's frame reader, where the pong was read. The
// clients are raw connections, with no goroutines of their own.
func TestIdleSessionSmallStack(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's larger stack guard grows every stack past 2 KiB")
	}
	const n = 64
	var handled atomic.Int64
	sessions := make(chan *Session, n)
	var ended sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := Accept(w, r, nil, "s", Options{EncodeGap: testGap})
		if err != nil {
			t.Error(err)
			return
		}
		ended.Add(1)
		if err := s.Start(context.Background(), handlerFunc(func(*Session, []byte) { handled.Add(1) }), func(error) { ended.Done() }); err != nil {
			t.Error(err)
		}
		sessions <- s
	}))
	defer srv.Close()
	before := stackInUse()
	addr := strings.TrimPrefix(srv.URL, "http://")
	conns := make([]net.Conn, n)
	list := make([]*Session, n)
	for i := range conns {
		conns[i] = rawDial(t, addr, "/")
		list[i] = <-sessions
		if _, err := conns[i].Write(maskedText("hi")); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every frame handled", func() bool { return handled.Load() == n })
	pong := maskedText("sy")
	pong[0] = 0x80 | opPong
	for _, c := range conns {
		if _, err := c.Write(pong); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "every pong taken", func() bool {
		for _, s := range list {
			if len(s.idle.pongs) == 0 {
				return false
			}
		}
		return true
	})
	per := (stackInUse() - before) / n
	t.Logf("each idle session holds %d bytes of stacks", per)
	if per > 3<<10 {
		t.Fatalf("each idle session holds %d bytes of stacks; want one 2 KiB stack", per)
	}
	for _, c := range conns {
		c.Close()
	}
	ended.Wait()
}

// TestHeadFrame: what the bytes at hand start with, wherever they are
// split between the library's buffer and the session's.
func TestHeadFrame(t *testing.T) {
	pong := maskedFrame(0x80|opPong, "sy")
	text := maskedText("x")
	long := []byte{0x81, 0x80 | 126, 0x01, 0x00, 1, 2, 3, 4} // 256 bytes follow
	for _, tc := range []struct {
		name string
		in   []byte
		st   int
		size int
	}{
		{"nothing", nil, headNone, 0},
		{"one byte", pong[:1], headPartial, 0},
		{"header without its mask", pong[:4], headPartial, 0},
		{"pong", pong, headControl, len(pong)},
		{"pong then text", append(append([]byte{}, pong...), text...), headControl, len(pong)},
		{"pong without its last byte", pong[:len(pong)-1], headPartial, 0},
		{"text", text, headData, 0},
		{"text header only", text[:6], headData, 0},
		{"extended length, part of it", long[:3], headPartial, 0},
		{"extended length", long, headData, 0},
		{"unmasked control frame", []byte{0x8A, 0}, headControl, 0},
	} {
		for split := 0; split <= len(tc.in); split++ {
			in := headBytes{a: tc.in[:split], b: tc.in[split:]}
			if st, size := in.frame(); st != tc.st || size != tc.size {
				t.Errorf("%s, split at %d: state %d, size %d; want %d, %d", tc.name, split, st, size, tc.st, tc.size)
			}
		}
	}
}
