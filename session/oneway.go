package session

import (
	"context"
	"sync/atomic"

	"github.com/coder/websocket"
)

// Transport is a one-way connection that a session writes to instead of a
// WebSocket, such as a Server-Sent Events response. The session calls Write
// and Close from its writer goroutine and Keepalive from its keepalive
// goroutine, possibly while a Write is under way: an implementation
// serializes them itself.
type Transport struct {
	// Write writes one batch: frames joined by '\n', as a WebSocket session
	// would put them in one text frame. Required.
	Write func(ctx context.Context, p []byte) error
	// Keepalive writes what keeps an idle connection open through proxies;
	// it is called every Options.PingInterval. Optional.
	Keepalive func(ctx context.Context) error
	// Close tells the peer why the session ends, as far as the transport
	// can, and ends the connection. Required.
	Close func(code websocket.StatusCode, reason string) error
	// CloseNow ends the connection at once. Required.
	CloseNow func() error
	// Read, when set, reads the peer's input (a transport whose peer
	// talks back, such as MQTT): Start calls it on the goroutine it
	// starts for the session, which otherwise only waits for the
	// transport's close, so that the session parks one goroutine, not
	// two. It returns once the connection has failed or the session is to
	// end, having asked for that end (Close); the session then ends once
	// the transport is closed. Optional.
	Read func()
}

// NewOneWay returns a session that writes to t: the same bounded queue,
// drop policies, gap frames, batching and keepalive as a WebSocket session,
// without inbound frames. Its Run returns once the session has been closed
// (by Close, an overflow, a failed write or ctx) and t closed; it does not
// call its Handler, which may be nil. NewOneWay panics if opts.EncodeGap is
// nil.
func NewOneWay(id string, opts Options, t Transport) *Session {
	o := &oneWay{t: t, ended: make(chan struct{})}
	sock := socket{write: t.Write, close: o.close, closeNow: o.closeNow, ping: o.ping}
	s := newSession(id, opts, sock)
	s.oneWay, s.oneWayRead = o.ended, t.Read
	return s
}

// oneWay is the socket of a NewOneWay session over its Transport; ended
// is closed once the transport is closed. One struct with method values
// rather than closures over the Transport: every idle session keeps it.
type oneWay struct {
	t      Transport
	ended  chan struct{}
	closed atomic.Bool
}

func (o *oneWay) end() {
	if o.closed.CompareAndSwap(false, true) {
		close(o.ended)
	}
}

func (o *oneWay) close(code websocket.StatusCode, reason string) error {
	defer o.end()
	return o.t.Close(code, reason)
}

func (o *oneWay) closeNow() error {
	defer o.end()
	return o.t.CloseNow()
}

func (o *oneWay) ping(ctx context.Context) error {
	if o.t.Keepalive == nil {
		return nil
	}
	return o.t.Keepalive(ctx)
}
