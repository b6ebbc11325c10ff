package faults

// A gateway killed mid-pipeline, and started again.
//
// A gateway that runs in the test's process cannot be killed with
// SIGKILL: that would kill the test. One that runs as a child process
// (Options.Processes, gatewayproc.go) is, by Kill9Gateway (the
// kill-9-gateway-process scenario). For the others KillGateway does the
// nearest thing: it closes the
// gateway's NATS links at the proxies first (its NATS connections end
// without a drain, with whatever its publishes had in flight lost in the
// proxies' buffers or unanswered: the NATS servers never hear from it
// again), then every connection of its WebSocket clients, and only then
// shuts the remains down in the process, which can no longer reach NATS
// nor its clients. RestartGateway starts a new gateway in its place (in
// this process or as a process, as before), on the same address, as a
// supervisor restarting the process would.

import (
	"context"
	"net"
	"sync"
	"time"
)

// KillGateway kills gateway g (see the file comment). It returns once
// the remains are shut down (within a few seconds).
func (c *Cluster) KillGateway(g int) {
	c.gmu.Lock()
	gw := c.gateways[g]
	c.gmu.Unlock()
	gw.closeLinks()
	_ = gw.srv.Close() // its listener
	gw.conns.closeAll()
	gw.killed = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = gw.rt.Shutdown(ctx)
	<-gw.done
	_ = gw.Eng.Close(ctx)
}

// RestartGateway starts a new gateway g, after KillGateway, on the
// address the killed one had.
func (c *Cluster) RestartGateway(ctx context.Context, g int) error {
	c.gmu.Lock()
	old := c.gateways[g]
	c.gmu.Unlock()
	gw, err := c.startGateway(ctx, g, old.Addr)
	if err != nil {
		return err
	}
	c.gmu.Lock()
	c.gateways[g] = gw
	c.gmu.Unlock()
	return nil
}

// connSet is the connections a gateway's listener accepted and that are
// still open; safe for concurrent use.
type connSet struct {
	mu sync.Mutex
	m  map[net.Conn]struct{}
}

// closeAll closes every connection of the set at once.
func (s *connSet) closeAll() {
	s.mu.Lock()
	cs := make([]net.Conn, 0, len(s.m))
	for c := range s.m {
		cs = append(cs, c)
	}
	s.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}

// trackListener adds every connection it accepts to set, and removes it
// once closed.
type trackListener struct {
	net.Listener
	set *connSet
}

func (l *trackListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, set: l.set}
	l.set.mu.Lock()
	l.set.m[tc] = struct{}{}
	l.set.mu.Unlock()
	return tc, nil
}

// trackedConn leaves its set when closed.
type trackedConn struct {
	net.Conn
	set  *connSet
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.set.mu.Lock()
		delete(c.set.m, c)
		c.set.mu.Unlock()
	})
	return c.Conn.Close()
}

// Unwrap is the connection it wraps (a WebSocket session writes that one
// directly: see session.Accept).
func (c *trackedConn) Unwrap() net.Conn { return c.Conn }
