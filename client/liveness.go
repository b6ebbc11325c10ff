package client

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// Liveness. A connection can die without a close: a NAT or firewall that
// forgot the flow, a laptop that slept, a cable pulled somewhere on the
// path. No FIN or RST arrives, reads just wait, and the operating system
// gives up only after minutes. So while a connection is up, the client
// pings the gateway every Options.PingInterval, and a ping without a pong
// within Options.PongTimeout closes the connection; the reader then
// redials and resumes as after any other loss. The gateway answers pings
// itself, on its session's reader, so a pong does not wait for the
// gateway's queue.
//
// The pong is read by the client's reader. While the reader holds back
// for a full subscription (backpressure.go) a pong can wait in the socket
// behind records; a ping that timed out while the reader held back does
// not count.

// readConn reads conn until it fails (readLoop), with the liveness check
// running beside it; it returns the reason the connection ended. The
// check's goroutine has exited when it returns.
func (c *Client) readConn(conn *websocket.Conn) error {
	if c.opts.PingInterval < 0 {
		return c.readLoop(conn)
	}
	ctx, cancel := context.WithCancel(c.ctx)
	var dead atomic.Pointer[error]
	done := make(chan struct{})
	go func() { // exits when readLoop has returned, or after closing conn
		defer close(done)
		if err := c.keepAlive(ctx, conn); err != nil {
			dead.Store(&err)
			conn.CloseNow() // readLoop returns
		}
	}()
	err := c.readLoop(conn)
	cancel()
	<-done
	if e := dead.Load(); e != nil {
		return *e
	}
	return err
}

// keepAlive pings conn every PingInterval until ctx ends; it returns an
// error when a pong did not come in time.
func (c *Client) keepAlive(ctx context.Context, conn *websocket.Conn) error {
	t := time.NewTicker(c.opts.PingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		stalls := c.stalls.Load()
		pctx, cancel := context.WithTimeout(ctx, c.opts.PongTimeout)
		err := conn.Ping(pctx)
		cancel()
		switch {
		case err == nil, ctx.Err() != nil:
		case c.stalled.Load() || c.stalls.Load() != stalls:
			// The reader held back: the pong may be behind records.
		default:
			return fmt.Errorf("client: connection dead: no pong within %v: %w", c.opts.PongTimeout, err)
		}
	}
}
