package session

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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
}

func connSocket(c *websocket.Conn) socket {
	return socket{
		write: func(ctx context.Context, p []byte) error {
			return c.Write(ctx, websocket.MessageText, p)
		},
		close:    c.Close,
		closeNow: c.CloseNow,
		ping:     c.Ping,
	}
}

// writeLoop is the writer goroutine: it drains the queue into batched text
// frames until the session ends, then closes the connection. It always
// closes the connection before it returns, which unblocks the reader.
func (s *Session) writeLoop() {
	defer s.wg.Done()
	// The loop blocks on two channels only: the queue's signal and ctl,
	// which every other event (close, reader end, ping due, ping result)
	// kicks. A select over more channels, a timer's among them, costs a
	// measurable share of CPU when every message wakes the writer.
	var pingDue atomic.Bool
	ping := time.AfterFunc(s.opts.PingInterval, func() {
		pingDue.Store(true)
		s.kick()
	})
	defer ping.Stop()
	pinging := false
	for {
		select {
		case <-s.q.Ready():
			if err := s.drain(); err != nil {
				s.abort(err)
				return
			}
			continue
		case <-s.ctl:
		}
		select {
		case <-s.closeReq:
			s.closeConn()
			return
		default:
		}
		select {
		case <-s.readEnded:
			if s.closeRequested() {
				s.closeConn()
			} else {
				s.abort(nil)
			}
			return
		default:
		}
		select {
		case err := <-s.pingDone:
			pinging = false
			if err != nil {
				s.abort(fmt.Errorf("session: keepalive: %w", err))
				return
			}
		default:
		}
		if pingDue.Swap(false) {
			if !pinging {
				pinging = true
				s.wg.Add(1)
				go s.pingOnce()
			}
			ping.Reset(s.opts.PingInterval)
		}
	}
}

// kick wakes the writer to look at its control state.
func (s *Session) kick() {
	select {
	case s.ctl <- struct{}{}:
	default:
	}
}

// drain writes batches until the queue is empty or a close is requested.
func (s *Session) drain() error {
	for {
		select {
		case <-s.closeReq:
			return nil // the loop flushes what is left within FlushTimeout
		case <-s.readEnded:
			return nil
		default:
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
	bp := getBuf()
	defer putBuf(bp)
	buf, n := s.q.AppendBatch((*bp)[:0], s.opts.MaxBatchBytes)
	*bp = buf
	if n == 0 {
		return false, nil
	}
	// The watchdog closes the connection if the write outlives timeout; it
	// is reused so that a write allocates nothing. wg covers its callback.
	s.wg.Add(1)
	s.watchdog.Reset(timeout)
	err := s.sock.write(context.Background(), buf)
	if s.watchdog.Stop() {
		s.wg.Done()
	} else {
		err = ErrWriteTimeout // the watchdog recorded the cause
	}
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
	s.bytesOut.Add(uint64(len(buf)))
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
	_ = s.sock.closeNow()
}

// closeConn carries out a requested close: flush what is queued within
// FlushTimeout when asked to, then the close handshake.
func (s *Session) closeConn() {
	s.mu.Lock()
	code, reason, flush := s.closeCode, s.closeReason, s.closeFlush
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
	_ = s.sock.close(code, reason)
}

// abort ends the session without a close handshake.
func (s *Session) abort(err error) {
	s.setCause(err)
	s.q.Close()
	_ = s.sock.closeNow()
}

// pingOnce sends one keepalive ping and reports the result to the writer.
func (s *Session) pingOnce() {
	defer s.wg.Done()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.PongTimeout)
	err := s.sock.ping(ctx)
	cancel()
	s.pingDone <- err // buffered: one ping at a time
	s.kick()
}
