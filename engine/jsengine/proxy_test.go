package jsengine_test

import (
	"net"
	neturl "net/url"
	"sync"
	"testing"
)

// stallProxy is a loopback TCP proxy in front of a NATS server whose
// client-to-server direction the test can stall: bytes sent meanwhile are
// held (not lost) and flow on when it resumes, as over a congested link.
type stallProxy struct {
	l      net.Listener
	target string
	wg     sync.WaitGroup

	mu      sync.Mutex // guards following
	stalled bool
	resume  chan struct{} // closed when a stall ends
	conns   []net.Conn
}

// newStallProxy starts a proxy to the server at url; the test's cleanup
// stops it.
func newStallProxy(t *testing.T, url string) *stallProxy {
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{l: l, target: u.Host, resume: make(chan struct{})}
	p.wg.Go(p.accept) // exits when the listener closes
	t.Cleanup(p.close)
	return p
}

func (p *stallProxy) URL() string { return "nats://" + p.l.Addr().String() }

func (p *stallProxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(s, c, true) }) // exit when either side closes
		p.wg.Go(func() { p.pipe(c, s, false) })
	}
}

// pipe copies src to dst; the client-to-server direction waits while the
// proxy is stalled.
func (p *stallProxy) pipe(dst, src net.Conn, gated bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && gated {
			p.mu.Lock()
			stalled, resume := p.stalled, p.resume
			p.mu.Unlock()
			if stalled {
				<-resume
			}
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// Stall holds everything clients send from now on until Resume.
func (p *stallProxy) Stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stalled = true
}

// Resume lets held bytes flow again.
func (p *stallProxy) Resume() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled {
		p.stalled = false
		close(p.resume)
		p.resume = make(chan struct{})
	}
}

func (p *stallProxy) close() {
	p.Resume()
	p.l.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
