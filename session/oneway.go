package session

import (
	"context"
	"sync"

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
}

// NewOneWay returns a session that writes to t: the same bounded queue,
// drop policies, gap frames, batching and keepalive as a WebSocket session,
// without inbound frames. Its Run returns once the session has been closed
// (by Close, an overflow, a failed write or ctx) and t closed; it does not
// call its Handler, which may be nil. NewOneWay panics if opts.EncodeGap is
// nil.
func NewOneWay(id string, opts Options, t Transport) *Session {
	ended := make(chan struct{})
	var once sync.Once
	end := func() { once.Do(func() { close(ended) }) }
	sock := socket{
		write: t.Write,
		close: func(code websocket.StatusCode, reason string) error {
			defer end()
			return t.Close(code, reason)
		},
		closeNow: func() error {
			defer end()
			return t.CloseNow()
		},
		ping: func(ctx context.Context) error {
			if t.Keepalive == nil {
				return nil
			}
			return t.Keepalive(ctx)
		},
	}
	s := newSession(id, opts, sock)
	s.oneWay = ended
	return s
}
