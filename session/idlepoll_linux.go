//go:build linux

package session

// The idle poller: no goroutine for an idle connection.
//
// A session accepted by Accept whose reader has nothing more to read
// registers its socket in one epoll set of the process with EPOLLONESHOT
// (park) and its reader goroutine exits; the idle poller, one goroutine
// for every parked socket of the process, starts the reader again on a
// fresh goroutine (Session.resume) when the socket becomes readable, has
// hung up or has failed. Closing the connection (lazyConn.Close: Close,
// Shutdown, a keepalive or write timeout) resumes a parked reader too,
// whose read then fails and ends the session as it would have without
// the poller. The runtime's own netpoller keeps the descriptor as well:
// one descriptor may be in several epoll sets, and reads still go through
// the net.Conn.
//
// The epoll set and its eventfd are made on first use and kept for the
// life of the process; the poller goroutine runs only while some socket
// is parked and exits when the last one is resumed. It waits for the
// epoll set in the runtime's netpoller (an epoll set is itself pollable),
// not in a blocking epoll_wait, so that it holds no thread and is woken
// as a reader goroutine would be.
//
// Should the epoll set ever fail a wait, the poller falls back: it
// resumes every parked session (their readers then wait on goroutines of
// their own, as without the poller), parks nothing from then on, and logs
// that once (fallBack).
//
// Each parked socket holds one slot of the poller's table (16 bytes and a
// free-list entry) in place of a goroutine and its stack (2 KiB at
// least). An event names its slot and the generation the slot was taken
// with, so that an event that arrives after its session was resumed by a
// close is recognized and dropped (idlepoll_table.go, which also gives
// the table's memory back after a peak).

import (
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// idlePoller is the process's epoll set of parked sockets. Safe for
// concurrent use.
type idlePoller struct {
	epfd, evfd int // the epoll set; an eventfd in it that wakes the loop
	// ep is the epoll set as a file of the runtime's netpoller, which
	// keeps it in its own epoll set: the loop waits for it to become
	// readable there, holding no thread, and then takes its events
	// without waiting.
	ep     *os.File
	epRead syscall.RawConn

	// Owned by the loop goroutine (one runs at a time): the events of
	// the last look, and the look, made once.
	events [128]unix.EpollEvent
	n      int
	werr   error
	look   func(uintptr) bool

	// failed is set once the poller has fallen back: nothing parks.
	failed atomic.Bool
	// fallbacks counts the fallbacks (at most one per process).
	fallbacks atomic.Uint64
	// failWait, when set, is the error the loop's next wait reports
	// instead of the epoll set's (a test's seam).
	failWait atomic.Pointer[error]

	mu      sync.Mutex // guards following; taken after no other lock
	table   slotTable  // the parked sockets (idlepoll_table.go)
	running bool       // the loop goroutine runs
}

var (
	pollerOnce sync.Once
	poller     *idlePoller // nil when epoll is not available
)

// evWake is the data of the eventfd's event: no slot has it.
const evWake = -1

func getPoller() *idlePoller {
	pollerOnce.Do(func() {
		epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
		if err != nil {
			return
		}
		evfd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			_ = unix.Close(epfd)
			return
		}
		ev := unix.EpollEvent{Events: unix.EPOLLIN, Fd: evWake}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, evfd, &ev); err != nil {
			_ = unix.Close(epfd)
			_ = unix.Close(evfd)
			return
		}
		ep, rc := epollFile(epfd) // closes epfd when it fails
		if rc == nil {
			_ = unix.Close(evfd)
			return
		}
		p := &idlePoller{epfd: epfd, evfd: evfd, ep: ep, epRead: rc}
		p.look = func(uintptr) bool {
			p.n, p.werr = unix.EpollWait(p.epfd, p.events[:], 0)
			if p.werr == unix.EINTR {
				p.n, p.werr = 0, nil
			}
			return p.n > 0 || p.werr != nil
		}
		poller = p
	})
	return poller
}

// epollFile makes the epoll set epfd a file of the runtime's netpoller;
// it closes epfd and returns nils when it cannot.
func epollFile(epfd int) (*os.File, syscall.RawConn) {
	if err := unix.SetNonblock(epfd, true); err != nil {
		_ = unix.Close(epfd)
		return nil, nil
	}
	f := os.NewFile(uintptr(epfd), "session-idle-poll")
	// A file the netpoller does not watch takes no deadline.
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		_ = f.Close()
		return nil, nil
	}
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, nil
	}
	return f, rc
}

// park registers the session's socket with the idle poller and reports
// whether it did: the reader goroutine must then return, and resume runs
// the reader again. It reports false when parking is not available or
// off, or the socket is closed (the caller reads on and meets the end).
func (s *Session) park() bool {
	return !s.opts.NoIdlePark && s.parkState.arm()
}

// arm registers the socket with the idle poller (see Session.park).
func (ps *parkState) arm() bool {
	p := getPoller()
	if p == nil {
		return false
	}
	slot, gen, ok := p.take(ps)
	if !ok {
		return false
	}
	added := ps.added
	op := unix.EPOLL_CTL_MOD
	if !added {
		op = unix.EPOLL_CTL_ADD
	}
	// The reader's fields are set before parked: once the socket is armed
	// an event may resume the reader at once, on another goroutine.
	ps.slot, ps.added = slot, true
	ps.parked.Store(true)
	var cerr error
	err := ps.rc.Control(func(fd uintptr) {
		ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: slot, Pad: int32(gen)}
		cerr = unix.EpollCtl(p.epfd, op, int(fd), &ev)
	})
	if err == nil && cerr == nil {
		if !p.failed.Load() {
			return true
		}
		// The poller fell back meanwhile: its sweep resumed the reader,
		// or missed it and the reader reads on.
		if ps.parked.CompareAndSwap(true, false) {
			p.release(slot)
			return false
		}
		return true
	}
	// Not armed: closed, or the epoll set refused it.
	if ps.parked.CompareAndSwap(true, false) {
		ps.added = added
		p.release(slot)
		return false
	}
	return true // a close resumed the reader already (unpark)
}

// unpark resumes the reader if it is parked: its connection has just been
// closed, which removes the socket from the epoll set without an event.
func (ps *parkState) unpark() {
	if ps.parked.CompareAndSwap(true, false) {
		poller.release(ps.slot)
		go ps.onReady()
	}
}

// take gives s a slot; ok is false when the poller has fallen back.
func (p *idlePoller) take(s *parkState) (slot int32, gen uint32, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failed.Load() {
		return 0, 0, false
	}
	slot, gen = p.table.take(s)
	if !p.running {
		p.running = true
		go p.loop()
	}
	return slot, gen, true
}

// release frees slot; the next session to take it gets a new generation.
func (p *idlePoller) release(slot int32) {
	p.mu.Lock()
	p.table.release(slot)
	last := p.table.used == 0
	p.mu.Unlock()
	if last {
		var one = [8]byte{1}
		_, _ = unix.Write(p.evfd, one[:]) // the loop looks whether to exit
	}
}

// claim returns the socket parked in slot with generation gen, or nil
// when it was resumed already.
func (p *idlePoller) claim(slot int32, gen uint32) *parkState {
	p.mu.Lock()
	s := p.table.get(slot, gen)
	p.mu.Unlock()
	if s == nil {
		return nil
	}
	if !s.parked.CompareAndSwap(true, false) {
		return nil // a close resumed it
	}
	p.release(slot)
	return s
}

// loop waits for parked sockets to become readable and resumes their
// sessions. It exits once no socket is parked, or when a wait fails
// (fallBack).
func (p *idlePoller) loop() {
	for {
		err := p.epRead.Read(p.look)
		if err == nil {
			err = p.werr
		}
		if e := p.failWait.Swap(nil); e != nil {
			err = *e
		}
		if err != nil {
			p.fallBack(err)
			return
		}
		for _, ev := range p.events[:max(p.n, 0)] {
			if ev.Fd == evWake {
				var b [8]byte
				_, _ = unix.Read(p.evfd, b[:])
				continue
			}
			if s := p.claim(ev.Fd, uint32(ev.Pad)); s != nil {
				go s.onReady()
			}
		}
		p.mu.Lock()
		if p.table.used == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// fallBack stops parking for good after the epoll set failed a wait
// (which nothing is known to cause: the set is never closed): every
// parked session is resumed, its reader then waiting on a goroutine of
// its own as without the poller, and park refuses from then on. It runs
// on the loop goroutine, which then exits.
func (p *idlePoller) fallBack(err error) {
	// failed is set before the table is swept: a park that armed its
	// socket after the sweep looked sees it and unparks itself.
	p.failed.Store(true)
	p.fallbacks.Add(1)
	slog.Error("session: the idle poller failed; idle sessions wait on goroutines of their own from now on", "err", err)
	p.mu.Lock()
	var resume []*parkState
	for _, sl := range p.table.slots {
		if sl.s != nil {
			resume = append(resume, sl.s)
		}
	}
	p.running = false
	p.mu.Unlock()
	for _, s := range resume {
		if s.parked.CompareAndSwap(true, false) {
			p.release(s.slot)
			go s.onReady()
		}
	}
}

// IdlePollerStats reports the sockets parked in the idle poller now and
// how many times it has fallen back to a goroutine per idle session (at
// most once per process: see fallBack).
func IdlePollerStats() (parked int, fallbacks uint64) {
	p := getPoller()
	if p == nil {
		return 0, 0
	}
	p.mu.Lock()
	parked = p.table.used
	p.mu.Unlock()
	return parked, p.fallbacks.Load()
}
