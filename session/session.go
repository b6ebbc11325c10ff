package session

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
)

// Handler handles the inbound frames of a WebSocket session (a one-way
// session has none).
type Handler interface {
	// HandleFrame is called on the reader goroutine for each valid UTF-8
	// text frame. data is only valid during the call.
	HandleFrame(s *Session, data []byte)
}

// Stats is a snapshot of a session's counters.
type Stats struct {
	Queued int // items queued now: control, reliable and message
	// ControlBytes is the bytes of the control items queued now.
	ControlBytes int
	Sent         uint64 // JSON objects written: messages, gaps, control frames
	Writes       uint64 // text frames written to the socket
	BytesOut     uint64 // payload bytes written
	BytesIn      uint64 // payload bytes of the text frames handled
	// Reading is the bytes of buffers held by the inbound message being
	// read beyond the small pooled buffer every read starts with.
	Reading int64
	Dropped uint64 // messages dropped by the queue
	Gaps    uint64 // gap frames written
}

// Session is one connection of a Switchyard client: a WebSocket (Accept,
// New) or a one-way Transport (NewOneWay).
//
// All methods are safe for concurrent use by multiple goroutines, except
// Run and Start, one of which is called once.
type Session struct {
	id   string
	opts Options
	conn *websocket.Conn // nil when the socket is injected (tests) or one-way
	// oneWayRead is the one-way transport's reader (Transport.Read), nil
	// when none.
	oneWayRead func()
	sock       socket
	q          *Queue

	running atomic.Bool
	// ctlDue is set by kick for the writer, with a signal on the queue's
	// Ready channel (which wakes it for queued items too): look at the
	// control state (a keepalive's result below, the end steps).
	ctlDue   atomic.Bool
	pingDone atomic.Pointer[pingResult] // a keepalive's result, for the writer (pingOnce)

	// writer is the writer goroutine's state (writerNotStarted, ...; see
	// wake).
	writer atomic.Int32
	// pingTimer sets pingDue and kicks the writer every PingInterval
	// (pingDue beside writer, where it takes no room: a Session of more
	// than 632 bytes is in the 704-byte class with its malloc header).
	pingDue   atomic.Bool
	pingTimer *time.Timer

	// Owned by the writer goroutine.
	// watchdog is the write timeout, reused while the writer runs, made
	// by its first write and let go when it parks (guardedWrite).
	watchdog *time.Timer
	delay    *time.Timer // write coalescing (coalesce.go), made on first use
	pinging  bool        // a keepalive ping is in flight
	// busy, quickRuns and prevRun decide whether the writer parks (see
	// residentWindow).
	busy      atomic.Bool // atomic for tests only
	quickRuns int
	prevRun   time.Time

	// deferral is the session's own Deferral (deferral.go); deferred is
	// set while the session is listed in some Deferral.
	deferral Deferral
	deferred atomic.Bool

	// bursts counts the starts and ends of the bursts of input of a
	// session accepted by Accept: odd while one is read and handled.
	// caughtUp, when set, is closed at the end of the current burst, for
	// a keepalive ping whose pong may wait behind it (ownPing).
	bursts   atomic.Uint32
	caughtUp atomic.Pointer[chan struct{}]

	// Owned by the reader goroutine.
	idle idleWait // zero unless Accept took the lazy path
	// msgTimer is the message timeout, reused while the reader runs,
	// made by its first frame and let go when it parks its socket with
	// no message under way (startMessageTimer).
	msgTimer *time.Timer
	msgTimed bool // msgTimer runs (startMessageTimer)
	// oneWay marks a NewOneWay session (set before Run): Run waits for
	// its writer to have closed the transport (stepWriterEnded) instead
	// of reading frames. Here, beside msgTimed, where it takes no room.
	oneWay  bool
	chunks  []*[]byte // the chunks of the long message being read
	reading atomic.Int64

	// Parking (idlepoll_linux.go): the reader's socket as the idle poller
	// parks it, resumed by Session.resume.
	parkState
	// readParked: a one-way transport's reader parked (ReadParked); it
	// ends the session itself (ReadDone).
	readParked atomic.Bool
	// What resume needs to run the reader again; set by Start.
	runCtx   context.Context
	runH     Handler
	runStop  func() bool
	runEnded func(error)

	// wg counts the writer, the keepalive ping and the watchdog and
	// message timer callbacks.
	wg sync.WaitGroup

	writes, sent, bytesOut, bytesIn atomic.Uint64

	// ends holds the end steps taken (stepClosing, ...; ends.go), set
	// under mu.
	ends atomic.Uint32
	mu   sync.Mutex // guards end
	// end is the close state and the end steps' waiters, made on first
	// use (ends.go).
	end *endState
}

// Accept upgrades the request with websocket.Accept and acceptOpts and
// returns a session; nothing runs until Run. On error the response has been
// written.
func Accept(w http.ResponseWriter, r *http.Request, acceptOpts *websocket.AcceptOptions, id string, opts Options) (*Session, error) {
	opts = opts.withDefaults()             // check EncodeGap before upgrading
	hj := &lazyHijacker{ResponseWriter: w} // see lazyconn.go
	// Pongs the library reads are reported for the session's own
	// keepalive (keepalive.go).
	pongs := make(chan struct{}, 1)
	ao := websocket.AcceptOptions{}
	if acceptOpts != nil {
		ao = *acceptOpts
	}
	next := ao.OnPongReceived
	ao.OnPongReceived = func(ctx context.Context, p []byte) {
		pongSignal(pongs)
		if next != nil {
			next(ctx, p)
		}
	}
	c, err := websocket.Accept(hj, r, &ao)
	if err != nil {
		return nil, fmt.Errorf("session: accept: %w", err)
	}
	// Without compression the session writes its text frames itself
	// (lazyWriter.writeText); with it, through the library.
	direct := hj.lw != nil && !strings.Contains(w.Header().Get("Sec-WebSocket-Extensions"), "permessage-deflate")
	s := newSession(id, opts, connSocket(c, hj.lw, direct, pongs))
	s.conn = c
	if hj.lr != nil {
		s.idle = idleWait{lr: hj.lr, br: hj.br, mu: new(sync.Mutex), pongs: pongs}
		if ao.OnPingReceived == nil {
			s.idle.lw = hj.lw
		}
		// The session writes its keepalive pings itself, compressed or
		// not (control frames never are), and takes their pongs: the
		// keepalive ends with the reader, and spares a reader busy in
		// its handler (keepalive.go).
		lw := hj.lw
		s.sock.ping = func(ctx context.Context) error { return s.ownPing(ctx, lw) }
		hj.lr.flush = &s.deferral
		s.parkState.rc, s.parkState.onReady = hj.lr.rc, s.resume
		if lc, ok := hj.conn.(*lazyConn); ok {
			lc.ps.Store(&s.parkState) // resumes a parked reader (idlepoll_linux.go)
		}
	}
	return s, nil
}

// New wraps an already accepted connection (for tests and embedding);
// nothing runs until Run. New panics if opts.EncodeGap is nil.
func New(conn *websocket.Conn, id string, opts Options) *Session {
	s := newSession(id, opts, connSocket(conn, nil, false, nil))
	s.conn = conn
	return s
}

func newSession(id string, opts Options, sock socket) *Session {
	opts = opts.withDefaults()
	s := &Session{
		id:   id,
		opts: opts,
		sock: sock,
		q:    NewQueue(opts),
	}
	s.deferral.maxWait = opts.MaxDeferredWake
	return s
}

// ID returns the session's ID.
func (s *Session) ID() string { return s.id }

// Done returns a channel that is closed when the session has ended (when
// Run returns).
func (s *Session) Done() <-chan struct{} { return s.endChan(stepDone) }

// Closing returns a channel that is closed once the session's close has
// been requested (by Close, by the peer or by a limit), before it ends.
func (s *Session) Closing() <-chan struct{} { return s.endChan(stepClosing) }

// Dropped returns how many messages the session's queue has dropped so
// far: the Item.Dropped of a Fallback item whose Frame is chosen now.
func (s *Session) Dropped() uint64 { return s.q.drops.Load() }

// Send queues a message or control item without blocking and reports
// whether it was queued: false when it was dropped, when the session is
// closing, or when the queue overflowed, which closes the session with 1013
// (or 1008 when unread control items fill their bytes or count bound).
func (s *Session) Send(it Item) bool {
	out := s.q.Push(it)
	s.pushed(out)
	return out == Queued
}

// pushed acts on what the queue did with an item: it wakes the writer for
// a queued item or a gap, or closes the session past a bound.
func (s *Session) pushed(out Outcome) {
	switch out {
	case Queued, Dropped: // a drop may leave a gap to write
		s.wake()
	case Overflow:
		s.closeWith(websocket.StatusTryAgainLater, "slow consumer", false, ErrSlowConsumer)
	case ControlFull:
		s.closeWith(websocket.StatusPolicyViolation, "too many unread replies", false, ErrControlOverflow)
	}
}

// Close stops accepting items, lets the writer flush what is queued within
// Options.FlushTimeout and then closes the connection with code and reason
// (at most 123 bytes are sent). It does not wait; Done is closed when the
// session has ended. Only the first Close (or internal close) counts.
func (s *Session) Close(code websocket.StatusCode, reason string) {
	s.closeWith(code, reason, true, nil)
}

// Cause reports why the session ended, once Done is closed (nil before):
// one of this package's sentinel errors (wrapped) when the session ended
// the connection for a bound, the peer's close frame or the read error
// when the peer or the network ended it, and nil when Close ended it.
// Unlike Run's result, a normal or going-away close of the peer is not
// reported as nil.
func (s *Session) Cause() error {
	if !s.reached(stepDone) {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.causeLocked()
}

// closeWith requests a close; cause is what Run will return.
func (s *Session) closeWith(code websocket.StatusCode, reason string, flush bool, cause error) {
	s.mu.Lock()
	e := s.endLocked()
	if e.closing {
		s.mu.Unlock()
		return
	}
	e.closing = true
	e.code, e.reason, e.flush = code, truncateReason(reason), flush
	if !e.causeSet {
		e.causeSet, e.cause = true, cause
	}
	s.mu.Unlock()
	s.q.Close()
	s.take(stepClosing)
	s.kick()
}

// closeRequested reports whether closeWith has begun: true a little
// before the session takes stepClosing.
func (s *Session) closeRequested() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end != nil && s.end.closing
}

// setCause records why the session ended unless a reason is known already.
func (s *Session) setCause(err error) {
	s.mu.Lock()
	if e := s.endLocked(); !e.causeSet {
		e.causeSet, e.cause = true, err
	}
	s.mu.Unlock()
}

// truncateReason cuts reason to what a close frame can carry, on a UTF-8
// boundary.
func truncateReason(reason string) string {
	const maxReason = 123
	if len(reason) <= maxReason {
		return reason
	}
	n := maxReason
	for n > 0 && !utf8.RuneStart(reason[n]) {
		n--
	}
	return reason[:n]
}

// Parked reports whether the session's reader is parked in the idle
// poller now (idlepoll_linux.go): for a one-way session, its transport's
// reader in the IdleSocket made in it (NewIdleSocketIn); another
// IdleSocket aside.
func (s *Session) Parked() bool { return s.parkState.parked.Load() }

// Stats returns a snapshot of the session's counters.
func (s *Session) Stats() Stats {
	qs := s.q.Stats()
	return Stats{
		Queued:       qs.Queued,
		ControlBytes: qs.ControlBytes,
		Sent:         s.sent.Load(),
		Writes:       s.writes.Load(),
		BytesOut:     s.bytesOut.Load(),
		BytesIn:      s.bytesIn.Load(),
		Reading:      s.reading.Load(),
		Dropped:      qs.Dropped,
		Gaps:         qs.Gaps,
	}
}

// Run starts the writer goroutine and runs the reader loop on the calling
// goroutine, handing each text frame to h, until the connection ends. It
// returns after every goroutine the session started has exited, and then
// closes Done.
//
// When ctx is done the session closes as by Close(StatusGoingAway, ...).
// Run returns nil when the session ended by Close or by the peer closing
// with status 1000 or 1001; otherwise the error that ended it, wrapping
// ErrSlowConsumer, ErrBinaryFrame, ErrInvalidUTF8, ErrWriteTimeout or an
// error of the websocket package (websocket.ErrMessageTooBig for a frame over
// ReadLimit, a websocket.CloseError for another close status).
func (s *Session) Run(ctx context.Context, h Handler) error {
	var err error
	ended := make(chan struct{})
	if serr := s.Start(ctx, h, func(e error) { err = e; close(ended) }); serr != nil {
		return serr
	}
	<-ended
	return err
}

// Start is Run without holding the calling goroutine: it starts the
// session and returns (ErrRunTwice if it was started before); the session
// runs on goroutines of its own and, once it has ended, calls ended with
// what Run would have returned, after every other goroutine it started has
// exited and Done is closed. ended runs on the session's last goroutine,
// which exits when it returns.
//
// An idle session accepted by Accept over a plain TCP socket holds no
// goroutine on Linux: its socket waits in the idle poller's epoll set,
// and a goroutine is started to read and handle each burst of input
// (idlepoll_linux.go, reader.go). Elsewhere it is one goroutine that has
// never run anything but the wait for its socket, on the runtime's
// smallest stack (2 KiB), the bursts read on goroutines of their own. A
// session over TLS keeps a reader goroutine waiting in its read: crypto/tls
// may hold a record the socket no longer shows as readable.
func (s *Session) Start(ctx context.Context, h Handler, ended func(error)) error {
	if s.running.Swap(true) {
		return ErrRunTwice
	}
	stop := s.runStart(ctx)
	// The reader needs no deadline: it is unblocked by the writer closing
	// the connection (and its reads allocate none).
	s.runCtx, s.runH, s.runStop, s.runEnded = context.WithoutCancel(ctx), h, stop, ended
	go s.serve()
	return nil
}

// serve is the session's reader goroutine, started fresh by Start. It
// returns when the session has ended or, on Linux, when the reader has
// parked its socket in the idle poller (resume goes on from there).
func (s *Session) serve() {
	var err error
	if s.oneWay {
		if s.readOneWay() && s.readParked.Load() {
			return // the reader ends the session (ReadDone)
		}
		<-s.endChan(stepWriterEnded) // the writer closes the transport once the session ends
	} else {
		err = s.readLoop(s.runCtx, s.runH)
		if err == errParked {
			return
		}
		s.flushDeferred()
	}
	s.runEnded(s.runEnd(err, s.runStop))
}

// runStart is the start of Run: the read limit, the close on ctx, the
// writer. It returns the AfterFunc's stop.
func (s *Session) runStart(ctx context.Context) (stop func() bool) {
	if s.conn != nil {
		s.conn.SetReadLimit(s.opts.ReadLimit)
	}
	stop = func() bool { return false }
	if ctx.Done() != nil { // a context that is never done costs nothing
		s.wg.Add(1) // for the AfterFunc below
		stop = context.AfterFunc(ctx, func() {
			defer s.wg.Done()
			s.Close(websocket.StatusGoingAway, "going away")
		})
	}
	s.startWriter()
	return stop
}

// runEnd is the end of Run once the reader has returned with err: it waits
// for everything the session started, closes Done and returns what Run
// does.
func (s *Session) runEnd(err error, stop func() bool) error {
	defer s.take(stepDone)
	s.setCause(err)
	s.take(stepReadEnded)
	if p := s.idle.pongs; p != nil {
		pongSignal(p) // ends a keepalive ping waiting for its pong (ownPing)
	}
	s.kick()
	if stop() {
		s.wg.Done() // the AfterFunc will not run
	}
	// The kick above makes the writer close the connection and finish.
	// Waiting for that first orders before Wait the wg.Add of every wake
	// that started a writer on another goroutine (a Close, a Send): each
	// writer starts after the one before it parked, and the last takes
	// stepWriterEnded.
	<-s.endChan(stepWriterEnded)
	s.wg.Wait()
	s.q.Close() // Send refuses items nobody will write

	s.mu.Lock()
	err = s.causeLocked()
	s.mu.Unlock()
	switch websocket.CloseStatus(err) {
	case websocket.StatusNormalClosure, websocket.StatusGoingAway:
		return nil
	}
	return err
}
