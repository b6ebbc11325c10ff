package main

// This file is the second target of the generator, --target nats: a NATS
// server's WebSocket listener, spoken to in NATS's client protocol (INFO,
// CONNECT, SUB, PUB, MSG, PING, PONG) over binary WebSocket frames of the
// same WebSocket library, so that the figures of both targets come from one
// generator with the same payloads, timestamps and histograms.
//
// It covers the fan-out scenarios: fanout (with --rate 0, the burst case)
// and idle. The mapping:
//
//   - A subscriber is one connection with one SUB of its topic's subject;
//     the PONG to the PING sent after CONNECT and SUB stands for the
//     gateway's "subscribed" reply.
//   - A publisher sends one PUB per WebSocket frame, and a PING in the
//     frame of every --window/4-th PUB. Core NATS confirms no publish, but
//     a server answers a connection's PING after it has processed (fanned
//     out) every PUB before it, so a PONG confirms the PUBs before its PING;
//     at most --window PUBs are unconfirmed, as at most --window publishes
//     await their "published" reply on the Switchyard target.
//   - A delivery is a MSG whose payload is the same JSON string the
//     Switchyard target publishes ("T" and 19 digits of send time);
//     latency is measured from it the same way.
//
// NATS has no offsets, so duplicates and gaps are not detected: a run
// reports what arrived against what was confirmed sent.
//
// A NATS server's protocol messages are not aligned with WebSocket frames
// (one message may span frames, one frame may hold many), so the reader
// parses a byte stream: frames are appended to a reused buffer and complete
// messages are cut from its front.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/coder/websocket"
)

// Targets of the generator.
const (
	targetSwitchyard = "switchyard"
	targetNATS       = "nats"
)

// natsScenarios are the scenarios --target nats runs.
var natsScenarios = []string{"fanout", "idle"}

var (
	natsMSG  = []byte("MSG ")
	natsPING = []byte("PING")
	natsPONG = []byte("PONG")
	natsERR  = []byte("-ERR")
	crlf     = []byte("\r\n")
	// natsMark is where the send time starts in a payload.
	natsMark = []byte(`"` + payloadMark)
)

// natsConnect is the CONNECT a connection sends: no +OK acknowledgements,
// no echo of a connection's own publishes.
const natsConnect = `CONNECT {"verbose":false,"pedantic":false,"protocol":1,"echo":false,"name":"switchyard-loadtest","lang":"go","version":"0"}` + "\r\n"

// natsReader parses the protocol stream of one connection. It is owned by
// one goroutine.
type natsReader struct {
	conn *websocket.Conn
	buf  []byte // unparsed bytes
	tmp  bytes.Buffer
}

// natsHandler is called for every protocol message but INFO and +OK:
// kind is MSG, PING, PONG or -ERR; for a MSG, subject and payload are set,
// for -ERR the line. The slices are valid only during the call; returning
// false stops the reader.
type natsHandler func(kind, subject, payload []byte) bool

// run reads until the connection fails or h returns false. PINGs from the
// server are answered here, then passed to h.
func (nr *natsReader) run(ctx context.Context, h natsHandler) error {
	for {
		ok, err := nr.parse(ctx, h)
		if err != nil || !ok {
			return err
		}
		if err := nr.fill(ctx); err != nil {
			return err
		}
	}
}

// fill appends the next frame to buf.
func (nr *natsReader) fill(ctx context.Context) error {
	_, r, err := nr.conn.Reader(ctx)
	if err != nil {
		return err
	}
	nr.tmp.Reset()
	if _, err := nr.tmp.ReadFrom(r); err != nil {
		return err
	}
	nr.buf = append(nr.buf, nr.tmp.Bytes()...)
	return nil
}

// parse handles the complete messages in buf and keeps the rest.
func (nr *natsReader) parse(ctx context.Context, h natsHandler) (bool, error) {
	b := nr.buf
	defer func() {
		n := copy(nr.buf, b)
		nr.buf = nr.buf[:n]
	}()
	for {
		i := bytes.Index(b, crlf)
		if i < 0 {
			return true, nil
		}
		line := b[:i]
		if !bytes.HasPrefix(line, natsMSG) {
			b = b[i+2:] // line stays valid: buf is not written during the call
		}
		switch {
		case bytes.HasPrefix(line, natsMSG):
			// MSG <subject> <sid> [reply-to] <#bytes>
			f := bytes.Fields(line[len(natsMSG):])
			if len(f) < 3 {
				return false, fmt.Errorf("nats: bad MSG line %q", line)
			}
			n, ok := parseInt(f[len(f)-1])
			if !ok || n < 0 {
				return false, fmt.Errorf("nats: bad MSG size in %q", line)
			}
			end := i + 2 + int(n)
			if len(b) < end+2 {
				return true, nil // the payload has not all arrived
			}
			if !h(natsMSG, f[0], b[i+2:end]) {
				return false, nil
			}
			b = b[end+2:]
			continue
		case bytes.Equal(line, natsPING):
			if err := nr.conn.Write(ctx, websocket.MessageBinary, []byte("PONG\r\n")); err != nil {
				return false, err
			}
			if !h(natsPING, nil, nil) {
				return false, nil
			}
		case bytes.Equal(line, natsPONG):
			if !h(natsPONG, nil, nil) {
				return false, nil
			}
		case bytes.HasPrefix(line, natsERR):
			if !h(natsERR, nil, line) {
				return false, nil
			}
		}
		// INFO and +OK need nothing.
	}
}

// dialNATS opens a WebSocket to a NATS server and sends CONNECT, then
// subs (SUB lines, or nothing) and a PING; it returns once the PONG has
// arrived, with the reader holding whatever followed it.
func dialNATS(ctx context.Context, url, subs string) (*websocket.Conn, *natsReader, time.Duration, error) {
	start := time.Now()
	conn, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, nil, 0, err
	}
	conn.SetReadLimit(-1)
	if err := conn.Write(ctx, websocket.MessageBinary, []byte(natsConnect+subs+"PING\r\n")); err != nil {
		conn.CloseNow()
		return nil, nil, 0, err
	}
	nr := &natsReader{conn: conn}
	var perr error
	ponged := false
	stop := func(kind, _, payload []byte) bool {
		switch {
		case bytes.Equal(kind, natsPONG):
			ponged = true
			return false
		case bytes.Equal(kind, natsERR):
			perr = fmt.Errorf("nats: %s", payload)
			return false
		}
		return true
	}
	for !ponged && perr == nil {
		if err := nr.fill(ctx); err != nil {
			conn.CloseNow()
			return nil, nil, 0, err
		}
		if _, err := nr.parse(ctx, stop); err != nil {
			conn.CloseNow()
			return nil, nil, 0, err
		}
	}
	if perr != nil {
		conn.CloseNow()
		return nil, nil, 0, perr
	}
	return conn, nr, time.Since(start), nil
}

// startNATS dials and subscribes s; its reader goroutine returns when the
// connection closes.
func (s *subscriber) startNATS(ctx context.Context) error {
	r := s.r
	u := r.cfg.url
	if n := len(r.cfg.subURLs); n > 0 {
		u = r.cfg.subURLs[s.idx%n]
	}
	conn, nr, took, err := dialNATS(ctx, u, "SUB "+s.pattern+" 1\r\n")
	if err != nil {
		return err
	}
	s.conn = conn
	s.serve(took, func() bool {
		return websocket.CloseStatus(nr.run(context.Background(), s.natsLine)) == websocket.StatusNormalClosure
	})
	return nil
}

// serve counts a subscriber connected after took and runs its connection
// on a goroutine of the run's (r.wg); run reports whether the connection
// ended cleanly, and one that did not while the subscriber was not
// closing counts as dropped.
func (s *subscriber) serve(took time.Duration, run func() (clean bool)) {
	r := s.r
	r.connect.record(s.idx, took)
	r.c.conns.Add(1)
	s.readyMet = true
	r.wg.Add(1)
	go func() { // ends with the connection
		defer r.wg.Done()
		defer r.c.conns.Add(-1)
		if !run() && !s.closing.Load() {
			s.dropped.Store(true)
			r.c.disconnects.Add(1)
		}
	}()
}

// natsLine handles one protocol message of a subscriber.
func (s *subscriber) natsLine(kind, _, payload []byte) bool {
	r := s.r
	switch {
	case bytes.Equal(kind, natsMSG):
		if t, ok := intAfter(payload, natsMark); ok {
			r.lat.record(s.idx, time.Duration(time.Now().UnixNano()-t))
		}
		r.c.delivered.Add(1)
		s.delivered.Add(1)
	case bytes.Equal(kind, natsERR):
		fmt.Fprintf(r.log, "nats error: %s\n", payload)
	}
	return true
}

// publishNATS is publish for --target nats (see the file comment for how
// publishes are confirmed).
func (r *runner) publishNATS(ctx context.Context, topics []int) ([]*subscriber, error) {
	cfg := r.cfg
	pingEvery := max(1, cfg.window/4)
	pubs := make([]*subscriber, cfg.publishers)
	inflight := make([]chan int, cfg.publishers)
	pings := make([]chan int, cfg.publishers) // PUBs each outstanding PING confirms
	for i := range pubs {
		pubs[i] = &subscriber{r: r, idx: 1_000_000 + i}
		inflight[i] = make(chan int, cfg.window)
		pings[i] = make(chan int, cfg.window+1)
	}
	for i, p := range pubs {
		conn, nr, took, err := dialNATS(ctx, cfg.url, "")
		if err != nil {
			r.closeAll(pubs)
			return nil, fmt.Errorf("publisher: %w", err)
		}
		r.connect.record(p.idx, took)
		r.c.conns.Add(1)
		p.conn = conn
		fifo, pq := inflight[i], pings[i]
		r.wg.Add(1)
		go func() { // the PONG reader; exits when the connection closes
			defer r.wg.Done()
			defer r.c.conns.Add(-1)
			_ = nr.run(context.Background(), func(kind, _, payload []byte) bool {
				switch {
				case bytes.Equal(kind, natsPONG):
					select {
					case n := <-pq:
						for range n {
							r.sentTo[<-fifo].Add(1)
							r.c.sent.Add(1)
						}
					default: // a PONG we did not ask for
					}
				case bytes.Equal(kind, natsERR):
					if r.c.publishErrors.Add(1) <= 5 {
						fmt.Fprintf(r.log, "publish error: %s\n", payload)
					}
				}
				return true
			})
		}()
	}
	deadline, rate, quota := publisherShare(cfg)
	done := make(chan struct{}, cfg.publishers)
	for i, p := range pubs {
		go func() { // exits at the deadline, the quota or a write error
			defer func() { done <- struct{}{} }()
			buf := make([]byte, 0, 128+cfg.size)
			unpinged := 0
			write := func(ctx context.Context, ti int, n int64) error {
				buf = appendNATSPublish(buf[:0], r.topics[ti], cfg.size, time.Now())
				unpinged++
				if unpinged == pingEvery {
					buf = append(buf, "PING\r\n"...)
					pings[i] <- unpinged
					unpinged = 0
				}
				return p.conn.Write(ctx, websocket.MessageBinary, buf)
			}
			r.pace(ctx, write, inflight[i], topics, i, rate, quota, deadline)
			if unpinged > 0 { // confirm the rest
				pings[i] <- unpinged
				if err := p.conn.Write(ctx, websocket.MessageBinary, []byte("PING\r\n")); err != nil {
					fmt.Fprintf(r.log, "publisher %d: %v\n", i, err)
				}
			}
		}()
	}
	for range pubs {
		<-done
	}
	until := time.Now().Add(10 * time.Second)
	for _, f := range inflight {
		for len(f) > 0 && time.Now().Before(until) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return pubs, nil
}

// appendNATSPublish appends a PUB of a payload of size bytes, the same
// JSON string appendPublish puts in "data".
func appendNATSPublish(dst []byte, subject string, size int, now time.Time) []byte {
	dst = append(dst, "PUB "...)
	dst = append(dst, subject...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(size), 10)
	dst = append(dst, "\r\n"+`"`+payloadMark...)
	dst = fmt.Appendf(dst, "%019d", now.UnixNano())
	for range max(0, size-minPayload) {
		dst = append(dst, 'x')
	}
	return append(dst, `"`+"\r\n"...)
}

// checkTarget validates --target against the scenario.
func (c *config) checkTarget() error {
	switch c.target {
	case targetSwitchyard:
		return nil
	case targetMQTT:
		return c.checkMQTT()
	case targetNATS:
		for _, s := range natsScenarios {
			if s == c.scenario {
				if c.inprocess {
					return errors.New("--target nats takes an external NATS server, not --inprocess")
				}
				return nil
			}
		}
		return fmt.Errorf("--target nats runs the scenarios %v, not %q", natsScenarios, c.scenario)
	}
	return fmt.Errorf("--target %q: want %s, %s or %s", c.target, targetSwitchyard, targetNATS, targetMQTT)
}
