package session

import (
	"context"
	"net"
)

// Keepalive of sessions that write their own frames. The library's Ping
// waits for its pong inside the library's frame reader, and a reader that
// has read a control frame there stays inside it, waiting for the next
// data frame on a deep stack. A session accepted by Accept without
// compression instead writes its keepalive ping itself (lazyWriter.
// writeControl) and takes any pong as the answer: one the waiting reader
// finds at the head of the bytes it read is consumed there (idleWait.wait,
// takePongs), without entering the library, so that an idle session goes
// back to waiting on its small stack; one that arrives during a burst is
// read by the library, which reports it (AcceptOptions.OnPongReceived).
// RFC 6455 allows unsolicited pongs, so any pong proves the peer alive.

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
func (s *Session) ownPing(ctx context.Context) error {
	pongs := s.idle.pongs
	select {
	case <-pongs: // a pong of an earlier ping, or unsolicited
	default:
	}
	if err := s.idle.lw.writeControl(opPing, []byte("sy")); err != nil {
		return err
	}
	select {
	case <-pongs:
		return nil
	case <-s.readEnded:
		return net.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// The opcodes of WebSocket control frames (RFC 6455, 5.2).
const (
	opClose = 0x8
	opPing  = 0x9
	opPong  = 0xA
)

// writeControl writes one unmasked control frame (payload at most 125
// bytes) in one write, unless the library has sent its close frame.
func (l *lazyWriter) writeControl(op byte, payload []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closeSent {
		return net.ErrClosed
	}
	f := append(l.hdr[:0], 0x80|op, byte(len(payload)))
	f = append(f, payload...) // fits hdr's spare capacity for short payloads
	_, err := l.nc.Write(f)
	return err
}

// takePongs consumes the complete pong frames at the head of p (a
// client's frames: masked) and reports how many bytes they took and how
// many pongs there were. Anything else, or a pong not yet complete, ends
// the scan: the library reads it.
func takePongs(p []byte) (used, pongs int) {
	for {
		q := p[used:]
		if len(q) < 6 || q[0] != 0x80|opPong || q[1]&0x80 == 0 || q[1]&0x7f > 125 {
			return used, pongs
		}
		n := 6 + int(q[1]&0x7f)
		if len(q) < n {
			return used, pongs
		}
		used += n
		pongs++
	}
}
