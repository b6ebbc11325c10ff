package router

import (
	"crypto/tls"
	"errors"
	"log"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

// HTTP server timeouts: the defaults of ServerOptions and of the gateway's
// flags.
const (
	// DefaultReadHeaderTimeout bounds the request line and headers (and so
	// a WebSocket handshake): a client that has not sent them by then is
	// disconnected.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds a whole request, headers and body: 30 s
	// lets a slow link send the largest body (2 MiB by default) while a
	// connection trickling bytes is closed.
	DefaultReadTimeout = 30 * time.Second
	// DefaultWriteTimeout bounds a response from the end of its request's
	// headers: long enough for the largest listing page on a slow link,
	// short enough that a reader that stopped reading lets go of it. A
	// long poll gets its wait_ms on top.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultIdleTimeout bounds the wait of a keep-alive connection for
	// its next request.
	DefaultIdleTimeout = 2 * time.Minute
)

// ServerOptions configure the http.Server that NewServer builds. The zero
// value of each timeout is its default above; a negative one disables it.
// WebSocket sessions are not subject to the read and write timeouts once
// upgraded: net/http clears a connection's deadlines when it is hijacked,
// and sessions keep their own keepalive.
type ServerOptions struct {
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	// ErrorLog receives net/http's own errors; default: the standard
	// logger.
	ErrorLog *log.Logger
}

func timeoutOr(d, def time.Duration) time.Duration {
	switch {
	case d < 0:
		return 0
	case d == 0:
		return def
	}
	return d
}

// NewServer returns an http.Server that serves rt with the options'
// timeouts. Serve it on a listener wrapped by Listener so that timeouts are
// counted in switchyard_http_timeouts_total. The Router keeps the write
// timeout to extend it for long polls.
func (rt *Router) NewServer(o ServerOptions) *http.Server {
	srv := &http.Server{
		Handler:           rt,
		ReadHeaderTimeout: timeoutOr(o.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		ReadTimeout:       timeoutOr(o.ReadTimeout, DefaultReadTimeout),
		WriteTimeout:      timeoutOr(o.WriteTimeout, DefaultWriteTimeout),
		IdleTimeout:       timeoutOr(o.IdleTimeout, DefaultIdleTimeout),
		ErrorLog:          o.ErrorLog,
		ConnState:         trackConnState,
	}
	rt.writeTimeout.Store(int64(srv.WriteTimeout))
	return srv
}

// Listener wraps ln so that the connections it accepts count their read
// and write timeouts (switchyard_http_timeouts_total, by phase). Use it
// with a server from NewServer; WebSocket sessions stop being counted once
// upgraded.
func (rt *Router) Listener(ln net.Listener) net.Listener {
	return &countingListener{Listener: ln, m: rt.httpm}
}

type countingListener struct {
	net.Listener
	m *httpMetrics
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, m: l.m}, nil
}

// countingConn tells a server timeout from the expected deadline errors of
// net/http (a past deadline set to abort a background read) and counts it
// once per phase. The state comes from the server's ConnState hook.
type countingConn struct {
	net.Conn
	m       *httpMetrics
	state   atomic.Int32 // http.ConnState
	aborted atomic.Bool  // a read deadline in the past was set
	counted atomic.Uint32
}

// Unwrap returns the wrapped connection: a hijacked WebSocket session reads
// and writes it directly (see session.Accept); nothing is counted after
// the upgrade anyway.
func (c *countingConn) Unwrap() net.Conn { return c.Conn }

// trackConnState records the server's state of a connection on its
// countingConn, under a TLS connection when the listener serves TLS
// (tls.NewListener over Listener).
func trackConnState(c net.Conn, s http.ConnState) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if cc, ok := c.(*countingConn); ok {
		cc.state.Store(int32(s))
	}
}

func (c *countingConn) SetReadDeadline(t time.Time) error {
	c.aborted.Store(!t.IsZero() && time.Until(t) < 0)
	return c.Conn.SetReadDeadline(t)
}

func (c *countingConn) SetDeadline(t time.Time) error {
	c.aborted.Store(!t.IsZero() && time.Until(t) < 0)
	return c.Conn.SetDeadline(t)
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil && isTimeout(err) && !c.aborted.Load() {
		switch http.ConnState(c.state.Load()) {
		case http.StateNew:
			c.count(1, "read_header")
		case http.StateActive:
			c.count(2, "read")
		}
		// StateIdle: the idle timeout, a normal end of a keep-alive
		// connection; StateHijacked: the WebSocket session's own business.
	}
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil && isTimeout(err) && http.ConnState(c.state.Load()) == http.StateActive {
		c.count(4, "write")
	}
	return n, err
}

func (c *countingConn) count(bit uint32, phase string) {
	for {
		old := c.counted.Load()
		if old&bit != 0 {
			return
		}
		if c.counted.CompareAndSwap(old, old|bit) {
			c.m.timeouts.WithLabelValues(phase).Inc()
			return
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// extendDeadlines gives a request that waits on purpose (a long poll) wait
// more time to read and write than the server's timeouts allow, through
// http.ResponseController; a server without a write timeout needs nothing.
func (rt *Router) extendDeadlines(w http.ResponseWriter, wait time.Duration) {
	wt := time.Duration(rt.writeTimeout.Load())
	if wt <= 0 {
		wt = DefaultWriteTimeout
	}
	rc := http.NewResponseController(w)
	deadline := time.Now().Add(wait + wt)
	// The read deadline covers net/http's background read, which would
	// otherwise cancel the request's context when it expires.
	_ = rc.SetReadDeadline(deadline)
	_ = rc.SetWriteDeadline(deadline)
}
