package session

// Buffers only while bytes are in hand.
//
// github.com/coder/websocket keeps, for each accepted connection, the
// bufio.Reader and bufio.Writer that net/http hands over with the hijacked
// connection: 8 KiB per connection for as long as it is open, most of what
// an idle session costs. Accept gives the library a small bufio pair over a
// lazyReader and a lazyWriter instead, which borrow pooled buffers only
// while bytes are in hand:
//
//   - lazyReader waits for the socket to become readable without a buffer
//     (syscall.RawConn.Read calls back when there is something to read),
//     then reads into a buffer of bufPool and keeps it only until the
//     bytes have been read from it. A read of at least a buffer's size
//     goes straight into the caller's slice.
//   - lazyWriter writes through to the socket, except while corked: the
//     session corks it around each batch (Conn.Write), so the library's
//     pieces of that frame (the header with the start of the payload, as
//     the small bufio.Writer flushes it, then the rest of the payload) go
//     out in one vectored write when the batch is done, the rest of the
//     payload referenced, not copied. A piece that is not part of the
//     batch's own slice (a compressed payload, a control frame written
//     meanwhile) is copied, so nothing is referenced beyond its owner's
//     call. The library's control frames (pong, close, ping) fit the small
//     bufio.Writer and go out in one write each.
//
// Only connections that expose a syscall.RawConn (TCP and Unix sockets, not
// TLS) take this path; others keep net/http's buffers. A listener's wrapper
// that passes the bytes through unchanged may offer the connection it wraps
// with a method Unwrap() net.Conn: the session then reads and writes that
// one directly (a vectored write needs the *net.TCPConn itself).

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
)

// smallWriteBuf is the size of the bufio.Writer handed to the library: it
// holds a frame header with the start of its payload, and whole control
// frames (at most 2+125 bytes unmasked, server side).
const smallWriteBuf = 256

// smallReadBuf is the size of the bufio.Reader handed to the library (the
// minimum bufio allows); frame headers are read through it, payloads of
// 16 bytes or more straight into the reader's buffer.
const smallReadBuf = 16

// lazyHijacker wraps the ResponseWriter given to websocket.Accept so that
// the connection it hijacks comes with a lazy bufio pair.
type lazyHijacker struct {
	http.ResponseWriter
	lw *lazyWriter // set by Hijack when the lazy pair is used
	lr *lazyReader // likewise
	br *bufio.Reader
	// conn is the connection Hijack handed over (upgrade.go sets its
	// deadlines).
	conn net.Conn
}

// Unwrap lets http.ResponseController reach the wrapped writer.
func (h *lazyHijacker) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// Hijack hijacks the wrapped connection and replaces its bufio pair with a
// lazy one when the connection allows.
func (h *lazyHijacker) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	nc, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	h.conn = nc
	raw, rc := rawConn(nc)
	if rc == nil {
		return nc, brw, nil
	}
	if brw.Writer.Buffered() > 0 {
		if err := brw.Writer.Flush(); err != nil {
			return nil, nil, err
		}
	}
	lr := &lazyReader{rc: rc}
	if n := brw.Reader.Buffered(); n > 0 {
		// Bytes the client sent after its request (its first frames):
		// they are read before the socket.
		b, _ := brw.Reader.Peek(n)
		lr.pending = append([]byte(nil), b...)
	}
	h.lw = &lazyWriter{nc: raw}
	// The library resets the bufio.Reader onto the connection it gets
	// (after what the reader has buffered), so the connection itself reads
	// through lr.
	lc := &lazyConn{Conn: raw, lr: lr}
	h.conn = lc
	h.lr, h.br = lr, bufio.NewReaderSize(lc, smallReadBuf)
	return lc, bufio.NewReadWriter(h.br, bufio.NewWriterSize(h.lw, smallWriteBuf)), nil
}

// rawConn returns the connection under nc's wrappers (Unwrap) and its
// syscall.RawConn, or a nil RawConn when it offers none or lazyReader
// cannot use it on this platform.
func rawConn(nc net.Conn) (net.Conn, syscall.RawConn) {
	raw := nc
	for {
		u, ok := raw.(interface{ Unwrap() net.Conn })
		if !ok {
			break
		}
		raw = u.Unwrap()
	}
	sc, ok := raw.(syscall.Conn)
	if !ok || !lazySupported {
		return raw, nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return raw, nil
	}
	return raw, rc
}

// idleWait lets the reader wait for the next frame on a shallow stack:
// the reader waits for its socket in wait, and a burst of input is read on
// a goroutine of its own that asks next, before each frame, whether a
// frame is at hand for the library's reader. next consumes the complete
// control frames it finds at the head of the input itself (keepalive.go),
// so that a burst never waits inside the library for the frame after a
// control frame, and it hands the library only frames whose header is at
// hand, so that a frame started and not continued is timed (reader.go)
// and waited for here, on the shallow stack, not in the library.
//
// The library reads the connection outside the reader only in its close
// handshake (Conn.Close waits for the peer's close frame); mu orders that
// with next's reads and looks at the buffers: the writer holds it around
// Close.
type idleWait struct {
	lr *lazyReader
	br *bufio.Reader // the library's reader over lr; its buffered bytes come first
	mu *sync.Mutex
	// lw, when set, is the writer under the library's, through which next
	// answers the client's pings itself; nil when the AcceptOptions want
	// to see them (OnPingReceived): they are left to the library.
	lw *lazyWriter
	// pongs, when set, is signalled for each pong frame next consumes
	// (keepalive.go); nil: pongs are left to the library.
	pongs chan struct{}
}

// flushed flushes the session's Deferral before the reader waits:
// nothing is left of the last read (deferral.go).
func (w idleWait) flushed() {
	if w.lr.flush != nil {
		w.lr.flush.Flush()
	}
}

// wait waits until the socket is readable or has failed, holding no
// buffer; the bytes it finds are read by next.
func (w idleWait) wait() {
	w.flushed()
	// An error is the library's to report: its read fails the same way.
	waitReadable(w.lr.rc) // upgrade.go
}

// What next finds at the head of the input.
const (
	headNone    = iota // nothing: wait for the socket
	headPartial        // the start of a frame, its header (or control frame) incomplete: wait for the socket
	headData           // a data frame's header: the library reads on
	headControl        // a control frame next leaves to the library, or the socket's end or failure
	headMore           // control frames only so far, and more input: look again
)

// maxHeadReads bounds the reads of one call of next, so that a client
// sending control frames only does not hold mu for long.
const maxHeadReads = 16

// next consumes the complete control frames at the head of the input that
// the session takes itself and reports what is left at the head and
// whether it took a frame. It reads what the socket has, without waiting,
// while only the start of a frame is at hand, or nothing and fresh is set
// (the first look after wait found the socket readable); with nothing at
// hand otherwise the caller waits for the socket, which costs no more
// system calls than a read that finds nothing. It returns an error only
// when answering a ping failed.
func (w idleWait) next(fresh bool) (st int, took bool, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for range maxHeadReads {
		var n int
		st, n, err = w.takeControl()
		took = took || n > 0
		if err != nil || st == headData || st == headControl {
			return st, took, err
		}
		if !fresh && st == headNone {
			return st, took, nil
		}
		n, rerr := w.lr.readNow()
		if rerr != nil {
			return headControl, took, nil // the library's read meets the same end
		}
		if n == 0 {
			if st == headPartial {
				w.lr.keepSmall()
			}
			return st, took, nil
		}
	}
	return headMore, took, nil // mu is let go between looks
}

// takeControl consumes the complete control frames at the head of the
// bytes at hand that the session takes (pongs when pongs is set, pings
// when lw is) and reports what is left and how many it took.
func (w idleWait) takeControl() (st, took int, err error) {
	for ; ; took++ {
		a, _ := w.br.Peek(w.br.Buffered())
		in := headBytes{a: a, b: w.lr.pending}
		st, size := in.frame()
		if st != headControl {
			return st, took, nil
		}
		b0 := in.at(0)
		if size == 0 || !(b0 == 0x80|opPong && w.pongs != nil || b0 == 0x80|opPing && w.lw != nil) {
			return headControl, took, nil // a close frame, a bad one, or one the library wants to see
		}
		var payload [125]byte
		p := payload[:size-6]
		for i := range p {
			p[i] = in.at(6+i) ^ in.at(2+i%4)
		}
		w.discard(len(a), size)
		if b0 == 0x80|opPong {
			pongSignal(w.pongs)
			continue
		}
		if err := w.lw.writeControl(opPong, p); err != nil {
			return headNone, took, err
		}
	}
}

// discard drops the first n bytes at hand, of which inBR are buffered in
// br.
func (w idleWait) discard(inBR, n int) {
	k := min(n, inBR)
	_, _ = w.br.Discard(k)
	w.lr.drop(n - k)
}

// buffered reports whether bytes already read wait in the buffers.
func (w idleWait) buffered() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.br.Buffered() > 0 || len(w.lr.pending) > 0
}

// headBytes is the input at hand in two parts: what the library's
// bufio.Reader holds, then what lazyReader holds.
type headBytes struct{ a, b []byte }

func (h headBytes) len() int { return len(h.a) + len(h.b) }

func (h headBytes) at(i int) byte {
	if i < len(h.a) {
		return h.a[i]
	}
	return h.b[i-len(h.a)]
}

// frame reports what the bytes at hand start with (RFC 6455, 5.2): nothing,
// a frame whose header is incomplete, a data frame's complete header, or a
// control frame (opcode 8 and above) — with, for a short masked control
// frame, its size when it is complete, and headPartial while it is not.
func (h headBytes) frame() (st, size int) {
	n := h.len()
	if n == 0 {
		return headNone, 0
	}
	if n < 2 {
		return headPartial, 0
	}
	b0, b1 := h.at(0), h.at(1)
	hl := 2
	switch b1 & 0x7f {
	case 126:
		hl += 2
	case 127:
		hl += 8
	}
	if b1&0x80 != 0 {
		hl += 4
	}
	if n < hl {
		return headPartial, 0
	}
	if b0&0x08 == 0 {
		return headData, 0
	}
	if b1&0x80 == 0 || b1&0x7f > 125 {
		return headControl, 0 // the library refuses it
	}
	size = hl + int(b1&0x7f)
	if n < size {
		return headPartial, 0
	}
	return headControl, size
}

// lazyConn is a hijacked connection that reads through a lazyReader.
type lazyConn struct {
	net.Conn
	lr *lazyReader
	// ps, set by Accept (or Upgraded.IdleSocket), is resumed by Close if
	// its reader is parked (idlepoll_linux.go): closing the socket removes
	// it from the epoll set without an event. Atomic: IdleSocket may set
	// it while a Shutdown closes the connection; a close that saw none
	// came before the park, whose arm then fails on the closed socket.
	ps atomic.Pointer[parkState]
}

func (c *lazyConn) Read(p []byte) (int, error) { return c.lr.Read(p) }

// Close closes the connection, then resumes a parked reader, whose read
// fails and ends its session.
func (c *lazyConn) Close() error {
	err := c.Conn.Close()
	if ps := c.ps.Load(); ps != nil {
		ps.unpark()
	}
	return err
}

// lazyReader reads a socket into pooled buffers held only while they hold
// unread bytes. It is used by one reader at a time (the library's).
type lazyReader struct {
	rc      syscall.RawConn
	pending []byte  // bytes read and not yet returned: in buf, or copied at the handshake
	buf     *[]byte // pooled buffer behind pending, nil when none is held
	// flush, when set, is flushed before every read of the socket: the
	// frames of the last read have been handled (deferral.go).
	flush *Deferral
}

func (l *lazyReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if len(l.pending) == 0 {
		if l.flush != nil {
			l.flush.Flush()
		}
		if len(p) >= 4<<10 {
			return l.readSocket(p, nil) // large read: no copy
		}
		var bp *[]byte
		n, err := l.readSocket(nil, &bp)
		if n == 0 {
			if bp != nil {
				putBuf(bp)
			}
			return 0, err
		}
		l.buf, l.pending = bp, (*bp)[:n]
	}
	n := copy(p, l.pending)
	l.pending = l.pending[n:]
	if len(l.pending) == 0 && l.buf != nil {
		putBuf(l.buf)
		l.buf = nil
	}
	return n, nil
}

// readNow reads what the socket has, without waiting, after the bytes
// pending, which it moves into a pooled buffer with room after them first.
// It returns the number of bytes read: 0 when the socket has nothing now,
// with io.EOF or an error when it ended or failed.
func (l *lazyReader) readNow() (int, error) {
	if l.flush != nil {
		l.flush.Flush() // the frames of the last read have been handled (deferral.go)
	}
	if l.buf == nil {
		bp := getBuf()
		*bp = append((*bp)[:0], l.pending...)
		l.buf, l.pending = bp, *bp
	} else if len(l.pending) == cap(l.pending) {
		b := (*l.buf)[:cap(*l.buf)]
		l.pending = b[:copy(b, l.pending)]
	}
	room := l.pending[len(l.pending):cap(l.pending)]
	var n int
	var rerr error
	err := l.rc.Read(func(fd uintptr) bool {
		n, rerr = readFD(fd, room)
		return true // no wait
	})
	switch {
	case err != nil:
	case errors.Is(rerr, syscall.EAGAIN):
		n = 0
	case rerr != nil:
		err = &net.OpError{Op: "read", Net: "tcp", Err: rerr}
	case n == 0:
		err = io.EOF
	}
	l.pending = l.pending[:len(l.pending)+n]
	if len(l.pending) == 0 {
		putBuf(l.buf)
		l.buf, l.pending = nil, nil
	}
	return n, err
}

// keepSmall moves the pending bytes (the start of a frame, a few bytes)
// out of the pooled buffer into one of their size, so that a session
// waiting for the rest of a frame holds no pooled buffer.
func (l *lazyReader) keepSmall() {
	if l.buf == nil {
		return
	}
	l.pending = append([]byte(nil), l.pending...)
	putBuf(l.buf)
	l.buf = nil
}

// drop drops the first n pending bytes.
func (l *lazyReader) drop(n int) {
	l.pending = l.pending[n:]
	if len(l.pending) == 0 && l.buf != nil {
		putBuf(l.buf)
		l.buf, l.pending = nil, nil
	}
}

// readSocket reads once into p or, with p nil, into a buffer of bufPool
// that it sets *bp to, waiting until the socket is readable. A pooled
// buffer is taken only for a read that may find bytes and is given back
// before the wait: the library's reader waits here, deep in its frame
// reading, whenever it reads on after a control frame (a keepalive's
// pong), and an idle connection must not hold a buffer then. It returns
// io.EOF when the peer has closed.
func (l *lazyReader) readSocket(p []byte, bp **[]byte) (int, error) {
	var n int
	var rerr error
	err := l.rc.Read(func(fd uintptr) bool {
		buf := p
		if buf == nil {
			if *bp == nil {
				*bp = getBuf()
			}
			buf = (**bp)[:cap(**bp)]
		}
		n, rerr = readFD(fd, buf)
		if !errors.Is(rerr, syscall.EAGAIN) {
			return true
		}
		if p == nil {
			putBuf(*bp) // not held while waiting
			*bp = nil
		}
		return false
	})
	if err != nil {
		return 0, err // closed, or the poller failed
	}
	if rerr != nil {
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: rerr}
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// lazyWriter is the writer under the small bufio.Writer the library writes
// frames to. Safe for concurrent use: the library writes frames under its
// own lock, the session corks and uncorks from the writer goroutine.
type lazyWriter struct {
	nc net.Conn

	mu sync.Mutex // guards following
	// closeSent: the library wrote a close frame, after which no data
	// frame may follow (writeText).
	closeSent bool
	hdr       [10]byte // the header of the frame writeText writes
	corked    bool
	own       []byte // the slice being written while corked; pieces of it are referenced
	// copied holds the pieces copied while corked (the header with the
	// start of the payload, a control frame written meanwhile, a
	// compressed payload), in pooled: a buffer of bufPool borrowed for the
	// batch, nil when none is held.
	copied []byte
	pooled *[]byte
	segs   []segment // what to write at uncork, in order
	vec    [][]byte  // reused for the vectored write
}

// segment is one piece to write at uncork: a referenced slice, or the
// range [from,to) of copied.
type segment struct {
	ref      []byte
	from, to int
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.corked {
		// Uncorked, the library writes only control frames, each whole
		// in one write (they fit the small bufio.Writer, which it flushes
		// after each): p starts with a frame header.
		if len(p) > 0 && p[0]&0x0f == opClose {
			l.closeSent = true
		}
		return l.nc.Write(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if tailOf(p, l.own) {
		l.segs = append(l.segs, segment{ref: p})
		return len(p), nil
	}
	if l.pooled == nil {
		l.pooled = getBuf()
		l.copied = (*l.pooled)[:0]
	}
	from := len(l.copied)
	l.copied = append(l.copied, p...)
	if n := len(l.segs); n > 0 && l.segs[n-1].ref == nil && l.segs[n-1].to == from {
		l.segs[n-1].to = len(l.copied) // extends the copied piece before it
	} else {
		l.segs = append(l.segs, segment{from: from, to: len(l.copied)})
	}
	return len(p), nil
}

// tailOf reports whether p is a non-empty tail of own (the same memory).
func tailOf(p, own []byte) bool {
	return len(p) > 0 && len(p) <= len(own) && &p[len(p)-1] == &own[len(own)-1] && &p[0] == &own[len(own)-len(p)]
}

// cork makes writes wait for uncork; pieces of own are referenced until
// then, so own must not change before uncork returns.
func (l *lazyWriter) cork(own []byte) {
	l.mu.Lock()
	l.corked, l.own = true, own
	l.mu.Unlock()
}

// uncork writes what was written since cork, in one vectored write, and
// ends the cork.
func (l *lazyWriter) uncork() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.corked, l.own = false, nil
	var err error
	switch {
	case len(l.segs) == 0:
	case len(l.segs) == 1 && l.segs[0].ref != nil:
		_, err = l.nc.Write(l.segs[0].ref)
	case len(l.segs) == 1:
		_, err = l.nc.Write(l.copied[l.segs[0].from:l.segs[0].to])
	default:
		vec := l.vec[:0]
		for _, s := range l.segs {
			if s.ref != nil {
				vec = append(vec, s.ref)
			} else {
				vec = append(vec, l.copied[s.from:s.to])
			}
		}
		bufs := net.Buffers(vec)
		_, err = bufs.WriteTo(l.nc)
		clear(vec)
		l.vec = vec[:0]
	}
	clear(l.segs)
	l.segs = l.segs[:0]
	if l.pooled != nil {
		*l.pooled = l.copied[:0] // keeps what append grew it to
		putBuf(l.pooled)
		l.pooled = nil
	}
	l.copied = nil
	return err
}

// writeText writes one final, unmasked, uncompressed text frame of size
// payload bytes: the concatenation of parts[1:], shared slices written in
// one vectored write without being copied; parts[0] is set to the frame's
// header. It is used instead of the library's Conn.Write by sessions that
// did not negotiate compression, so that the library writes only control
// frames (see Write); the lock keeps the two from interleaving. After the
// library has sent a close frame it writes nothing and reports
// net.ErrClosed.
func (l *lazyWriter) writeText(parts [][]byte, size int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closeSent {
		return net.ErrClosed
	}
	parts[0] = appendTextHeader(l.hdr[:0], size)
	bufs := net.Buffers(parts)
	_, err := bufs.WriteTo(l.nc)
	return err
}

// appendTextHeader appends the header of a final, unmasked text frame with
// a payload of n bytes (RFC 6455, 5.2).
func appendTextHeader(b []byte, n int) []byte {
	const finText = 0x80 | 0x1
	switch {
	case n <= 125:
		return append(b, finText, byte(n))
	case n <= 0xffff:
		return append(b, finText, 126, byte(n>>8), byte(n))
	default:
		return binary.BigEndian.AppendUint64(append(b, finText, 127), uint64(n))
	}
}
