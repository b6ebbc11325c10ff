package session

import (
	"context"
	"net"
	"time"
)

// Keepalive and control frames of sessions that read their own socket.
// The library's Ping waits for its pong inside the library's frame reader,
// and a reader that has read a control frame there stays inside it,
// waiting for the next data frame on a deep stack. A session accepted by
// Accept (lazyconn.go) instead takes the complete control frames at the
// head of its input itself, between frames (idleWait.next): it answers a
// client's ping with a pong (writeControl), and it writes its keepalive
// pings itself (ownPing), compressed or not (control frames never are),
// and takes any pong as the answer. Close frames go to the library, and so
// do control frames met inside a fragmented message; the library reports
// the pongs it reads (AcceptOptions.OnPongReceived). RFC 6455 allows
// unsolicited pongs, so any pong proves the peer alive. A burst of input
// that held only control frames thus ends, and the session is back to
// waiting on its small stack.

// pongSignal returns a non-blocking signal on pongs (capacity 1).
func pongSignal(pongs chan struct{}) {
	select {
	case pongs <- struct{}{}:
	default:
	}
}

// directPing is the keepalive ping of a socket that writes its own frames:
// it writes a ping frame and waits for a pong or ctx. Accept replaces it
// with the session's ownPing, which also ends with the connection.
func directPing(ctx context.Context, lw *lazyWriter, pongs chan struct{}) error {
	select {
	case <-pongs: // a pong of an earlier ping, or unsolicited
	default:
	}
	if err := lw.writeControl(opPing, []byte("sy")); err != nil {
		return err
	}
	select {
	case <-pongs:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ownPing is the keepalive ping of a session accepted by Accept that reads
// its socket itself (lazyconn.go): it writes a ping frame and waits for a
// pong, for ctx (the pong timeout), or for the end of the reader, which
// comes with the connection's: a peer that went away ends the session at
// once, not when the pong timeout has passed.
//
// When the pong timeout passes while the reader is busy with input (its
// handler waits, say, for room in a full pipeline), the pong may be
// waiting, unread, behind what the reader has not got to: the ping then
// waits for the reader to catch up with its input (the end of its burst),
// and gives the pong another PongTimeout from there. A peer is declared
// dead only by a timeout that passes while the reader waits for its
// socket, so a slow handler does not end a session whose client answered,
// and a silent client is still ended once the reader is done.
func (s *Session) ownPing(ctx context.Context, lw *lazyWriter) error {
	pongs := s.idle.pongs
	select {
	case <-pongs: // a pong of an earlier ping, or unsolicited
	default:
	}
	if err := lw.writeControl(opPing, []byte("sy")); err != nil {
		return err
	}
	timeout := ctx.Done()
	var again *time.Timer
	var againC <-chan time.Time
	defer func() {
		if again != nil {
			again.Stop()
		}
	}()
	for {
		// runEnd signals pongs after the reader's end: a signal the
		// drain above took is seen here.
		if s.reached(stepReadEnded) {
			return net.ErrClosed
		}
		select {
		case <-pongs:
			return s.pongOrEnd()
		case <-timeout:
		case <-againC:
		}
		// Stored before the look at bursts, so that a burst ending after
		// the look finds it (see readLoop).
		c := make(chan struct{})
		s.caughtUp.Store(&c)
		if s.bursts.Load()%2 == 0 {
			s.caughtUp.CompareAndSwap(&c, nil)
			return context.DeadlineExceeded // the reader waited for its socket: no pong came
		}
		select {
		case <-pongs:
			return s.pongOrEnd()
		case <-c:
		}
		if again == nil {
			again = time.NewTimer(s.opts.PongTimeout)
		} else {
			again.Reset(s.opts.PongTimeout)
		}
		timeout, againC = nil, again.C
	}
}

// pongOrEnd is the result of ownPing woken by its pong signal: a pong, or
// the end of the reader (runEnd signals it too, so that the session's
// end needs no channel of its own for the ping to wait on).
func (s *Session) pongOrEnd() error {
	if s.reached(stepReadEnded) {
		return net.ErrClosed
	}
	return nil
}

// The opcodes of WebSocket control frames (RFC 6455, 5.2).
const (
	opClose = 0x8
	opPing  = 0x9
	opPong  = 0xA
)

// controlWriteTimeout bounds the write of a control frame the session
// writes itself, as the library bounds its own (5 s): a client that sends
// pings and reads nothing cannot hold the reader in the write of a pong.
const controlWriteTimeout = 5 * time.Second

// writeControl writes one unmasked control frame (payload at most 125
// bytes) in one write within controlWriteTimeout, unless the library has
// sent its close frame.
func (l *lazyWriter) writeControl(op byte, payload []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closeSent {
		return net.ErrClosed
	}
	var f []byte
	if len(payload) <= len(l.hdr)-2 {
		f = append(l.hdr[:0], 0x80|op, byte(len(payload)))
	} else {
		f = append(make([]byte, 0, 2+len(payload)), 0x80|op, byte(len(payload)))
	}
	f = append(f, payload...)
	_ = l.nc.SetWriteDeadline(time.Now().Add(controlWriteTimeout))
	_, err := l.nc.Write(f)
	_ = l.nc.SetWriteDeadline(time.Time{})
	return err
}
