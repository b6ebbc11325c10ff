package session

import (
	"context"
	"runtime"
	"testing"
	"time"
)

// liveHeap returns the bytes of live heap objects: pooled buffers nobody
// holds are dropped by the two collections.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

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
