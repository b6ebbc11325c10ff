package router_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
)

// serveWith serves g's router on a second, real server built by NewServer
// with opts (with small send buffers) and returns its address; the test's
// end stops it.
func serveWith(t *testing.T, g *gateway, opts router.ServerOptions) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := g.rt.NewServer(opts)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(g.rt.Listener(smallSendListener{ln}))
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// smallSendListener gives accepted connections a 16 KiB send buffer, so
// that the kernel cannot absorb a whole listing page for a client that does
// not read (on a real network the path fills up the same way).
type smallSendListener struct{ net.Listener }

func (l smallSendListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(16 << 10)
	}
	return c, err
}

// dialSmallWindow connects with a 4 KiB receive buffer, so that a reply the
// client never reads backs up into the server at once.
func dialSmallWindow(t *testing.T, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestStalledListingReaders: clients that ask for the largest listing page
// and never read do not hold it: the write timeout ends each response, the
// connection is closed and the timeout counted, and other clients are
// served meanwhile.
func TestStalledListingReaders(t *testing.T) {
	g := newGateway(t)
	ctx := context.Background()
	for i := range 4000 {
		if _, err := g.eng.CreateTopic(ctx, engine.TopicConfig{Name: fmt.Sprintf("stall.%040d", i), Partitions: 4}); err != nil {
			t.Fatal(err)
		}
	}
	const timeout = 300 * time.Millisecond
	addr := serveWith(t, g, router.ServerOptions{WriteTimeout: timeout})
	const stalled = 20
	conns := make([]net.Conn, stalled)
	for i := range conns {
		conns[i] = dialSmallWindow(t, addr)
		if _, err := io.WriteString(conns[i], "GET /v1/topics?limit=1000 HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
	}
	// Each response's write times out 300ms after its request was read,
	// but building 20 pages of 1000 topics at once takes the handlers
	// seconds on a loaded machine (the count once reached 20 just past a
	// 10s bound), and reading a stalled connection to see its close would
	// let its write through: the bound on the count is only there to end
	// a server whose writes never time out.
	series := map[string]string{"phase": "write"}
	deadline := time.Now().Add(6 * waitTimeout)
	for n := 0.0; n < stalled; n = metricValue(t, g.reg, "switchyard_http_timeouts_total", series) {
		if time.Now().After(deadline) {
			t.Fatalf("write timeouts: %v of %d stalled readers", n, stalled)
		}
		time.Sleep(10 * time.Millisecond) // polling a counter: no event to wait on
	}
	// Each stalled connection was closed by the server: reading now drains
	// what the kernel held and ends, rather than blocking.
	for i, c := range conns {
		_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
		if _, err := io.Copy(io.Discard, c); err != nil {
			t.Fatalf("stalled reader %d: %v, want the server's close", i, err)
		}
	}
	resp, err := http.Get("http://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}
}
