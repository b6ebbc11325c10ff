package session

import (
	"context"

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
//
// The session takes t's functions as they are and makes nothing beside
// itself: every idle session keeps what it is given. Its end waits for the
// writer, which closes t before it ends (writer.go), rather than on a
// channel of its own.
func NewOneWay(id string, opts Options, t Transport) *Session {
	ping := t.Keepalive
	if ping == nil {
		ping = noKeepalive
	}
	sock := socket{write: t.Write, close: t.Close, closeNow: t.CloseNow, ping: ping}
	s := newSession(id, opts, sock)
	s.oneWay, s.oneWayRead = true, t.Read
	return s
}

// noKeepalive is the keepalive of a Transport without one.
func noKeepalive(context.Context) error { return nil }

// TransportConn is a Transport as one value, for NewOneWayConn: its
// methods are the functions of a Transport with a reader and no
// keepalive, with their contracts. A session keeps the one interface
// rather than a function value for each, which every idle session of a
// transport made of method values would hold (16 bytes each).
type TransportConn interface {
	// Write is Transport.Write.
	Write(ctx context.Context, p []byte) error
	// Close is Transport.Close.
	Close(code websocket.StatusCode, reason string) error
	// CloseNow is Transport.CloseNow.
	CloseNow() error
	// Read is Transport.Read.
	Read()
}

// NewOneWayConn is NewOneWay over a TransportConn.
func NewOneWayConn(id string, opts Options, t TransportConn) *Session {
	s := newSession(id, opts, socket{conn: t})
	s.oneWay = true
	return s
}

// The socket's operations: those of its TransportConn when it has one,
// else its functions.

func (k *socket) doWrite(ctx context.Context, p []byte) error {
	if k.conn != nil {
		return k.conn.Write(ctx, p)
	}
	return k.write(ctx, p)
}

func (k *socket) doClose(code websocket.StatusCode, reason string) error {
	if k.conn != nil {
		return k.conn.Close(code, reason)
	}
	return k.close(code, reason)
}

func (k *socket) doCloseNow() error {
	if k.conn != nil {
		return k.conn.CloseNow()
	}
	return k.closeNow()
}

func (k *socket) doPing(ctx context.Context) error {
	if k.conn != nil {
		return nil // a TransportConn writes no keepalive
	}
	return k.ping(ctx)
}

// readOneWay runs a one-way session's transport reader, if it has one,
// and reports whether it did.
func (s *Session) readOneWay() bool {
	switch {
	case s.sock.conn != nil:
		s.sock.conn.Read()
	case s.oneWayRead != nil:
		s.oneWayRead()
	default:
		return false
	}
	return true
}
