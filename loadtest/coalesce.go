package main

// This file is the generator's write coalescing (--coalesce-writes): a
// connection whose WebSocket frames are gathered and written by one
// flusher goroutine, so that frames written while a write is in progress
// leave in one syscall. Clients that send many small frames (a publisher,
// a group member acking) then cost the generator and the gateway one TCP
// segment per burst rather than per frame; nothing on the wire changes but
// how frames are packed into segments.

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// coalesceLimit is how many bytes a coalescing connection buffers before a
// Write waits for the flusher.
const coalesceLimit = 1 << 20

// coalescingClient dials connections that coalesce their writes.
var coalescingClient = &http.Client{Transport: &http.Transport{
	DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return newCoalescingConn(c), nil
	},
}}

// coalescingConn is a net.Conn whose Write only buffers; its flusher
// goroutine writes what is buffered, all at once. It starts with the
// connection and exits when Close is called or a write fails. Safe for
// concurrent use.
type coalescingConn struct {
	net.Conn
	done chan struct{} // closed when the flusher has exited

	mu      sync.Mutex // guards following
	cond    *sync.Cond // signalled when buf changes or the conn closes
	buf     []byte
	err     error // the first write error; every later Write returns it
	closing bool
}

func newCoalescingConn(c net.Conn) *coalescingConn {
	cc := &coalescingConn{Conn: c, done: make(chan struct{})}
	cc.cond = sync.NewCond(&cc.mu)
	go cc.flusher()
	return cc
}

// Write buffers p, waiting while more than coalesceLimit bytes are
// buffered.
func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.buf) > coalesceLimit && c.err == nil && !c.closing {
		c.cond.Wait()
	}
	if c.err != nil {
		return 0, c.err
	}
	if c.closing {
		return 0, net.ErrClosed
	}
	c.buf = append(c.buf, p...)
	c.cond.Broadcast()
	return len(p), nil
}

// flusher writes the buffer whenever it holds something, until Close or a
// write error; Close writes what is left.
func (c *coalescingConn) flusher() {
	defer close(c.done)
	var out []byte
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for len(c.buf) == 0 && !c.closing {
			c.cond.Wait()
		}
		if c.closing {
			return
		}
		out, c.buf = c.buf, out[:0]
		c.mu.Unlock()
		_, err := c.Conn.Write(out)
		c.mu.Lock()
		c.cond.Broadcast()
		if err != nil {
			c.err = err
			return
		}
	}
}

// Close stops the flusher, writes what is still buffered (a close frame,
// usually) and closes the connection.
func (c *coalescingConn) Close() error {
	c.mu.Lock()
	first := !c.closing
	c.closing = true
	c.cond.Broadcast()
	c.mu.Unlock()
	if !first {
		return net.ErrClosed
	}
	<-c.done
	c.mu.Lock()
	rest, err := c.buf, c.err
	c.buf = nil
	c.mu.Unlock()
	if err == nil && len(rest) > 0 {
		_, _ = c.Conn.Write(rest)
	}
	return c.Conn.Close()
}
