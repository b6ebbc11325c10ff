package session

// A WebSocket for a transport of its own (MQTT over WebSocket): Upgrade
// accepts the connection through the lazy hijacker of Accept
// (lazyconn.go), so that an idle connection holds neither net/http's
// bufio pair nor a read buffer, and hands back the library's connection
// with what the transport needs to keep it that way: a cork around each
// batch, so that a frame still goes out in one (vectored) write, and a
// wait for input that holds no buffer and runs on a shallow stack.
//
// InputWait offers the same wait for a plain net.Conn (MQTT over TCP).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
)

// Upgraded is a WebSocket accepted by Upgrade.
//
// Concurrency: Cork and Uncork are called by the one goroutine that
// writes data frames, around its write; Wait and Buffered by the one
// that reads; NetConn's Close by any. The library's own reads and writes stay safe
// for concurrent use as they are.
type Upgraded struct {
	// Conn is the accepted connection.
	Conn *websocket.Conn
	lw   *lazyWriter   // nil when the connection keeps net/http's buffers
	lr   *lazyReader   // likewise
	br   *bufio.Reader // the library's reader over lr
	conn net.Conn      // the hijacked connection (lazyHijacker.conn)
	// mu orders Buffered's look at the buffers with the library's reads
	// in its close handshake (NetConn's Close).
	mu sync.Mutex
	// The reader's (NetConn's Read, Reading, Wait, AtPacketStart): r, the
	// message being read, not read to its end (its rest may be held by
	// the library's inflater, in no buffer Buffered sees), nil between
	// messages; start, the next Read starts a packet of the caller's
	// protocol.
	r     io.Reader
	start bool
	// direct: no compression was negotiated, so WriteBinary writes its
	// frames itself.
	direct bool
	// ownPings: noMessage answers pings itself, through lw; false when
	// the AcceptOptions want to see them (OnPingReceived), or off the
	// lazy path.
	ownPings bool
}

// ErrNoMessage is what NetConn's Read reports, once, after AtPacketStart
// when no message is open and no data frame of a next one is at hand (the
// pings before it answered):
// the caller's reader has nothing to read and may park or wait for the
// socket (Buffered reports false) instead of waiting in the library.
var ErrNoMessage = errors.New("session: no message at hand")

// Upgrade upgrades the request with websocket.Accept and opts, through
// the lazy buffers of Accept where the connection allows (a TCP or Unix
// socket, not TLS). On error the response has been written.
func Upgrade(w http.ResponseWriter, r *http.Request, opts *websocket.AcceptOptions) (*Upgraded, error) {
	hj := &lazyHijacker{ResponseWriter: w}
	c, err := websocket.Accept(hj, r, opts)
	if err != nil {
		return nil, err
	}
	direct := hj.lw != nil && !strings.Contains(w.Header().Get("Sec-WebSocket-Extensions"), "permessage-deflate")
	u := &Upgraded{Conn: c, lw: hj.lw, lr: hj.lr, br: hj.br, conn: hj.conn, direct: direct}
	u.ownPings = hj.lw != nil && (opts == nil || opts.OnPingReceived == nil)
	return u, nil
}

// maxStartLooks bounds the looks of noMessage at the head of the input:
// each consumes up to maxHeadReads reads of control frames.
const maxStartLooks = 4

// noMessage reports, for a Read that starts a packet between messages,
// whether no data frame is at hand: it answers the client's pings at the
// head of the input itself (as a native session's idle reader does,
// lazyconn.go's idleWait), so that a ping that woke a parked reader sends
// it back to park rather than into the library's Reader to wait for the
// next message. A frame started and not complete, a close frame or a
// control frame left to the library is the library's to read (false).
func (u *Upgraded) noMessage() bool {
	if u.lr == nil {
		return false
	}
	w := idleWait{lr: u.lr, br: u.br, mu: &u.mu}
	if u.ownPings {
		w.lw = u.lw
	}
	for range maxStartLooks {
		st, _, err := w.next(true)
		switch {
		case err != nil:
			return false // the library's read meets the same end
		case st == headNone:
			return true
		case st != headMore:
			return false
		}
	}
	return false
}

// WriteBinary writes p as one binary message. On the lazy path without
// compression the frame (its header and p, not copied) goes out in one
// vectored write, past the library, as a native session's text frames do
// (lazyWriter.writeText); otherwise through the library, corked so that
// it is still one write. Like the library's writes, it is safe for
// concurrent use with them; after the library has sent its close frame it
// writes nothing and reports net.ErrClosed.
func (u *Upgraded) WriteBinary(p []byte) error {
	if u.direct {
		return u.lw.writeBinary(p)
	}
	u.Cork(p)
	err := u.Conn.Write(context.Background(), websocket.MessageBinary, p)
	if uerr := u.Uncork(); err == nil {
		err = uerr
	}
	return err
}

// writeBinary writes p as one final, unmasked, uncompressed binary frame
// in one vectored write (see writeText).
func (l *lazyWriter) writeBinary(p []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closeSent {
		return net.ErrClosed
	}
	hdr := appendTextHeader(l.hdr[:0], len(p))
	hdr[0] = 0x80 | opBinary
	v := binaryVecs.Get().(*binaryVec)
	v.parts[0], v.parts[1] = hdr, p
	v.bufs = v.parts[:]
	_, err := v.bufs.WriteTo(l.nc)
	*v = binaryVec{}
	binaryVecs.Put(v)
	return err
}

// binaryVec is the vector of one writeBinary: the frame's header and
// payload, and the net.Buffers over them (which WriteTo takes by pointer,
// so it is not made on the stack).
type binaryVec struct {
	parts [2][]byte
	bufs  net.Buffers
}

// binaryVecs are the vectors of writeBinary's writes, borrowed for the
// write: a connection that wrote a binary frame keeps none (l.vec, which
// uncork keeps, would be 48 bytes of every MQTT session that had a
// delivery).
var binaryVecs = sync.Pool{New: func() any { return new(binaryVec) }}

// opBinary is a binary frame's opcode (RFC 6455, 5.2).
const opBinary = 0x2

// Lazy reports whether the connection took the lazy path: without it
// Cork, Uncork and Wait do nothing.
func (u *Upgraded) Lazy() bool { return u.lr != nil }

// Cork makes the connection's writes wait for Uncork, which sends them in
// one vectored write. p is the slice the caller is about to write as a
// message: pieces of it are referenced, not copied, so it must not change
// before Uncork returns.
func (u *Upgraded) Cork(p []byte) {
	if u.lw != nil {
		u.lw.cork(p)
	}
}

// Uncork writes what was written since Cork and ends the cork.
func (u *Upgraded) Uncork() error {
	if u.lw == nil {
		return nil
	}
	return u.lw.uncork()
}

// Buffered reports whether bytes read from the socket wait in the
// connection's buffers (the caller's own reader over Conn aside).
func (u *Upgraded) Buffered() bool {
	if u.lr == nil {
		return false
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.br.Buffered() > 0 || len(u.lr.pending) > 0
}

// Reading reports whether NetConn's reader has a message open that it has
// not read to its end: a compressed message's rest may be held by the
// library's inflater only, in no buffer Buffered sees, so the reader reads
// on rather than park or wait for the socket. It is the reader's to call.
func (u *Upgraded) Reading() bool { return u.r != nil }

// AtPacketStart tells NetConn's reader that its next Read starts a packet
// of the caller's protocol (a message may carry several, or part of one):
// should the message being read end there with no next one at hand, that
// Read reports ErrNoMessage rather than wait in the library. For the
// reader, before the read.
func (u *Upgraded) AtPacketStart() { u.start = true }

// Wait waits until the socket has input, has ended or has failed, holding
// no buffer: the caller then reads. It returns at once when bytes are
// buffered already, a message is being read (Reading), or the connection
// did not take the lazy path. The
// caller's own buffered bytes are its to look at first.
func (u *Upgraded) Wait() {
	if u.lr == nil || u.r != nil || u.Buffered() {
		return
	}
	waitReadable(u.lr.rc)
}

// NetConn returns the connection as a byte stream over its binary
// messages, as websocket.NetConn does, without what that holds for its
// deadlines (two contexts, two timers): its deadlines are the socket's,
// so a read or write past one fails, and the library then closes the
// connection. Its Close (the close handshake, status 1000) is ordered
// with Buffered. Read and Write are each used by one goroutine at a time.
// It is u itself, as another type: an idle connection keeps nothing more
// for it.
func (u *Upgraded) NetConn() net.Conn { return (*upgradedConn)(u) }

// upgradedConn is the net.Conn of NetConn: the Upgraded with the methods
// of a net.Conn.
type upgradedConn Upgraded

func (c *upgradedConn) Read(p []byte) (int, error) {
	u := (*Upgraded)(c)
	start := u.start
	u.start = false
	for {
		if u.r == nil {
			if start && u.noMessage() {
				return 0, ErrNoMessage
			}
			typ, r, err := u.Conn.Reader(context.Background())
			if err != nil {
				switch websocket.CloseStatus(err) {
				case websocket.StatusNormalClosure, websocket.StatusGoingAway:
					return 0, io.EOF
				}
				return 0, err
			}
			if typ != websocket.MessageBinary {
				err := fmt.Errorf("unexpected frame type read (expected %v): %v", websocket.MessageBinary, typ)
				u.mu.Lock()
				_ = u.Conn.Close(websocket.StatusUnsupportedData, err.Error())
				u.mu.Unlock()
				return 0, err
			}
			u.r = r
		}
		n, err := u.r.Read(p)
		if err == io.EOF {
			u.r, err = nil, nil
		}
		if n > 0 || err != nil {
			return n, err
		}
	}
}

func (c *upgradedConn) Write(p []byte) (int, error) {
	if err := c.Conn.Write(context.Background(), websocket.MessageBinary, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (c *upgradedConn) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.Conn.Close(websocket.StatusNormalClosure, "")
}

func (c *upgradedConn) LocalAddr() net.Addr                { return c.conn.LocalAddr() }
func (c *upgradedConn) RemoteAddr() net.Addr               { return c.conn.RemoteAddr() }
func (c *upgradedConn) SetDeadline(t time.Time) error      { return c.conn.SetDeadline(t) }
func (c *upgradedConn) SetReadDeadline(t time.Time) error  { return c.conn.SetReadDeadline(t) }
func (c *upgradedConn) SetWriteDeadline(t time.Time) error { return c.conn.SetWriteDeadline(t) }

// InputWait returns a function that waits until nc has input, has ended
// or has failed, without reading it and holding no buffer, so that a
// reader can wait for its next input on a shallow stack and read it then;
// nil when nc offers no syscall.RawConn (a TLS connection; see
// lazyconn.go for Unwrap).
func InputWait(nc net.Conn) func() {
	_, rc := rawConn(nc)
	if rc == nil {
		return nil
	}
	return func() { waitReadable(rc) }
}

// waitReadable waits until the socket of rc is readable (or has failed;
// an error is the read's that follows to report).
func waitReadable(rc syscall.RawConn) {
	_ = rc.Read(func(fd uintptr) bool { return !peekWouldBlock(fd) })
}
