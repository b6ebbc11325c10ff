package session

import (
	"net"
	"sync/atomic"
	"syscall"
)

// parkState is a socket whose idle reader may park in the idle poller
// (idlepoll_linux.go) and the function that runs the reader again.
type parkState struct {
	// parked is set while the socket waits in the idle poller, with no
	// reader goroutine; whoever clears it (the poller, or the
	// connection's close: unpark) runs onReady on a fresh goroutine.
	parked  atomic.Bool
	added   bool  // the socket is in the epoll set (armed or not); the reader's
	slot    int32 // the poller's slot while parked; the reader's
	rc      syscall.RawConn
	onReady func()
}

// IdleSocket lets the reader of a connection other than a session's own
// (an MQTT session's) give up its goroutine while the connection is idle:
// Park registers the socket with the idle poller, the reader's goroutine
// returns, and the poller runs resume on a fresh goroutine once the socket
// is readable, has hung up or has failed. Closing the connection removes
// the socket from the poller without an event: the closer then calls
// Unpark (a connection of Upgraded.IdleSocket does that itself), which
// runs resume if the reader is parked, for its read to meet the end.
// Park and resume are the reader's; Unpark is safe for concurrent use.
type IdleSocket parkState

// NewIdleSocket returns nc's IdleSocket, which runs resume when the
// parked reader is to read again; nil when nc offers no syscall.RawConn
// (a TLS connection; see lazyconn.go for Unwrap).
func NewIdleSocket(nc net.Conn, resume func()) *IdleSocket {
	return NewIdleSocketIn(nil, nc, resume)
}

// NewIdleSocketIn is NewIdleSocket for the reader of a one-way session's
// transport (NewOneWay, Transport.Read): the IdleSocket is the session's
// own park state, which a one-way session does not use otherwise, rather
// than one more allocation that every idle session would keep; s's
// Parked reports it. With s nil it is NewIdleSocket. It panics if s is
// not one-way.
func NewIdleSocketIn(s *Session, nc net.Conn, resume func()) *IdleSocket {
	_, rc := rawConn(nc)
	if rc == nil {
		return nil
	}
	return newIdleSocket(s, rc, resume)
}

// newIdleSocket returns the IdleSocket of rc: s's park state (see
// NewIdleSocketIn), or a new one when s is nil.
func newIdleSocket(s *Session, rc syscall.RawConn, resume func()) *IdleSocket {
	if s == nil {
		return &IdleSocket{rc: rc, onReady: resume}
	}
	if !s.oneWay {
		panic("session: the IdleSocket of a session that parks its own reader")
	}
	s.parkState.rc, s.parkState.onReady = rc, resume
	return (*IdleSocket)(&s.parkState)
}

// IdleSocket returns the connection's IdleSocket (see NewIdleSocket),
// whose reader reads through NetConn; nil when the connection did not take
// the lazy path. The reader parks only with nothing buffered (Buffered)
// and no message open (Reading).
// Closing the connection unparks it.
func (u *Upgraded) IdleSocket(resume func()) *IdleSocket { return u.IdleSocketIn(nil, resume) }

// IdleSocketIn is IdleSocket in a one-way session's own park state, as
// NewIdleSocketIn is NewIdleSocket.
func (u *Upgraded) IdleSocketIn(s *Session, resume func()) *IdleSocket {
	if u.lr == nil {
		return nil
	}
	p := newIdleSocket(s, u.lr.rc, resume)
	if lc, ok := u.conn.(*lazyConn); ok {
		lc.ps.Store((*parkState)(p))
	}
	return p
}

// Park registers the socket with the idle poller and reports whether it
// did: the reader must then return at once, holding nothing of the
// connection's input, and resume reads on. It reports false where there is
// no idle poller, once it has fallen back, or when the socket is closed:
// the reader then waits for input itself.
func (p *IdleSocket) Park() bool { return (*parkState)(p).arm() }

// Wait waits until the socket is readable, has ended or has failed,
// without reading it and holding no buffer (as InputWait's function
// does), for a reader that does not park.
func (p *IdleSocket) Wait() { waitReadable(p.rc) }

// Unpark runs resume if the reader is parked; for the closer of the
// connection, after the close.
func (p *IdleSocket) Unpark() { (*parkState)(p).unpark() }

// ReadParked tells a one-way session (NewOneWay) that its transport's
// reader (Transport.Read) is about to park (IdleSocket.Park): once Read
// returns, the session's goroutine exits, and the reader, whichever
// goroutine it then runs on, calls ReadDone where Read would have
// returned. It is called before the first Park, by the reader.
func (s *Session) ReadParked() { s.readParked.Store(true) }

// ReadDone ends a one-way session's reader that called ReadParked, as
// the return of Transport.Read does otherwise: it waits for the transport
// to be closed and ends the session (the end runs on its goroutine).
func (s *Session) ReadDone() {
	<-s.endChan(stepWriterEnded) // the writer closes the transport once the session ends
	s.runEnded(s.runEnd(nil, s.runStop))
}

// Parked reports whether the reader is parked now.
func (p *IdleSocket) Parked() bool { return p.parked.Load() }
