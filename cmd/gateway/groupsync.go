package main

// Group sync: how --data-sync always stays affordable. The NATS server's
// own sync_always syncs the file after every single record (one disk flush
// per publish: about 1,400 publishes/s on the machine of
// docs/BENCHMARKS.md). When the embedded server listens on no TCP port,
// the engine's in-process connection is the only way anything reaches it,
// and every acknowledgement, reply and delivery the engine sees comes over
// that connection. So the server runs without sync_always (it still writes
// each record to its file before acknowledging it: flush in place), and
// the connection holds back what the server sends until the filesystem
// holding the data directory has been synced after it was read:
//
//	server writes record → server sends ack → syncConn reads it →
//	syncfs(data dir) → the engine reads the ack
//
// A sync covers every write made before it began, so no acknowledgement
// reaches the engine before its record is on disk, as with sync_always;
// but one sync covers every acknowledgement read before it, so a pipeline
// of publishes pays one flush per group instead of one per record.
//
// With --embedded-nats-listen other clients reach the server over TCP,
// past this connection, so the server syncs after every write instead
// (startLocked). Where syncfs is missing (not Linux) the same holds.
//
// Bounds: syncConnPending bytes read and not yet synced, syncConnQueue
// synced groups (each at most syncConnPending bytes) not yet read by the
// client: about 12 MiB per connection at most; past them the server's
// writes to the connection wait (as they would for a slow client).

import (
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

const (
	syncConnRead    = 64 << 10 // bytes read from the server at a time
	syncConnPending = 4 << 20
	syncConnQueue   = 2
)

// groupSyncer syncs the filesystem of a directory for syncConns and counts
// its syncs.
type groupSyncer struct {
	syncs atomic.Int64 // syncs done

	// mu is held, shared, across a sync and, exclusively, by close: a
	// connection's commit goroutine may still be syncing when the server
	// stops.
	mu     sync.RWMutex
	dir    *os.File
	closed bool
}

// newGroupSyncer opens dir for syncing its filesystem; ok is false when
// this platform cannot (the caller then has the server sync every write).
func newGroupSyncer(dir string) (_ *groupSyncer, ok bool, err error) {
	if !canSyncfs {
		return nil, false, nil
	}
	f, err := os.Open(dir)
	if err != nil {
		return nil, false, err
	}
	return &groupSyncer{dir: f}, true, nil
}

func (g *groupSyncer) sync() error {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if g.closed {
		return os.ErrClosed
	}
	g.syncs.Add(1)
	return syncfs(g.dir)
}

// close closes the directory once every sync under way has returned.
func (g *groupSyncer) close() {
	if g == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		g.dir.Close()
	}
}

// groupSyncProvider gives nats.InProcessServer connections to the server
// whose server-to-client bytes pass a sync first.
type groupSyncProvider struct {
	inner interface{ InProcessConn() (net.Conn, error) }
	g     *groupSyncer
}

func (p groupSyncProvider) InProcessConn() (net.Conn, error) {
	c, err := p.inner.InProcessConn()
	if err != nil {
		return nil, err
	}
	return newSyncConn(c, p.g), nil
}

// syncConn is a connection to the in-process server whose reads return
// only bytes a sync began after (see the file comment). Writes go straight
// through. Two goroutines: read takes in what the server sends, as it
// sends it; commit takes everything read so far, syncs, and hands it to
// Read. Whatever read takes in while a sync runs waits for the next one,
// so the syncs' rate adapts to their cost: one per group.
type syncConn struct {
	net.Conn
	g     *groupSyncer
	ready chan []byte   // synced chunks, in order
	done  chan struct{} // closed by Close
	once  sync.Once
	cur   []byte // the chunk Read is handing out

	mu      sync.Mutex
	cond    *sync.Cond // signalled on every change below
	pending []byte     // read, not yet taken by commit
	err     error      // the error that ended read (or commit), once pending is empty
}

func newSyncConn(c net.Conn, g *groupSyncer) *syncConn {
	s := &syncConn{Conn: c, g: g, ready: make(chan []byte, syncConnQueue), done: make(chan struct{})}
	s.cond = sync.NewCond(&s.mu)
	go s.read()   // exits when c is closed (Close closes it)
	go s.commit() // exits once read has and everything is handed over
	return s
}

// read takes in what the server sends, holding at most syncConnPending
// bytes not yet synced (then the server's writes wait).
func (s *syncConn) read() {
	buf := make([]byte, syncConnRead)
	for {
		n, err := s.Conn.Read(buf)
		s.mu.Lock()
		s.pending = append(s.pending, buf[:n]...)
		if err != nil && s.err == nil {
			s.err = err
		}
		for len(s.pending) >= syncConnPending && s.err == nil {
			s.cond.Wait()
		}
		end := s.err != nil
		s.cond.Broadcast()
		s.mu.Unlock()
		if end {
			return
		}
	}
}

// commit syncs and hands what read took in to Read.
func (s *syncConn) commit() {
	defer close(s.ready)
	for {
		s.mu.Lock()
		for len(s.pending) == 0 && s.err == nil {
			s.cond.Wait()
		}
		batch := s.pending
		s.pending = nil
		s.cond.Broadcast()
		s.mu.Unlock()
		if len(batch) == 0 {
			return // read ended and nothing is left
		}
		if err := s.g.sync(); err != nil {
			// Nothing read may reach the client unsynced: end the
			// connection (the client reconnects).
			s.fail(err)
			return
		}
		select {
		case s.ready <- batch:
		case <-s.done:
			s.fail(net.ErrClosed)
			return
		}
	}
}

// fail ends the connection with err.
func (s *syncConn) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.pending = nil
	s.cond.Broadcast()
	s.mu.Unlock()
	s.Conn.Close()
}

func (s *syncConn) Read(p []byte) (int, error) {
	for len(s.cur) == 0 {
		b, ok := <-s.ready
		if !ok {
			s.mu.Lock()
			defer s.mu.Unlock()
			return 0, s.err
		}
		s.cur = b
	}
	n := copy(p, s.cur)
	s.cur = s.cur[n:]
	return n, nil
}

func (s *syncConn) Close() error {
	s.once.Do(func() { close(s.done) })
	return s.Conn.Close()
}

// SetDeadline and SetReadDeadline leave the reads without a deadline: read
// takes in for the client at any time, so a deadline the client set for
// one exchange (nats.go's handshake) could end the connection later.
func (s *syncConn) SetDeadline(t time.Time) error   { return s.Conn.SetWriteDeadline(t) }
func (s *syncConn) SetReadDeadline(time.Time) error { return nil }
