package session

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// socket is the connection as the writer sees it, injected as functions so
// that the writer can be tested without a network.
type socket struct {
	// write writes p as one text frame.
	write func(ctx context.Context, p []byte) error
	// close writes a close frame with code and reason and waits, bounded,
	// for the peer's; it closes the connection.
	close func(code websocket.StatusCode, reason string) error
	// closeNow closes the connection without a handshake.
	closeNow func() error
	// ping sends a ping and waits for the pong or ctx.
	ping func(ctx context.Context) error
	// writeText, when not nil, writes one text frame whose payload is
	// parts[1:] joined, in one vectored write (lazyWriter.writeText); the
	// writer then hands it the queue's frames without copying them.
	writeText func(parts [][]byte, size int) error
	// conn, when set, is a one-way session's transport (NewOneWayConn),
	// whose methods are used instead of the functions above (oneway.go:
	// doWrite, ...).
	conn TransportConn
}

// connSocket returns the socket of c; lw, when not nil, is the writer under
// c's bufio.Writer (see lazyconn.go): with direct set (no compression was
// negotiated) the session writes its text frames through it itself,
// otherwise it corks it around each batch so that the batch goes out in
// one write.
//
// pongs, for a direct socket, is signalled for every pong (keepalive.go):
// its keepalive pings are written by the session too.
func connSocket(c *websocket.Conn, lw *lazyWriter, direct bool, pongs chan struct{}) socket {
	write := func(ctx context.Context, p []byte) error {
		return c.Write(ctx, websocket.MessageText, p)
	}
	if lw != nil {
		write = func(ctx context.Context, p []byte) error {
			lw.cork(p)
			err := c.Write(ctx, websocket.MessageText, p)
			if uerr := lw.uncork(); err == nil {
				err = uerr
			}
			return err
		}
	}
	sock := socket{
		write:    write,
		close:    c.Close,
		closeNow: c.CloseNow,
		ping:     c.Ping,
	}
	if lw != nil && direct {
		sock.writeText = lw.writeText
		sock.ping = func(ctx context.Context) error { return directPing(ctx, lw, pongs) }
	}
	return sock
}

// The writer goroutine runs only while there is something to do: it is
// started by Run, parks (returns) once the queue and its control state are
// empty, and is started again by the next Send or control event (wake). An
// idle session then holds no writer goroutine and no stack for it. Writer
// incarnations never overlap: a new one starts only after the previous one
// parked, so the fields "owned by the writer" pass from one to the next.
const (
	writerNotStarted int32 = iota // before Run: wake does nothing
	writerParked                  // no writer goroutine; wake starts one
	writerRunning                 // a writer goroutine runs
	writerNotified                // it runs and must look again before parking
	writerDone                    // the connection is closed; no writer starts again
)

// startWriter starts the keepalive timer and the first writer goroutine;
// Run calls it once.
func (s *Session) startWriter() {
	s.pingTimer = time.AfterFunc(s.opts.PingInterval, func() {
		s.pingDue.Store(true)
		s.kick()
	})
	s.writer.Store(writerRunning)
	s.wg.Add(1)
	go s.writeLoop()
}

// finishWriter records that the connection is closed: no writer starts
// again and the keepalive stops.
func (s *Session) finishWriter() {
	s.writer.Store(writerDone)
	s.pingTimer.Stop()
	s.take(stepWriterEnded)
}

// wake makes sure a writer goroutine looks at the queue and the control
// state: it starts one when none runs, or tells the running one not to
// park without looking again.
func (s *Session) wake() {
	for {
		switch st := s.writer.Load(); st {
		case writerParked:
			if s.writer.CompareAndSwap(st, writerRunning) {
				s.wg.Add(1)
				go s.writeLoop()
				return
			}
		case writerRunning:
			if s.writer.CompareAndSwap(st, writerNotified) {
				return
			}
		default: // not started, already notified or done
			return
		}
	}
}

// The writer parks as soon as it has nothing to do, unless the session is
// busy: a new goroutine costs more than waking a waiting one (its stack
// grows again on the way to the socket; about 2.4 µs more per message in
// BenchmarkWriterWake), which matters for a subscription with hundreds of
// messages a second but not for a quiet one. A session is busy once
// residentRuns writer runs in a row started within residentWindow of the
// previous one; the writer then waits for work instead of parking, until
// the next keepalive tick, which makes the session not busy again.
const (
	residentWindow = 50 * time.Millisecond
	residentRuns   = 3
)

// startRun updates the busy state at the start of a writer run.
func (s *Session) startRun() {
	now := time.Now()
	if now.Sub(s.prevRun) < residentWindow {
		s.quickRuns++
	} else {
		s.quickRuns = 0
	}
	s.prevRun = now
	if s.quickRuns >= residentRuns {
		s.busy.Store(true)
	}
}

// writeLoop is one run of the writer goroutine: it drains the queue into
// batched text frames and handles the control state until nothing is left
// to do, then parks; once the session ends it closes the connection (which
// unblocks the reader) and no writer runs again.
func (s *Session) writeLoop() {
	defer s.wg.Done()
	s.startRun()
	for {
		// Whatever wakes happened before this point are seen below.
		s.writer.CompareAndSwap(writerNotified, writerRunning)
		select {
		case <-s.q.Ready():
		default:
			if !s.busy.Load() {
				// Nothing to do. Park unless a wake came in since the
				// top of the loop; a wake after this starts a new
				// writer. An idle session keeps no queue state for its
				// next items.
				s.q.Shrink()
				s.watchdog = nil // stopped; the next run's first write makes one
				if s.writer.CompareAndSwap(writerRunning, writerParked) {
					return
				}
				continue
			}
			// Frequent traffic: wait here, a wake costs less than a new
			// goroutine growing its stack again.
			<-s.q.Ready()
		}
		// Ready signals queued items and kicks alike: the control state
		// first (a close flushes what is queued itself), then the queue.
		if s.ctlDue.Swap(false) && s.control() {
			s.finishWriter()
			return
		}
		if !s.drainOrEnd() {
			return
		}
	}
}

// drainOrEnd writes what is queued; when a write fails it ends the
// session and reports false, and the writer must return.
func (s *Session) drainOrEnd() bool {
	if err := s.drain(); err != nil {
		s.abort(err)
		s.finishWriter()
		return false
	}
	return true
}

// control handles what kick signals: a close request, the end of the
// reader, a keepalive due or its result. It reports whether the session
// has ended (the connection is closed).
func (s *Session) control() (ended bool) {
	if s.reached(stepClosing) {
		s.closeConn()
		return true
	}
	if s.reached(stepReadEnded) {
		if s.closeRequested() {
			s.closeConn()
		} else {
			s.abort(nil)
		}
		return true
	}
	if r := s.pingDone.Swap(nil); r != nil {
		s.pinging = false
		if r.err != nil {
			s.abort(fmt.Errorf("%w: %w", ErrKeepalive, r.err))
			return true
		}
	}
	if s.pingDue.Swap(false) {
		s.busy.Store(false) // see residentWindow
		s.quickRuns = 0
		if !s.pinging {
			s.pinging = true
			s.wg.Add(1)
			go s.pingOnce()
		}
		s.pingTimer.Reset(s.opts.PingInterval)
	}
	return false
}

// kick wakes the writer to look at its control state. The flag is set
// before the signal, so the writer that takes the signal sees it. With
// coalescing on it also ends a linger (coalesce.go), so a close or the
// reader's end is not left waiting for WriteDelay.
func (s *Session) kick() {
	s.ctlDue.Store(true)
	s.q.signal()
	s.q.signalFull()
	s.wake()
}

// drain writes batches until the queue is empty or a close is requested.
func (s *Session) drain() error {
	for {
		if s.reached(stepClosing | stepReadEnded) {
			return nil // on a close, the loop flushes what is left within FlushTimeout
		}
		if s.q.full != nil && !s.linger() {
			return nil
		}
		more, err := s.writeBatch(s.opts.WriteTimeout)
		if err != nil || !more {
			return err
		}
	}
}

// writeBatch writes one batch from the queue, the write bounded by timeout.
// It reports whether it wrote anything.
func (s *Session) writeBatch(timeout time.Duration) (bool, error) {
	if s.sock.writeText != nil {
		return s.writePieces(timeout)
	}
	bp := getBuf()
	defer putBuf(bp)
	buf, n := s.q.AppendBatch((*bp)[:0], s.opts.MaxBatchBytes)
	*bp = buf
	if n == 0 {
		return false, nil
	}
	err := s.guardedWrite(timeout, func() error { return s.sock.doWrite(context.Background(), buf) })
	return s.written(n, len(buf), err)
}

// writePieces is writeBatch for a socket that writes its frames itself:
// the batch's frames go to the socket from the queue's own slices, in one
// vectored write, never copied into a buffer of the session's.
func (s *Session) writePieces(timeout time.Duration) (bool, error) {
	vp := vecPool.Get().(*[][]byte)
	sp := getBuf()
	defer putBuf(sp)
	// Piece 0 is the frame header, set by writeText.
	vec, scratch, n, size := s.q.AppendFrames(append((*vp)[:0], nil), (*sp)[:0], s.opts.MaxBatchBytes)
	*sp = scratch
	var err error
	if n > 0 {
		err = s.guardedWrite(timeout, func() error { return s.sock.writeText(vec, size) })
	}
	clear(vec) // the pool must not keep frames alive
	if cap(vec) <= maxPooledVec {
		*vp = vec[:0]
		vecPool.Put(vp)
	}
	if n == 0 {
		return false, nil
	}
	return s.written(n, size, err)
}

// vecPool holds the piece lists of writePieces; a list is at most 2 pieces
// per frame of a batch.
var vecPool = sync.Pool{New: func() any { v := make([][]byte, 0, 64); return &v }}

// maxPooledVec bounds the piece lists kept in vecPool.
const maxPooledVec = 4096

// guardedWrite runs write under the write watchdog, which closes the
// connection if the write outlives timeout; it is reused while the writer
// runs, so that a busy session's writes allocate nothing, and let go when
// the writer parks, so that an idle session holds no timer for it. wg
// covers its callback.
func (s *Session) guardedWrite(timeout time.Duration, write func() error) error {
	s.wg.Add(1)
	if s.watchdog == nil {
		s.watchdog = time.AfterFunc(timeout, s.onWriteTimeout)
	} else {
		s.watchdog.Reset(timeout)
	}
	err := write()
	if s.watchdog.Stop() {
		s.wg.Done()
	} else {
		err = ErrWriteTimeout // the watchdog recorded the cause
	}
	return err
}

// written accounts for a batch of n frames and size bytes whose write
// returned err, and reports what writeBatch does.
func (s *Session) written(n, size int, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	if s.opts.OnSent != nil {
		if refs := s.q.Refs(); len(refs) > 0 {
			at := time.Now()
			for _, r := range refs {
				s.opts.OnSent(r, at)
			}
		}
	}
	s.writes.Add(1)
	s.sent.Add(uint64(n))
	s.bytesOut.Add(uint64(size))
	return true, nil
}

// bufPool holds the read and batch buffers of all sessions. An idle
// connection then holds no buffer of its own: with ten thousands of mostly
// quiet connections, per-session buffers would dominate the gateway's
// memory.
var bufPool = sync.Pool{New: func() any {
	b := make([]byte, 0, 4<<10)
	return &b
}}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

// putBuf returns a buffer to the pool unless one large frame made it grow
// past 64 KiB, which is not worth keeping.
func putBuf(b *[]byte) {
	if cap(*b) > 64<<10 {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

func (s *Session) onWriteTimeout() {
	defer s.wg.Done()
	s.setCause(fmt.Errorf("%w (%v)", ErrWriteTimeout, s.opts.WriteTimeout))
	_ = s.sock.doCloseNow()
}

// closeConn carries out a requested close: flush what is queued within
// FlushTimeout when asked to, then the close handshake.
func (s *Session) closeConn() {
	s.mu.Lock()
	e := s.endLocked() // made by closeWith
	code, reason, flush := e.code, e.reason, e.flush
	s.mu.Unlock()
	if flush {
		deadline := time.Now().Add(s.opts.FlushTimeout)
		for {
			left := time.Until(deadline)
			if left <= 0 {
				break
			}
			more, err := s.writeBatch(min(left, s.opts.WriteTimeout))
			if err != nil {
				s.abort(err)
				return
			}
			if !more {
				break
			}
		}
	}
	if s.idle.mu != nil {
		s.idle.mu.Lock() // the close handshake reads; see idleWait
		defer s.idle.mu.Unlock()
	}
	_ = s.sock.doClose(code, reason)
}

// abort ends the session without a close handshake.
func (s *Session) abort(err error) {
	s.setCause(err)
	s.q.Close()
	_ = s.sock.doCloseNow()
}

// pingOnce sends one keepalive ping and reports the result to the writer.
func (s *Session) pingOnce() {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.PongTimeout)
	err := s.sock.doPing(ctx)
	cancel()
	r := pingSucceeded
	if err != nil {
		r = &pingResult{err: err}
	}
	s.pingDone.Store(r) // one ping at a time: the writer takes it before the next
	s.kick()
}

// pingResult is the outcome of a keepalive ping (pingOnce), handed to the
// writer through Session.pingDone: a pointer, where a buffered channel
// would cost every session 112 bytes.
type pingResult struct{ err error }

// pingSucceeded is the result of every ping that got its pong.
var pingSucceeded = &pingResult{}
