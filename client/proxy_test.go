package client_test

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// cutProxy forwards TCP connections on a loopback port to a target, and
// can cut them silently: a cut link stops forwarding in both directions
// and discards what it reads, but closes nothing, as a NAT that forgot the
// flow or a sleeping laptop would. Links accepted after a cut forward
// normally.
type cutProxy struct {
	Addr string

	target string
	ln     net.Listener
	wg     sync.WaitGroup // accept loop and pipes
	mu     sync.Mutex     // guards links
	links  map[*link]struct{}
}

type link struct {
	client, server net.Conn
	cut            atomic.Bool
}

// newCutProxy starts a proxy to target that the test's cleanup stops.
func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{Addr: ln.Addr().String(), target: target, ln: ln, links: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		l := &link{client: c, server: s}
		p.mu.Lock()
		p.links[l] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(l, s, c)
		go p.pipe(l, c, s)
	}
}

// pipe copies src to dst until either is closed, discarding once l is cut.
func (p *cutProxy) pipe(l *link, dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !l.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) || !l.cut.Load() {
				// A link that is not cut passes the end on.
				l.client.Close()
				l.server.Close()
			}
			return
		}
	}
}

// cutAll cuts every link open now.
func (p *cutProxy) cutAll() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for l := range p.links {
		l.cut.Store(true)
	}
	return len(p.links)
}

func (p *cutProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for l := range p.links {
		l.client.Close()
		l.server.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
