package session

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
)

// The reader: one inbound message at a time, read into pooled buffers so
// that what a message holds while it arrives is about what has arrived.
//
// A message is read into a small pooled buffer (4 KiB, or up to 64 KiB
// when the pool hands out a grown one). A longer message continues in
// fixed chunks of chunkSize from their own pool, the first chunk taking
// over the small buffer's bytes: no buffer is ever grown by copying, so an
// unfinished message (a fragmented message its sender parks, or a partial
// frame) holds what arrived plus at most one chunk, never a multiple of
// it. A complete message of one chunk is handled in place; a longer one
// is joined into one buffer of its exact size for the handler. The
// message's first byte starts Options.MessageTimeout (for a session
// accepted by Accept, the first byte of its first frame's header; for
// others, once that header has been read); a message not complete by then
// closes the session with 1008. So does, for a session accepted by Accept,
// a frame header or a control frame not complete within MessageTimeout of
// its first byte (idleWait.next): a client that stops in the middle of a
// frame is caught by the message timeout, not only by the keepalive.

// chunkSize is the size of the buffers long messages are read into.
const chunkSize = 64 << 10

// firstReadBytes is how much of a message is read into the session's small
// buffer before the rest takes chunks (and, with Options.ReadBudget, the
// budget's bytes). The pooled buffer may be larger (a writer's batch grew
// it); only this much of it is used, so that the budget, not the pool's
// luck, bounds what partly read messages hold.
const firstReadBytes = 4 << 10

// firstPool holds the readers' first buffers, of firstReadBytes each
// (fill never grows them): not the writers' pool, whose buffers a batch
// grows, so that a message waiting for its next bytes holds 4 KiB outside
// the read budget, never more.
var firstPool = sync.Pool{New: func() any {
	b := make([]byte, 0, firstReadBytes)
	return &b
}}

var chunkPool = sync.Pool{New: func() any {
	b := make([]byte, 0, chunkSize)
	return &b
}}

// readLoop reads frames until the connection fails or the peer breaks the
// protocol, in which case it requests the close and returns the reason.
// A session accepted by Accept waits for its socket here without a buffer
// and on a shallow stack, and reads each burst of input on a goroutine of
// its own (readBurst); others read here, frame after frame.
func (s *Session) readLoop(ctx context.Context, h Handler) error {
	if s.idle.lr == nil {
		for {
			if err := s.readNext(ctx, h); err != nil {
				return err
			}
		}
	}
	burst := make(chan error, 1)
	for waited := !s.idle.buffered(); ; waited = true {
		if waited {
			// Wait for input without holding a buffer: idle sessions
			// cost no read buffer, and no goroutine once parked in the
			// idle poller (resume reads on); otherwise this goroutine no
			// more than the smallest stack (see Start).
			if s.parkReader() {
				return errParked
			}
			s.idle.wait()
		}
		s.bursts.Add(1) // odd: busy with input
		go func() { burst <- s.readBurst(ctx, h) }()
		err := <-burst
		s.bursts.Add(1)
		s.releaseCaughtUp()
		if err != nil {
			_ = s.stopMessageTimer() // a frame started and never continued
			return err
		}
	}
}

// errParked: readLoop parked the socket in the idle poller; the reader
// goroutine returns without ending the session.
var errParked = errors.New("session: reader parked")

// resume runs the reader of a parked session on a fresh goroutine, started
// by the idle poller when its socket became readable or by the close of
// its connection: it reads the burst of input at hand and parks again, or
// ends the session as serve does. It returns when it has parked or the
// session has ended.
func (s *Session) resume() {
	for {
		s.bursts.Add(1) // odd: busy with input
		err := s.readBurst(s.runCtx, s.runH)
		s.bursts.Add(1)
		s.releaseCaughtUp()
		if err != nil {
			_ = s.stopMessageTimer()
			s.flushDeferred()
			s.runEnded(s.runEnd(err, s.runStop))
			return
		}
		if s.parkReader() {
			return
		}
		s.idle.wait() // not parked: on this goroutine's stack
	}
}

// parkReader parks the reader's socket in the idle poller once its burst
// is done (idlepoll_linux.go) and reports whether it did. A parked reader
// lets its message timer go unless a message is under way (see
// startMessageTimer); it is let go before the park, since a parked reader
// may be resumed on another goroutine at once, and kept again when the
// park fails (a reader that never parks reuses one timer).
func (s *Session) parkReader() bool {
	t := s.msgTimer
	if !s.msgTimed {
		s.msgTimer = nil // stopped
	}
	s.idle.flushed()
	if s.park() {
		return true
	}
	s.msgTimer = t // not parked: the reader's fields are still this goroutine's
	return false
}

// readBurst reads and handles frames while input is at hand: it returns
// nil once nothing more is (the caller waits for the socket again), or
// the error that ends the session. Control frames the session takes
// itself never reach the library (idleWait.next), and a frame whose header
// has not all arrived is left until it has: the burst never waits for the
// socket between frames. Bursts never overlap: the reader's fields pass
// from one to the next through readLoop's channel.
func (s *Session) readBurst(ctx context.Context, h Handler) error {
	for fresh := true; ; fresh = false {
		st, took, err := s.idle.next(fresh)
		if err != nil {
			return err
		}
		if took {
			// A control frame that had started is complete.
			if err := s.stopMessageTimer(); err != nil {
				return err
			}
		}
		switch st {
		case headNone:
			return nil
		case headPartial:
			// A frame has started: it must be complete within
			// MessageTimeout of its first byte.
			s.startMessageTimer()
			return nil
		case headMore:
			continue
		case headControl:
			// The library reads it and, unless it ends the session,
			// waits for the next data frame itself: meanwhile the
			// reader waits for its socket as in readLoop, and a
			// keepalive ping whose pong is missing ends the session
			// (ownPing).
			if err := s.stopMessageTimer(); err != nil {
				return err
			}
			s.bursts.Add(1) // even: waiting for input
			s.releaseCaughtUp()
			typ, r, err := s.conn.Reader(ctx)
			s.bursts.Add(1) // odd: busy with input again
			if err != nil {
				return err
			}
			if err := s.readData(typ, r, h); err != nil {
				return err
			}
			continue
		}
		if err := s.readNext(ctx, h); err != nil {
			return err
		}
	}
}

// releaseCaughtUp closes the channel a keepalive ping waits on for the
// reader to catch up with its input (ownPing), if one does.
func (s *Session) releaseCaughtUp() {
	if s.caughtUp.Load() != nil {
		if c := s.caughtUp.Swap(nil); c != nil {
			close(*c)
		}
	}
}

// readNext reads one frame and hands it to h.
func (s *Session) readNext(ctx context.Context, h Handler) error {
	typ, r, err := s.conn.Reader(ctx)
	if err != nil {
		return err
	}
	return s.readData(typ, r, h)
}

// readData reads the message of type typ from r and hands it to h.
func (s *Session) readData(typ websocket.MessageType, r io.Reader, h Handler) error {
	if typ != websocket.MessageText {
		s.closeWith(websocket.StatusUnsupportedData, "binary frames are not supported", false, ErrBinaryFrame)
		return ErrBinaryFrame
	}
	return s.readFrame(r, h)
}

// readFrame reads one text message from r within Options.MessageTimeout
// and hands it to h.
func (s *Session) readFrame(r io.Reader, h Handler) error {
	s.startMessageTimer() // unless it runs since the frame's first byte
	bp := firstPool.Get().(*[]byte)
	defer firstPool.Put(bp)
	// Past ReadLimit the websocket package sends the 1009 close itself.
	data, err := s.readMessage(r, bp)
	defer s.releaseChunks()
	if terr := s.stopMessageTimer(); terr != nil {
		return terr // the callback requested the close
	}
	if err != nil {
		return err
	}
	if !utf8.Valid(data) {
		s.closeWith(websocket.StatusInvalidFramePayloadData, "invalid UTF-8", false, ErrInvalidUTF8)
		return ErrInvalidUTF8
	}
	s.bytesIn.Add(uint64(len(data)))
	h.HandleFrame(s, data)
	if s.idle.lr == nil {
		s.flushDeferred() // no look at the socket's buffers: one frame at a time
	}
	return nil
}

// readMessage reads r to its end into *bp, then into chunks (s.chunks) if
// it does not fit, and returns the message's bytes.
func (s *Session) readMessage(r io.Reader, bp *[]byte) ([]byte, error) {
	buf, end, err := fill(r, (*bp)[:0:min(cap(*bp), firstReadBytes)])
	if err != nil || end {
		return buf, err
	}
	c := s.chunk()
	if c == nil {
		return nil, errReadCanceled
	}
	*c = append(*c, buf...)
	for {
		*c, end, err = fill(r, *c)
		if err != nil {
			return nil, err
		}
		if end {
			break
		}
		if c = s.chunk(); c == nil {
			return nil, errReadCanceled
		}
	}
	if len(s.chunks) == 1 || len(s.chunks) == 2 && len(*c) == 0 {
		return *s.chunks[0], nil
	}
	total := 0
	for _, c := range s.chunks {
		total += len(*c)
	}
	out := make([]byte, 0, total)
	for _, c := range s.chunks {
		out = append(out, *c...)
	}
	return out, nil
}

// errReadCanceled: the session closed while its reader waited for the
// read budget.
var errReadCanceled = errors.New("session: closed while waiting for read buffers")

// chunk takes an empty chunk from the pool and adds it to s.chunks. With
// Options.ReadBudget it first takes the chunk's bytes from the budget,
// waiting while it is spent (after a flush of the session's Deferral); it
// returns nil if the session closes first (as the message timeout does).
func (s *Session) chunk() *[]byte {
	if b := s.opts.ReadBudget; b != nil && !b.take(chunkSize, s.Closing, &s.deferral) {
		return nil
	}
	c := chunkPool.Get().(*[]byte)
	*c = (*c)[:0]
	s.chunks = append(s.chunks, c)
	s.reading.Add(int64(cap(*c)))
	return c
}

// releaseChunks gives the chunks of the last message back to the pool.
func (s *Session) releaseChunks() {
	if len(s.chunks) == 0 {
		return
	}
	n := 0
	for i, c := range s.chunks {
		n += cap(*c)
		chunkPool.Put(c)
		s.chunks[i] = nil
	}
	if b := s.opts.ReadBudget; b != nil {
		b.give(int64(len(s.chunks)) * chunkSize)
	}
	s.chunks = s.chunks[:0]
	s.reading.Add(-int64(n))
}

// fill reads r into buf[len(buf):cap(buf)] until buf is full or r ends;
// end reports that the message ended. It never grows buf.
func fill(r io.Reader, buf []byte) (_ []byte, end bool, err error) {
	for len(buf) < cap(buf) {
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if errors.Is(err, io.EOF) {
			return buf, true, nil
		}
		if err != nil {
			return buf, false, err
		}
	}
	return buf, false, nil
}

// startMessageTimer starts the message timeout unless it runs already.
// The timer is reused while the reader runs and let go when it parks its
// socket (readLoop): a parked session holds none.
func (s *Session) startMessageTimer() {
	if s.msgTimed {
		return
	}
	s.msgTimed = true
	s.wg.Add(1) // for the timer's callback; released by Stop or by it
	if s.msgTimer == nil {
		s.msgTimer = time.AfterFunc(s.opts.MessageTimeout, s.onMessageTimeout)
	} else {
		s.msgTimer.Reset(s.opts.MessageTimeout)
	}
}

// stopMessageTimer stops the message timeout if it runs; it returns
// ErrMessageTimeout if the timeout has passed (its callback requested the
// close).
func (s *Session) stopMessageTimer() error {
	if !s.msgTimed {
		return nil
	}
	s.msgTimed = false
	if !s.msgTimer.Stop() {
		return ErrMessageTimeout
	}
	s.wg.Done()
	return nil
}

// onMessageTimeout runs when an inbound message took longer than
// Options.MessageTimeout: the reader is still waiting for its rest.
func (s *Session) onMessageTimeout() {
	defer s.wg.Done()
	s.closeWith(websocket.StatusPolicyViolation, "message not completed in time", false, ErrMessageTimeout)
}
