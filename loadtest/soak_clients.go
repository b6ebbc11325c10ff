package main

// The soak scenario's clients: plain subscribers and churners, group
// members and publishers, each over its own connection.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// soakConn is the connection a soak client holds, replaced on every
// reconnect.
type soakConn struct {
	conn     *websocket.Conn // the current connection; set between readers
	done     chan struct{}   // closed when the current reader returns
	ready    chan error
	readyMet bool // owned by the reader goroutine
	closing  atomic.Bool
	dropped  atomic.Bool
}

func (c *soakConn) signal(err error) {
	if !c.readyMet {
		c.readyMet = true
		c.ready <- err
	}
}

// soakReplyTimeout bounds the wait for the reply to a connection's first
// request: a gateway that never answers is a failed connect (retried and
// counted), not a soak run that waits for ever on a context with no
// deadline.
var soakReplyTimeout = 30 * time.Second

// run takes over conn: it starts the reader goroutine feeding line (it
// exits when the connection closes), sends req and waits for its reply;
// what names the request in the error of a connection that closes first.
func (c *soakConn) run(ctx context.Context, r *runner, conn *websocket.Conn, req any, line func([]byte) bool, what string) error {
	b, _ := json.Marshal(req)
	c.conn, c.done, c.ready, c.readyMet = conn, make(chan struct{}), make(chan error, 1), false
	c.closing.Store(false)
	r.c.conns.Add(1)
	done := c.done
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(done)
		defer r.c.conns.Add(-1)
		err := readFrames(context.Background(), conn, line)
		if !c.closing.Load() {
			c.dropped.Store(true)
			r.c.disconnects.Add(1)
		}
		if !c.readyMet {
			c.signal(fmt.Errorf("connection closed before %s: %w", what, err))
		}
	}()
	if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
		c.closing.Store(true)
		conn.CloseNow()
		return err
	}
	timer := time.NewTimer(soakReplyTimeout)
	defer timer.Stop()
	select {
	case err := <-c.ready:
		if err != nil {
			c.closing.Store(true)
			conn.CloseNow()
		}
		return err
	case <-timer.C:
		c.closing.Store(true)
		conn.CloseNow()
		return fmt.Errorf("no %s within %v", what, soakReplyTimeout)
	case <-ctx.Done():
		c.closing.Store(true)
		conn.CloseNow()
		return ctx.Err()
	}
}

// --- plain subscribers ---

// soakReader is one plain subscriber; a churner reconnects over and over
// with the same state. Its reader goroutines run one at a time.
type soakReader struct {
	st      *soak
	idx     int
	class   string // fast, slow, churn
	pattern string
	onFull  string
	slow    bool
	topics  []int

	// next[t][p] is the next offset it expects: everything below was
	// delivered or reported in a gap. Written by the reader goroutine,
	// read by the drain loop.
	next [][]atomic.Int64

	soakConn

	delivered, dups, unaccounted, gapRecords, gaps, badGaps atomic.Int64
	reconnects, notRecovered                                atomic.Int64
	hurry                                                   atomic.Bool
}

func (rd *soakReader) line(l []byte) bool {
	st, r := rd.st, rd.st.r
	switch {
	case isOp(l, opMessage):
		r.c.delivered.Add(1)
		off, _ := intAfter(l, keyOffset)
		nx := rd.streamOf(l)
		if nx == nil {
			return true
		}
		cur := nx.Load()
		switch {
		case off == cur:
			rd.delivered.Add(1)
			nx.Store(off + 1)
		case off < cur:
			rd.dups.Add(1)
			r.c.duplicates.Add(1)
		default:
			rd.unaccounted.Add(off - cur)
			rd.delivered.Add(1)
			nx.Store(off + 1)
		}
		if !rd.slow && rd.class != "churn" {
			if t, ok := sendTime(l); ok {
				r.lat.record(rd.idx, time.Duration(time.Now().UnixNano()-t))
			}
		}
		if rd.slow && !rd.hurry.Load() {
			time.Sleep(r.cfg.slowDelay)
		}
	case isOp(l, opGap):
		from, _ := intAfter(l, keyFrom)
		to, _ := intAfter(l, keyTo)
		r.c.gapEvents.Add(1)
		r.c.gapRecords.Add(to - from)
		rd.gaps.Add(1)
		nx := rd.streamOf(l)
		if nx == nil {
			return true
		}
		cur := nx.Load()
		switch {
		case from == cur:
		case from > cur:
			rd.unaccounted.Add(from - cur)
		default:
			rd.badGaps.Add(1)
		}
		if to > cur {
			rd.gapRecords.Add(to - max(from, cur))
			nx.Store(to)
		}
	case isOp(l, opSubscribed):
		if bytes.Contains(l, notRecovered) {
			rd.notRecovered.Add(1)
		}
		rd.signal(nil)
	case isOp(l, opError):
		if !rd.readyMet {
			rd.signal(fmt.Errorf("subscribe %q: %s", rd.pattern, l))
		}
		st.noteErrorFrame("subscriber "+itoa(rd.idx), l)
	case isOp(l, opTopicDeleted):
		st.noteErrorFrame("subscriber "+itoa(rd.idx), l)
	}
	return true
}

// streamOf returns the next offset rd expects on the stream (topic and
// partition) frame l names; nil, noted as an error frame, for a stream
// rd does not subscribe to.
func (rd *soakReader) streamOf(l []byte) *atomic.Int64 {
	ti, _ := topicIndex(l)
	p, _ := intAfter(l, keyPartition)
	nx := rd.slot(ti, int(p))
	if nx == nil {
		rd.st.noteErrorFrame("subscriber "+itoa(rd.idx)+" (unknown stream)", l)
	}
	return nx
}

// slot returns the next offset rd expects on partition p of its topic t,
// nil when it has no such stream.
func (rd *soakReader) slot(t, p int) *atomic.Int64 {
	if t < 0 || t >= len(rd.next) || p < 0 || p >= len(rd.next[t]) {
		return nil
	}
	return &rd.next[t][p]
}

// connect dials and subscribes: from "earliest" the first time, then from
// the positions seen so far. It returns once the subscription is confirmed.
func (rd *soakReader) connect(ctx context.Context) error {
	st, r := rd.st, rd.st.r
	conn, welcome, took, err := dialWelcome(ctx, r.cfg.url, rd.slow)
	if err != nil {
		return err
	}
	r.connect.record(rd.idx, took)
	epoch := st.checkEpoch(welcome)
	req := map[string]any{"op": "subscribe", "id": 1, "pattern": rd.pattern, "from": "earliest"}
	if rd.onFull != "" {
		req["on_full"] = rd.onFull
	}
	if rd.done != nil { // a reconnect: resume after what was seen
		var pos []map[string]any
		for t := range rd.next {
			for p := range rd.next[t] {
				if n := rd.next[t][p].Load(); n > 0 {
					pos = append(pos, map[string]any{"topic": r.topics[t], "partition": p, "offset": n - 1})
				}
			}
		}
		req["from"] = map[string]any{"epoch": epoch, "positions": pos}
	}
	return rd.run(ctx, r, conn, req, rd.line, "subscribed")
}

// close closes the current connection and waits for its reader.
func (rd *soakReader) close(abrupt bool) {
	if rd.conn == nil {
		return
	}
	rd.closing.Store(true)
	if abrupt {
		rd.conn.CloseNow()
	} else {
		_ = rd.conn.Close(websocket.StatusNormalClosure, "")
	}
	<-rd.done
}

// soakReconnectTries bounds the tries of one reconnect or rejoin.
const soakReconnectTries = 5

// churn reconnects rd until stop is closed; it returns connected (or
// after a reconnect failed soakReconnectTries times, which it counts).
func (rd *soakReader) churn(ctx context.Context, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-time.After(soakChurnMin + rand.N(soakChurnMax-soakChurnMin)):
		}
		rd.close(i%2 == 1)
		if !rd.st.reconnect(ctx, stop, fmt.Sprintf("churner %d: reconnect", rd.idx), rd.connect) {
			return
		}
		rd.reconnects.Add(1)
	}
}

// reconnect dials again for a churning client (what names it in the log)
// and reports whether it is connected. A refused upgrade or join (429 past
// a per-address bound, 503 when the connect hook is slower than its
// timeout on a saturated machine) is retried after a second, up to
// soakReconnectTries times, as the clients do; the resume loses nothing
// meanwhile. A client that stays refused is counted, and the first such
// failure is kept for the verdict. It returns false at once when stop is
// closed.
func (st *soak) reconnect(ctx context.Context, stop <-chan struct{}, what string, dial func(context.Context) error) bool {
	r := st.r
	err := dial(ctx)
	for try := 1; err != nil && try < soakReconnectTries && ctx.Err() == nil; try++ {
		fmt.Fprintf(r.log, "%s, try %d: %v\n", what, try, err)
		select {
		case <-stop:
			return false
		case <-time.After(time.Second):
		}
		err = dial(ctx)
	}
	if err != nil {
		r.c.connFailures.Add(1)
		st.failedConn.CompareAndSwap(nil, fmt.Sprintf("%s: %v", what, err))
		fmt.Fprintf(r.log, "%s: %v\n", what, err)
		return false
	}
	return true
}

// --- group members ---

// soakMember is one consumer-group member; a churning one joins again
// after each close. Its reader goroutines run one at a time.
type soakMember struct {
	st    *soak
	idx   int
	churn bool

	soakConn
	die    atomic.Int32 // dieMidAck or dieHolding: close on the next delivery
	ackBuf []byte       // owned by the reader goroutine
}

const (
	dieMidAck  = 1 // send the ack, then close at once
	dieHolding = 2 // close without acking
)

func (m *soakMember) line(l []byte) bool {
	st, r := m.st, m.st.r
	switch {
	case isOp(l, opMessage):
		st.deliveries.Add(1)
		r.c.delivered.Add(1)
		p, _ := intAfter(l, keyPartition)
		off, _ := intAfter(l, keyOffset)
		attempt, _ := intAfter(l, keyAttempt)
		if attempt > 1 {
			st.redeliveries.Add(1)
			r.c.redeliveries.Add(1)
		}
		if st.acked.has(int(p), off) {
			st.ackedRedelivered.Add(1)
		}
		switch m.die.Swap(0) {
		case dieHolding:
			st.inFlightCloses.Add(1)
			m.closing.Store(true)
			m.conn.CloseNow()
			return false
		case dieMidAck:
			st.midAckCloses.Add(1)
			st.midAck.add(int(p), off)
			m.write("ack", p, off, true)
			m.closing.Store(true)
			m.conn.CloseNow()
			return false
		}
		if attempt <= 1 && r.cfg.nackShare > 0 && rand.Float64() < r.cfg.nackShare {
			st.nacks.Add(1)
			r.c.nacks.Add(1)
			m.write("nack", p, off, false)
			return true
		}
		m.write("ack", p, off, true)
	case isOp(l, opAcked):
		i := bytes.Index(l, keyAckID)
		if i < 0 {
			st.noteErrorFrame("member "+itoa(m.idx)+" (acked without our id)", l)
			return true
		}
		rest := l[i+len(keyAckID):]
		p, ok1 := parseInt(rest)
		j := bytes.IndexByte(rest, '.')
		if j < 0 || !ok1 {
			st.noteErrorFrame("member "+itoa(m.idx)+" (bad ack id)", l)
			return true
		}
		off, _ := parseInt(rest[j+1:])
		r.c.acks.Add(1)
		if !st.acked.add(int(p), off) {
			r.c.duplicates.Add(1)
		}
	case isOp(l, opSubscribed):
		m.signal(nil)
	case isOp(l, opError):
		if bytes.Contains(l, codeNotInFlight) {
			st.lateAcks.Add(1)
			return true
		}
		if !m.readyMet {
			m.signal(fmt.Errorf("join: %s", l))
		}
		st.noteErrorFrame("member "+itoa(m.idx), l)
	}
	return true
}

// write sends an ack or nack of the group topic's (p, off); acks carry an
// id ("a.<partition>.<offset>") so that the reply confirms them.
func (m *soakMember) write(op string, p, off int64, withID bool) {
	st := m.st
	b := append(m.ackBuf[:0], `{"op":"`...)
	b = append(b, op...)
	if withID {
		b = append(b, `","id":"a.`...)
		b = strconv.AppendInt(b, p, 10)
		b = append(b, '.')
		b = strconv.AppendInt(b, off, 10)
	}
	b = append(b, `","group":"`...)
	b = append(b, st.group...)
	b = append(b, `","topic":"`...)
	b = append(b, st.r.topics[st.gtopic]...)
	b = append(b, `","partition":`...)
	b = strconv.AppendInt(b, p, 10)
	b = append(b, `,"offset":`...)
	b = strconv.AppendInt(b, off, 10)
	b = append(b, '}')
	m.ackBuf = b
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.conn.Write(ctx, websocket.MessageText, b) // a broken connection ends the reader
}

// join dials and joins the group.
func (m *soakMember) join(ctx context.Context) error {
	st, r := m.st, m.st.r
	conn, welcome, took, err := dialWelcome(ctx, r.cfg.url, false)
	if err != nil {
		return err
	}
	r.connect.record(m.idx, took)
	st.checkEpoch(welcome)
	req := map[string]any{"op": "subscribe", "id": 1, "pattern": r.topics[st.gtopic], "group": st.group}
	return m.run(ctx, r, conn, req, m.line, "joining")
}

func (m *soakMember) close() {
	if m.conn == nil {
		return
	}
	m.closing.Store(true)
	_ = m.conn.Close(websocket.StatusNormalClosure, "")
	<-m.done
}

// churnLoop makes m close on a later delivery (alternately mid-ack and
// holding it) and join again, until stop is closed; it returns connected.
func (m *soakMember) churnLoop(ctx context.Context, stop <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-time.After(soakChurnMin + rand.N(soakChurnMax-soakChurnMin)):
		}
		mode := int32(dieMidAck)
		if i%2 == 1 {
			mode = dieHolding
		}
		m.die.Store(mode)
		select {
		case <-m.done:
		case <-stop:
			if m.die.CompareAndSwap(mode, 0) {
				return // no delivery came; still connected
			}
			<-m.done // it is closing right now
		}
		if !m.st.reconnect(ctx, stop, fmt.Sprintf("member %d: rejoin", m.idx), m.join) {
			return
		}
		m.st.rejoins.Add(1)
	}
}

// --- publishers ---

// publishConfirmed records a publish the gateway confirmed.
func (st *soak) publishConfirmed(topic, partition int, offset int64) {
	r := st.r
	if topic < 0 || topic >= len(st.confirmed) || partition < 0 || partition >= len(st.lastOffset[topic]) {
		return
	}
	st.confirmed[topic].Add(1)
	r.sentTo[topic].Add(1)
	r.c.sent.Add(1)
	lo := &st.lastOffset[topic][partition]
	for {
		cur := lo.Load()
		if offset+1 <= cur || lo.CompareAndSwap(cur, offset+1) {
			return
		}
	}
}

// paced calls send for n = 0, 1, … at rate per second until deadline, ctx
// or a false return.
func paced(ctx context.Context, rate float64, deadline time.Time, send func(n int64) bool) {
	start := time.Now()
	for n := int64(0); ctx.Err() == nil; {
		now := time.Now()
		if !now.Before(deadline) {
			return
		}
		if due := int64(now.Sub(start).Seconds()*rate) + 1; n >= due {
			time.Sleep(time.Millisecond)
			continue
		}
		if !send(n) {
			return
		}
		n++
	}
}

// wsPublisher publishes over one WebSocket with at most --window publishes
// outstanding; it returns when it has stopped and its replies are in (or
// 10s passed), leaving the connection to close.
func (st *soak) wsPublisher(ctx context.Context, idx int, rate float64, deadline time.Time) (*websocket.Conn, error) {
	r := st.r
	conn, _, took, err := dialWelcome(ctx, r.cfg.url, false)
	if err != nil {
		return nil, fmt.Errorf("publisher: %w", err)
	}
	r.connect.record(1_000_000+idx, took)
	window := make(chan struct{}, r.cfg.window)
	r.readReplies(conn, func(l []byte) {
		ti, _ := topicIndex(l)
		p, _ := intAfter(l, keyPartition)
		off, _ := intAfter(l, keyOffset)
		st.wsPub.Add(1)
		st.publishConfirmed(ti, int(p), off)
		<-window
	}, func() { <-window })
	buf := make([]byte, 0, 160+r.cfg.size)
	topics := len(r.topics)
	paced(ctx, rate, deadline, func(n int64) bool {
		select {
		case window <- struct{}{}:
		case <-ctx.Done():
			return false
		}
		t := r.topics[(int64(idx)+n)%int64(topics)]
		buf = appendKeyedPublish(buf[:0], n, t, "k"+strconv.FormatInt((n*7+int64(idx))%soakKeys, 10), r.cfg.size, time.Now())
		if err := conn.Write(ctx, websocket.MessageText, buf); err != nil {
			fmt.Fprintf(r.log, "publisher %d: %v\n", idx, err)
			return false
		}
		return true
	})
	until := time.Now().Add(10 * time.Second)
	for len(window) > 0 && time.Now().Before(until) {
		time.Sleep(5 * time.Millisecond)
	}
	return conn, nil
}

// httpPublisher publishes with POST /v1/publish, one request at a time.
func (st *soak) httpPublisher(ctx context.Context, rate float64, deadline time.Time) {
	r := st.r
	paced(ctx, rate, deadline, func(n int64) bool {
		ti := int((n*3 + 1) % int64(len(r.topics)))
		body := appendKeyedPublish(nil, n, r.topics[ti], "h"+strconv.FormatInt(n%soakKeys, 10), r.cfg.size, time.Now())
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.httpURL+"/v1/publish", bytes.NewReader(body))
		if err != nil {
			return false
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := r.httpc.Do(req)
		if err != nil {
			if ctx.Err() == nil && r.c.publishErrors.Add(1) <= 5 {
				fmt.Fprintf(r.log, "http publish: %v\n", err)
			}
			return true
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		var got struct {
			Topic     string `json:"topic"`
			Partition int    `json:"partition"`
			Offset    int64  `json:"offset"`
		}
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &got) != nil || got.Topic != r.topics[ti] {
			if r.c.publishErrors.Add(1) <= 5 {
				fmt.Fprintf(r.log, "http publish: HTTP %d: %s\n", resp.StatusCode, b)
			}
			return true
		}
		st.httpPub.Add(1)
		st.publishConfirmed(ti, got.Partition, got.Offset)
		return true
	})
}

// appendKeyedPublish is appendPublish with a key. As an HTTP body the
// extra "op" and "id" fields are ignored.
func appendKeyedPublish(dst []byte, id int64, topic, key string, size int, now time.Time) []byte {
	dst = appendPublish(dst, id, topic, size, now)
	dst = dst[:len(dst)-1] // drop the closing brace
	dst = append(dst, `,"key":"`...)
	dst = append(dst, key...)
	return append(dst, `"}`...)
}

// --- wire helpers ---

// dialWelcome opens a WebSocket and returns it with its welcome frame.
// With smallBuffer the socket's receive buffer is kept small.
func dialWelcome(ctx context.Context, url string, smallBuffer bool) (*websocket.Conn, []byte, time.Duration, error) {
	start := time.Now()
	var opts *websocket.DialOptions
	if smallBuffer {
		opts = &websocket.DialOptions{HTTPClient: smallBufferClient}
	}
	conn, _, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		return nil, nil, 0, err
	}
	conn.SetReadLimit(-1)
	_, data, err := conn.Read(ctx)
	if err != nil {
		conn.CloseNow()
		return nil, nil, 0, err
	}
	if !isOp(data, opWelcome) {
		conn.CloseNow()
		return nil, nil, 0, fmt.Errorf("first frame is not a welcome: %.80s", data)
	}
	return conn, data, time.Since(start), nil
}

// stringAfter returns the JSON string (without escapes) that follows key.
func stringAfter(line, key []byte) string {
	i := bytes.Index(line, key)
	if i < 0 {
		return ""
	}
	rest := line[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return ""
	}
	return string(rest[:j])
}
