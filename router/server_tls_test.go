package router_test

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/switchyard/switchyard/router"
)

// TestTimeoutPhaseOverTLS: behind a TLS listener (the gateway's
// --tls-cert wraps the Router's Listener), a request whose body stalls
// is counted as a timeout of the "read" phase, as without TLS: the
// server's connection state reaches the counting connection under the
// *tls.Conn.
func TestTimeoutPhaseOverTLS(t *testing.T) {
	g := newGateway(t)
	// httptest's certificate, for a TLS listener of our own.
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.StartTLS()
	cert := ts.TLS.Certificates[0]
	ts.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := g.rt.NewServer(router.ServerOptions{ReadTimeout: 300 * time.Millisecond})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(tls.NewListener(g.rt.Listener(ln), &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}}))
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})

	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Headers in full, then a body that never arrives.
	if _, err := io.WriteString(c, "POST /v1/publish HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"topic\":"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(waitTimeout))
	_, _ = io.Copy(io.Discard, c) // ends when the server gives up on the body
	waitUntil(t, "a read timeout is counted", func() bool {
		return metricValue(t, g.reg, "switchyard_http_timeouts_total", map[string]string{"phase": "read"})+
			metricValue(t, g.reg, "switchyard_http_timeouts_total", map[string]string{"phase": "read_header"}) > 0
	})
	if got := metricValue(t, g.reg, "switchyard_http_timeouts_total", map[string]string{"phase": "read_header"}); got != 0 {
		t.Errorf("timeouts counted as read_header: %v, want 0 (the headers had arrived)", got)
	}
	if got := metricValue(t, g.reg, "switchyard_http_timeouts_total", map[string]string{"phase": "read"}); got != 1 {
		t.Errorf("timeouts counted as read: %v, want 1", got)
	}
}
