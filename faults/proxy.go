package faults

// The TCP proxy: one listener on a loopback port forwarding every
// connection to one target, with faults applied per direction.

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Dir is a direction through a Proxy.
type Dir int

const (
	// Up is from the connecting side (the client) to the target.
	Up Dir = iota
	// Down is from the target to the client.
	Down
)

// String names the direction.
func (d Dir) String() string {
	if d == Up {
		return "up"
	}
	return "down"
}

// Faults is what a Proxy does to the bytes of one direction.
type Faults struct {
	// Cut holds every byte (a black hole: nothing is lost, nothing
	// arrives) until the direction is healed. Connections stay open, and
	// new ones are accepted and connected to the target, as with a
	// partition that drops packets: the peers see silence, not a reset.
	Cut bool
	// Latency delays every chunk by this much, keeping order and
	// throughput (chunks in flight do not wait for each other).
	Latency time.Duration
	// Drop is the fraction (0 to 1) of chunks that reset their connection
	// instead of being forwarded: TCP cannot drop bytes without stalling,
	// so a lossy link is a link whose connections are cut at random.
	Drop float64
}

// chunkQueue bounds the chunks one direction of one connection holds (read
// from one side, not yet written to the other): past it the proxy stops
// reading, and TCP pushes back on the sender.
const chunkQueue = 256

// chunkSize is the largest read.
const chunkSize = 32 << 10

// Proxy forwards the connections made to its loopback address to a target
// address. Its methods are safe for concurrent use.
type Proxy struct {
	name   string
	target string
	ln     net.Listener

	mu     sync.Mutex // guards the fields below
	faults [2]Faults
	wake   chan struct{} // closed and replaced on every change of faults
	conns  map[*proxyConn]struct{}
	closed bool
	resets int // connections reset by Drop or Reset

	wg sync.WaitGroup // the accept loop and every connection's pumps
}

// NewProxy listens on a free loopback port and forwards to target; name
// appears in errors. Close stops it.
func NewProxy(name, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faults: proxy %s: %w", name, err)
	}
	p := &Proxy{name: name, target: target, ln: ln, wake: make(chan struct{}), conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept() // exits when Close closes the listener
	return p, nil
}

// Addr is the proxy's address, host:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Name is the name the proxy was given.
func (p *Proxy) Name() string { return p.name }

// Set replaces the faults of direction d.
func (p *Proxy) Set(d Dir, f Faults) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.faults[d] = f
	close(p.wake)
	p.wake = make(chan struct{})
}

// Get returns the faults of direction d.
func (p *Proxy) Get(d Dir) Faults {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.faults[d]
}

// Cut cuts direction d, keeping its latency and drop.
func (p *Proxy) Cut(d Dir) {
	f := p.Get(d)
	f.Cut = true
	p.Set(d, f)
}

// CutBoth cuts both directions.
func (p *Proxy) CutBoth() { p.Cut(Up); p.Cut(Down) }

// Heal removes every fault of both directions; held bytes flow again.
func (p *Proxy) Heal() { p.Set(Up, Faults{}); p.Set(Down, Faults{}) }

// Reset closes every connection open through the proxy at once with a TCP
// reset, as a peer crashing or a middlebox dropping its state would; new
// connections are accepted as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.reset()
	}
}

// Silence makes every connection open now go silent both ways for good:
// what either side sends is read and discarded, and nothing is closed or
// passed on, as with a NAT that forgot the flow or a peer that slept.
// Connections accepted later forward as before. It returns how many
// connections it silenced.
func (p *Proxy) Silence() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.silenced.Store(true)
	}
	return len(p.conns)
}

// Conns is the number of connections open through the proxy.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// Resets is the number of connections the proxy has reset (Drop, Reset).
func (p *Proxy) Resets() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resets
}

// Close stops accepting, closes every connection and waits for the
// proxy's goroutines to end.
func (p *Proxy) Close() error {
	p.mu.Lock()
	p.closed = true
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
	return err
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		// The target is on loopback: dialling it does not wait on the
		// faults (a cut link still connects, and then hears nothing).
		target, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			// The target is down: the client sees its connection
			// refused, as it would without the proxy.
			resetConn(client)
			continue
		}
		c := &proxyConn{p: p, sides: [2]net.Conn{client, target}, done: make(chan struct{})}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			client.Close()
			target.Close()
			return
		}
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		for _, d := range []Dir{Up, Down} {
			ch := make(chan chunk, chunkQueue)
			p.wg.Add(2)
			go c.read(d, ch)  // exits at EOF or when c closes
			go c.write(d, ch) // exits when ch closes or c closes
		}
	}
}

// resetConn closes a TCP connection with a reset rather than a FIN.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// chunk is bytes read from one side at a time.
type chunk struct {
	data []byte
	at   time.Time
}

// proxyConn is one connection through the proxy: sides[0] the client,
// sides[1] the target. Up reads sides[0] and writes sides[1].
type proxyConn struct {
	p     *Proxy
	sides [2]net.Conn

	silenced atomic.Bool // Silence: discard both ways, pass no end on

	once     sync.Once
	done     chan struct{} // closed when the connection closes
	mu       sync.Mutex    // guards finished
	finished int           // directions whose source ended and were drained
}

func (c *proxyConn) src(d Dir) net.Conn { return c.sides[d] }
func (c *proxyConn) dst(d Dir) net.Conn { return c.sides[1-d] }

func (c *proxyConn) close() { c.shut(false) }
func (c *proxyConn) reset() { c.shut(true) }

func (c *proxyConn) shut(reset bool) {
	c.once.Do(func() {
		close(c.done)
		// Counted before the sides close, so that a client that sees the
		// reset sees it counted too.
		c.p.mu.Lock()
		delete(c.p.conns, c)
		if reset {
			c.p.resets++
		}
		c.p.mu.Unlock()
		for _, s := range c.sides {
			if reset {
				resetConn(s)
			} else {
				_ = s.Close()
			}
		}
	})
}

// read reads direction d's source into ch until it ends.
func (c *proxyConn) read(d Dir, ch chan<- chunk) {
	defer c.p.wg.Done()
	defer close(ch)
	for {
		buf := make([]byte, chunkSize)
		n, err := c.src(d).Read(buf)
		if n > 0 {
			select {
			case ch <- chunk{data: buf[:n], at: time.Now()}:
			case <-c.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// write writes direction d's chunks to its destination, applying the
// faults as they are when each chunk is due.
func (c *proxyConn) write(d Dir, ch <-chan chunk) {
	defer c.p.wg.Done()
	for {
		var ck chunk
		var ok bool
		select {
		case ck, ok = <-ch:
		case <-c.done:
			return
		}
		if c.silenced.Load() {
			if !ok {
				return // a silenced link passes no end on
			}
			continue
		}
		if !ok {
			c.sourceEnded(d)
			return
		}
		f, live := c.await(d, ck.at)
		if !live {
			return
		}
		if f.Drop > 0 && rand.Float64() < f.Drop {
			c.reset()
			return
		}
		if _, err := c.dst(d).Write(ck.data); err != nil {
			c.close()
			return
		}
	}
}

// await waits until a chunk read at `at` may be written in direction d:
// the direction is not cut and its latency has passed. It returns the
// faults then, and false if the connection closed meanwhile.
func (c *proxyConn) await(d Dir, at time.Time) (Faults, bool) {
	for {
		c.p.mu.Lock()
		f, wake := c.p.faults[d], c.p.wake
		c.p.mu.Unlock()
		if f.Cut {
			select {
			case <-wake:
				continue
			case <-c.done:
				return f, false
			}
		}
		wait := time.Until(at.Add(f.Latency))
		if wait <= 0 {
			return f, true
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-wake: // the latency or the cut changed: look again
		case <-c.done:
			t.Stop()
			return f, false
		}
		t.Stop()
	}
}

// sourceEnded passes direction d's end on (a half close) and closes the
// connection once both directions have ended.
func (c *proxyConn) sourceEnded(d Dir) {
	if tc, ok := c.dst(d).(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	c.mu.Lock()
	c.finished++
	both := c.finished == 2
	c.mu.Unlock()
	if both {
		c.close()
	}
}
