package main

// The soak scenario: a bounded, mixed load that checks invariants rather
// than measuring speed.
//
// Layout (T = --topics plain topics of soakPartitions partitions each, plus
// one group topic of max(2, --members) partitions; all named
// "<prefix>.soak.t<i>", the group topic last):
//
//   - --publishers WebSocket publishers and one HTTP publisher (soakHTTPShare
//     of --rate) publish round-robin over every topic, with keys
//     (soakKeys of them, so every partition gets records).
//   - --subscribers plain subscribers from "earliest": a --slow-share of
//     them read slowly (--slow-delay per message, small socket buffer) on
//     the wildcard "<prefix>.soak.*" with on_full drop_old; the rest read at
//     full speed, alternately a literal topic and the wildcard, every
//     other one with an explicit on_full drop_old.
//   - --churners plain subscribers that close their connection every
//     soakChurnMin–soakChurnMax (alternately cleanly and abruptly) and
//     subscribe again with from {epoch, positions}: the resume protocol
//     must give them every retained record exactly once.
//   - --members consumer-group members on the group topic that ack with an
//     id (an ack counts once the gateway answers "acked") and nack a
//     --nack-share of first deliveries. With two or more members, member 0
//     churns: alternately it sends an ack and closes at once (mid-ack), or
//     closes holding a delivery; then it joins again.
//
// Every --sample-interval it samples the gateway: in-process, the
// process's goroutines and live heap (HeapAlloc after runtime.GC) and
// VmRSS; against an external gateway, go_goroutines and
// go_memstats_heap_inuse_bytes from its /metrics, and VmRSS of --server-pid.
//
// After --duration publishing stops, slow readers speed up, and the run
// waits up to --drain for every subscriber and the group to reach the end of
// the log. Then it closes every connection and checks (each failure is a
// violation, printed, and the exit code is 1):
//
//   - the gateway reported no problem: in-process, nothing logged at warn
//     or error (a recovered handler panic is logged by the HTTP server) and
//     Shutdown returned no error; external, the process is alive and
//     /healthz answers 200. No client received an error frame other than
//     not_in_flight for a late ack, and no publish failed.
//   - the log holds every confirmed publish.
//   - every plain subscriber saw, per (topic, partition), each offset of
//     the log exactly once and in order, except ranges a gap frame
//     reported: so subscribers without gaps (fast readers, churners) saw
//     everything exactly once in order, and slow readers' losses are all
//     accounted for by gaps. The gateway closed none of them.
//   - every offset of the group topic was acked by some member (confirmed,
//     or sent just before a mid-ack close), no record was delivered again
//     after a confirmed ack, the group's committed offsets reached the end
//     of each partition and it has no dead letters.
//   - goroutines came back to within --goroutine-slack (default 10) of the
//     baseline taken before any connection. 10 leaves room for the few the
//     runtime and net/http start lazily (a timer, an idle-connection
//     reaper) while any per-session goroutine left behind by a
//     dozens-of-connections load shows up as several times that.
//   - heap growth from the first sample after warm-up (a sixth of
//     --duration, 1s–10s) to the last (after the load, after GC) stays
//     under --max-heap-growth-mib (default 64). The bound is absolute, not
//     a ratio: the in-memory log keeps every record, so the heap grows
//     legitimately with what was published (at the defaults about 30,000
//     records, some 15 MiB with overhead), and a ratio over a small
//     warm-up heap would flag that; a leak of one 1 KiB buffer per
//     delivery, at the defaults' roughly 2,500 deliveries a second, would
//     pass 64 MiB within half a minute.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

const (
	soakPartitions = 2                      // per plain topic
	soakKeys       = 32                     // distinct publish keys
	soakHTTPShare  = 0.1                    // share of --rate published over HTTP
	soakChurnMin   = 500 * time.Millisecond // churn interval bounds
	soakChurnMax   = 2 * time.Second
	settleTimeout  = 10 * time.Second // for goroutines to return after the load
)

var (
	keyEpoch         = []byte(`"epoch":"`)
	keyAckID         = []byte(`"id":"a.`)
	notRecovered     = []byte(`"recovered":false`)
	codeNotInFlight  = []byte(`"code":"not_in_flight"`)
	opAcked          = []byte(`"op":"acked"`)
	opTopicDeleted   = []byte(`"op":"topic_deleted"`)
	metricGoroutines = "go_goroutines"
	metricHeapInuse  = "go_memstats_heap_inuse_bytes"
)

// SoakReport is the soak scenario's part of the report.
type SoakReport struct {
	Bounds     SoakBounds     `json:"bounds"`
	Samples    []Sample       `json:"samples"`
	Goroutines SoakDelta      `json:"goroutines"`
	Heap       SoakDelta      `json:"heap_bytes"`
	LogRecords int64          `json:"log_records"`
	LogBytes   int64          `json:"log_bytes"`
	WSPublish  int64          `json:"ws_publishes"`
	HTTPPub    int64          `json:"http_publishes"`
	Classes    []SoakClass    `json:"classes"`
	Group      SoakGroup      `json:"group"`
	ErrorFrame int64          `json:"error_frames"`
	Gateway    []string       `json:"gateway_problems,omitempty"`
	Hostile    *HostileReport `json:"hostile,omitempty"`
	Violations []string       `json:"violations"`
	Passed     bool           `json:"passed"`
}

// SoakBounds are the limits the run was checked against.
type SoakBounds struct {
	GoroutineSlack     int     `json:"goroutine_slack"`
	MaxHeapGrowthBytes int64   `json:"max_heap_growth_bytes"`
	WarmupS            float64 `json:"warmup_s"`
	HeapMeasure        string  `json:"heap_measure"`
}

// SoakDelta is a measure at its reference point and at the end.
type SoakDelta struct {
	Baseline int64 `json:"baseline"`
	Final    int64 `json:"final"`
	Growth   int64 `json:"growth"`
}

// Sample is one look at the gateway.
type Sample struct {
	T          float64 `json:"t_s"`
	Phase      string  `json:"phase"` // baseline, load, drain, final
	Goroutines int64   `json:"goroutines"`
	HeapBytes  int64   `json:"heap_bytes"`
	RSSBytes   int64   `json:"rss_bytes,omitempty"`
	Sent       int64   `json:"sent"`
	Delivered  int64   `json:"delivered"`
}

// SoakClass sums up one kind of plain subscriber.
type SoakClass struct {
	Name         string `json:"name"`
	Subscribers  int    `json:"subscribers"`
	Expected     int64  `json:"expected"`
	Delivered    int64  `json:"delivered"`
	Duplicates   int64  `json:"duplicates"`
	Unaccounted  int64  `json:"unaccounted"` // offsets skipped without a gap, or never reached
	GapRecords   int64  `json:"gap_records"`
	BadGaps      int64  `json:"bad_gaps"` // gaps overlapping what was delivered
	WithGaps     int    `json:"with_gaps"`
	Disconnects  int    `json:"disconnects"`
	Reconnects   int64  `json:"reconnects"`
	NotRecovered int64  `json:"not_recovered"`
}

// SoakGroup sums up the consumer group.
type SoakGroup struct {
	Records          int64 `json:"records"` // in the group topic's log
	Acked            int64 `json:"acked"`   // distinct offsets acked (confirmed)
	MidAck           int64 `json:"mid_ack_closes"`
	InFlightCloses   int64 `json:"in_flight_closes"`
	Deliveries       int64 `json:"deliveries"`
	Redeliveries     int64 `json:"redeliveries"`
	Nacks            int64 `json:"nacks"`
	LateAcks         int64 `json:"late_acks"`
	AckedRedelivered int64 `json:"acked_redelivered"`
	Unacked          int64 `json:"unacked"`
	Lag              int64 `json:"lag"`
	DeadLetters      int64 `json:"dead_letters"`
	Rejoins          int64 `json:"rejoins"`
}

func (s *SoakReport) violate(format string, args ...any) {
	s.Violations = append(s.Violations, fmt.Sprintf(format, args...))
	s.Passed = false
}

// checkInProcess adds the embedded gateway's own verdict: how it stopped and
// what it logged.
func (s *SoakReport) checkInProcess(stopErr error, problems *problemLog) {
	if stopErr != nil {
		s.violate("gateway: %v", stopErr)
	}
	n, first := problems.snapshot()
	s.Gateway = first
	if n > 0 {
		s.violate("gateway logged %d warning(s) or error(s); first: %s", n, strings.Join(first, " | "))
	}
	s.Passed = len(s.Violations) == 0
}

func (s *SoakReport) writeTable(p func(string, any)) {
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	p("soak bounds", fmt.Sprintf("goroutines <= baseline+%d; heap growth < %s (%s) after %.0fs warm-up",
		s.Bounds.GoroutineSlack, mib(s.Bounds.MaxHeapGrowthBytes), s.Bounds.HeapMeasure, s.Bounds.WarmupS))
	p("goroutines", fmt.Sprintf("baseline %d, final %d (%+d)", s.Goroutines.Baseline, s.Goroutines.Final, s.Goroutines.Growth))
	p("heap", fmt.Sprintf("after warm-up %s, final %s (%+.1f MiB)", mib(s.Heap.Baseline), mib(s.Heap.Final), float64(s.Heap.Growth)/(1<<20)))
	p("log", fmt.Sprintf("%d records, %s", s.LogRecords, mib(s.LogBytes)))
	p("publishes ws / http", fmt.Sprintf("%d / %d", s.WSPublish, s.HTTPPub))
	for _, c := range s.Classes {
		p("subscribers "+c.Name, fmt.Sprintf("n=%d expected=%d delivered=%d dups=%d unaccounted=%d gap_records=%d bad_gaps=%d with_gaps=%d disconnects=%d reconnects=%d not_recovered=%d",
			c.Subscribers, c.Expected, c.Delivered, c.Duplicates, c.Unaccounted, c.GapRecords, c.BadGaps, c.WithGaps, c.Disconnects, c.Reconnects, c.NotRecovered))
	}
	g := s.Group
	p("group", fmt.Sprintf("records=%d acked=%d unacked=%d deliveries=%d redeliveries=%d nacks=%d late_acks=%d acked_redelivered=%d lag=%d dead_letters=%d",
		g.Records, g.Acked, g.Unacked, g.Deliveries, g.Redeliveries, g.Nacks, g.LateAcks, g.AckedRedelivered, g.Lag, g.DeadLetters))
	p("group churn", fmt.Sprintf("rejoins=%d mid_ack_closes=%d in_flight_closes=%d", g.Rejoins, g.MidAck, g.InFlightCloses))
	p("error frames", s.ErrorFrame)
	if h := s.Hostile; h != nil {
		p("hostile bound", fmt.Sprintf("peak heap during the load <= baseline + %s", mib(h.MaxHeapBytes)))
		p("hostile peak", fmt.Sprintf("heap %s, rss %s", mib(h.PeakHeap), mib(h.PeakRSS)))
		for _, a := range h.Actors {
			p("hostile "+a.Name, fmt.Sprintf("attempts=%d ended_by_gateway=%d", a.Attempts, a.Closed))
		}
		for _, name := range evidenceNames() {
			p("hostile evidence", fmt.Sprintf("%s %d", name, h.Evidence[name]))
		}
		for _, name := range slices.Sorted(maps.Keys(h.Seen)) {
			p("hostile seen", fmt.Sprintf("%s %d", name, h.Seen[name]))
		}
	}
	p("samples", "t_s phase goroutines heap rss sent delivered")
	for _, x := range s.Samples {
		rss := "-"
		if x.RSSBytes > 0 {
			rss = mib(x.RSSBytes)
		}
		p("", fmt.Sprintf("%6.1f %-8s %6d %10s %10s %9d %10d", x.T, x.Phase, x.Goroutines, mib(x.HeapBytes), rss, x.Sent, x.Delivered))
	}
	verdict := "PASS"
	if !s.Passed {
		verdict = fmt.Sprintf("FAIL (%d violations)", len(s.Violations))
	}
	p("soak verdict", verdict)
	for _, v := range s.Violations {
		p("violation", v)
	}
}

// --- state ---

// soak is one run of the scenario. Its connections update it concurrently;
// fields without a comment are set before any connection starts.
type soak struct {
	r      *runner
	parts  []int // partitions per topic index
	gtopic int   // index of the group topic
	group  string
	start  time.Time

	epochMu sync.Mutex // guards epoch
	epoch   string

	acked  offsetSet // group offsets whose ack the gateway confirmed
	midAck offsetSet // group offsets acked just before a mid-ack close

	wsPub, httpPub                        atomic.Int64
	deliveries, redeliveries, nacks       atomic.Int64
	lateAcks, ackedRedelivered            atomic.Int64
	midAckCloses, inFlightCloses, rejoins atomic.Int64
	errorFrames, epochChanges             atomic.Int64
	lastOffset                            [][]atomic.Int64 // [topic][partition] highest confirmed publish + 1
	confirmed                             []atomic.Int64   // [topic] confirmed publishes
	stopping                              atomic.Bool      // the run is closing connections
	sampleMu                              sync.Mutex       // guards samples
	samples                               []Sample
	sampleErr                             atomic.Value // first sampling error (string)
	metricsClient                         *http.Client
	frameErrMu                            sync.Mutex // guards frameErrs
	frameErrs                             []string
}

func (st *soak) noteErrorFrame(who string, l []byte) {
	st.errorFrames.Add(1)
	st.frameErrMu.Lock()
	defer st.frameErrMu.Unlock()
	if len(st.frameErrs) < problemsKept {
		st.frameErrs = append(st.frameErrs, who+": "+string(l))
	}
}

// checkEpoch remembers the first epoch and counts changes.
func (st *soak) checkEpoch(welcome []byte) string {
	e := stringAfter(welcome, keyEpoch)
	st.epochMu.Lock()
	defer st.epochMu.Unlock()
	if st.epoch == "" {
		st.epoch = e
	} else if e != st.epoch {
		st.epochChanges.Add(1)
	}
	return st.epoch
}

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
	select {
	case err := <-c.ready:
		if err != nil {
			c.closing.Store(true)
			conn.CloseNow()
		}
		return err
	case <-ctx.Done():
		c.closing.Store(true)
		conn.CloseNow()
		return ctx.Err()
	}
}

// offsetSet is a set of (partition, offset). It is safe for concurrent use
// by multiple goroutines.
type offsetSet struct {
	mu   sync.Mutex // guards following
	bits [][]uint64
	n    int64
}

// add inserts (p, off) and reports whether it was new.
func (s *offsetSet) add(p int, off int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.bits) <= p {
		s.bits = append(s.bits, nil)
	}
	w := int(off / 64)
	for len(s.bits[p]) <= w {
		s.bits[p] = append(s.bits[p], 0)
	}
	m := uint64(1) << (off % 64)
	if s.bits[p][w]&m != 0 {
		return false
	}
	s.bits[p][w] |= m
	s.n++
	return true
}

func (s *offsetSet) has(p int, off int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if off < 0 || p >= len(s.bits) || int(off/64) >= len(s.bits[p]) {
		return false
	}
	return s.bits[p][off/64]&(1<<(off%64)) != 0
}

func (s *offsetSet) len() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// missing counts the offsets below ends[p] of each partition p that are in
// none of sets.
func missing(ends []int64, sets ...*offsetSet) int64 {
	var n int64
	for p, end := range ends {
		for off := range end {
			found := false
			for _, s := range sets {
				if s.has(p, off) {
					found = true
					break
				}
			}
			if !found {
				n++
			}
		}
	}
	return n
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
		ti, _ := topicIndex(l)
		p, _ := intAfter(l, keyPartition)
		off, _ := intAfter(l, keyOffset)
		nx := rd.slot(ti, int(p))
		if nx == nil {
			st.noteErrorFrame("subscriber "+itoa(rd.idx)+" (unknown stream)", l)
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
		ti, _ := topicIndex(l)
		p, _ := intAfter(l, keyPartition)
		from, _ := intAfter(l, keyFrom)
		to, _ := intAfter(l, keyTo)
		r.c.gapEvents.Add(1)
		r.c.gapRecords.Add(to - from)
		rd.gaps.Add(1)
		nx := rd.slot(ti, int(p))
		if nx == nil {
			st.noteErrorFrame("subscriber "+itoa(rd.idx)+" (unknown stream)", l)
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

// soakReconnectTries bounds a churner's tries at one reconnect.
const soakReconnectTries = 5

// churn reconnects rd until stop is closed; it returns connected (or
// after a reconnect failed soakReconnectTries times, which it counts).
func (rd *soakReader) churn(ctx context.Context, stop <-chan struct{}) {
	r := rd.st.r
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		case <-time.After(soakChurnMin + rand.N(soakChurnMax-soakChurnMin)):
		}
		rd.close(i%2 == 1)
		// A refused upgrade (429 past a per-address bound, 503 when the
		// connect hook is slower than its timeout on a saturated machine)
		// is retried after a second, as the clients do; the resume loses
		// nothing meanwhile.
		err := rd.connect(ctx)
		for try := 1; err != nil && try < soakReconnectTries && ctx.Err() == nil; try++ {
			fmt.Fprintf(r.log, "churner %d: reconnect, try %d: %v\n", rd.idx, try, err)
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
			err = rd.connect(ctx)
		}
		if err != nil {
			r.c.connFailures.Add(1)
			fmt.Fprintf(r.log, "churner %d: reconnect: %v\n", rd.idx, err)
			return
		}
		rd.reconnects.Add(1)
	}
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
	r := m.st.r
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
		if err := m.join(ctx); err != nil {
			r.c.connFailures.Add(1)
			fmt.Fprintf(r.log, "member %d: rejoin: %v\n", m.idx, err)
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
	r.c.conns.Add(1)
	r.wg.Add(1)
	go func() { // the reply reader; exits when the connection closes
		defer r.wg.Done()
		defer r.c.conns.Add(-1)
		_ = readFrames(context.Background(), conn, func(l []byte) bool {
			switch {
			case isOp(l, opPublished):
				ti, _ := topicIndex(l)
				p, _ := intAfter(l, keyPartition)
				off, _ := intAfter(l, keyOffset)
				st.wsPub.Add(1)
				st.publishConfirmed(ti, int(p), off)
				<-window
			case isOp(l, opError):
				<-window
				if r.c.publishErrors.Add(1) <= 5 {
					fmt.Fprintf(r.log, "publish error: %s\n", l)
				}
			}
			return true
		})
	}()
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

// --- sampling ---

// sample looks at the gateway once. In-process it collects garbage first,
// so the heap figure is the live heap.
func (st *soak) sample(ctx context.Context, phase string) Sample {
	r := st.r
	s := Sample{T: time.Since(st.start).Seconds(), Phase: phase, Sent: r.c.sent.Load(), Delivered: r.c.delivered.Load()}
	if r.cfg.inprocess {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s.Goroutines, s.HeapBytes = int64(runtime.NumGoroutine()), int64(ms.HeapAlloc)
		s.RSSBytes, _ = procRSS(os.Getpid())
	} else {
		g, h, err := st.scrape(ctx)
		if err != nil {
			st.sampleErr.CompareAndSwap(nil, err.Error())
		}
		s.Goroutines, s.HeapBytes = g, h
		if r.cfg.serverPID > 0 {
			s.RSSBytes, _ = procRSS(r.cfg.serverPID)
		}
	}
	st.sampleMu.Lock()
	st.samples = append(st.samples, s)
	st.sampleMu.Unlock()
	return s
}

// sampler samples every --sample-interval until stop is closed; it returns
// when it has stopped.
func (st *soak) sampler(ctx context.Context, phase *atomic.Value, stop <-chan struct{}) {
	t := time.NewTicker(st.r.cfg.sampleInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			st.sample(ctx, phase.Load().(string))
		}
	}
}

// scrape reads go_goroutines and go_memstats_heap_inuse_bytes from the
// gateway's /metrics.
func (st *soak) scrape(ctx context.Context) (goroutines, heap int64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.r.cfg.httpURL+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := st.metricsClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("scraping /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("scraping /metrics: HTTP %d", resp.StatusCode)
	}
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || (name != metricGoroutines && name != metricHeapInuse) {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/metrics %s: %w", name, err)
		}
		if name == metricGoroutines {
			goroutines = int64(f)
		} else {
			heap = int64(f)
		}
		found++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("scraping /metrics: %w", err)
	}
	if found < 2 {
		return goroutines, heap, fmt.Errorf("/metrics lacks %s or %s", metricGoroutines, metricHeapInuse)
	}
	return goroutines, heap, nil
}

// procRSS reads VmRSS from /proc/<pid>/status, in bytes.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS: %w", err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}

// --- the run ---

func (r *runner) runSoak(ctx context.Context) (*Report, error) {
	cfg := r.cfg
	r.setTopics("soak", cfg.topics+1)
	st := &soak{
		r: r, gtopic: cfg.topics, group: r.prefix + ".workers", start: time.Now(),
		parts:         make([]int, len(r.topics)),
		confirmed:     make([]atomic.Int64, len(r.topics)),
		lastOffset:    make([][]atomic.Int64, len(r.topics)),
		metricsClient: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	for i := range st.parts {
		st.parts[i] = soakPartitions
	}
	st.parts[st.gtopic] = max(2, cfg.members)
	for i := range st.lastOffset {
		st.lastOffset[i] = make([]atomic.Int64, st.parts[i])
	}
	bounds := SoakBounds{
		GoroutineSlack:     cfg.goroutineSlack,
		MaxHeapGrowthBytes: int64(cfg.maxHeapGrowthMB) << 20,
		WarmupS:            min(10*time.Second, max(time.Second, cfg.duration/6)).Seconds(),
		HeapMeasure:        "live heap (HeapAlloc after runtime.GC) of the whole process",
	}
	if !cfg.inprocess {
		bounds.HeapMeasure = "go_memstats_heap_inuse_bytes of the gateway"
	}
	sr := &SoakReport{Bounds: bounds, Passed: true}

	// The baseline comes before any connection of ours.
	baseline := st.sample(ctx, "baseline")
	var phase atomic.Value
	phase.Store("load")
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() { // exits when stopSampler is closed
		defer close(samplerDone)
		st.sampler(ctx, &phase, stopSampler)
	}()
	stopSampling := sync.OnceFunc(func() { close(stopSampler); <-samplerDone })
	defer stopSampling()
	stopProgress := sync.OnceFunc(r.startProgress())
	defer stopProgress()

	for i, t := range r.topics {
		if err := r.createTopic(ctx, t, st.parts[i]); err != nil {
			return nil, err
		}
	}

	// Plain subscribers and churners.
	var readers []*soakReader
	newReader := func(class string, i int) *soakReader {
		rd := &soakReader{st: st, idx: len(readers), class: class, next: make([][]atomic.Int64, len(r.topics))}
		for t := range rd.next {
			rd.next[t] = make([]atomic.Int64, st.parts[t])
		}
		wild := r.prefix + ".soak.*"
		lit := i % len(r.topics)
		switch {
		case class == "slow":
			rd.slow, rd.pattern, rd.onFull = true, wild, "drop_old"
		case i%2 == 0:
			rd.pattern, rd.topics = r.topics[lit], []int{lit}
		default:
			rd.pattern = wild
		}
		if rd.pattern == wild {
			for t := range r.topics {
				rd.topics = append(rd.topics, t)
			}
		}
		if class == "fast" && i%4 < 2 {
			rd.onFull = "drop_old"
		}
		readers = append(readers, rd)
		return rd
	}
	slow := 0
	if cfg.slowShare > 0 && cfg.subscribers > 0 {
		slow = max(1, int(float64(cfg.subscribers)*cfg.slowShare+0.5))
	}
	for i := range cfg.subscribers {
		class := "fast"
		if i < slow {
			class = "slow"
		}
		newReader(class, i)
	}
	for i := range cfg.churners {
		newReader("churn", i)
	}
	members := make([]*soakMember, cfg.members)
	for i := range members {
		members[i] = &soakMember{st: st, idx: 2_000_000 + i, churn: i == 0 && cfg.members > 1}
	}
	closeEverything := func() {
		st.stopping.Store(true)
		var wg sync.WaitGroup
		for _, rd := range readers {
			wg.Go(func() { rd.close(false) })
		}
		for _, m := range members {
			wg.Go(m.close)
		}
		wg.Wait()
	}

	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	sem := make(chan struct{}, cfg.concurrency)
	var wg sync.WaitGroup
	var failures atomic.Int64
	var firstErr atomic.Value
	dial := func(f func(context.Context) error) {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := f(dctx); err != nil {
				failures.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
			}
		})
	}
	for _, rd := range readers {
		dial(rd.connect)
	}
	for _, m := range members {
		dial(m.join)
	}
	wg.Wait()
	if n := failures.Load(); n > 0 {
		r.c.connFailures.Add(n)
		closeEverything()
		r.wg.Wait()
		return nil, fmt.Errorf("%d connection(s) failed; first: %v", n, firstErr.Load())
	}

	// Load.
	stopChurn := make(chan struct{})
	var churnWG sync.WaitGroup
	for _, rd := range readers {
		if rd.class == "churn" {
			churnWG.Go(func() { rd.churn(ctx, stopChurn) })
		}
	}
	for _, m := range members {
		if m.churn {
			churnWG.Go(func() { m.churnLoop(ctx, stopChurn) })
		}
	}
	var hc *hostile
	stopHostile := make(chan struct{})
	if cfg.hostile {
		var err error
		if hc, err = newHostile(cfg.url); err != nil {
			closeEverything()
			r.wg.Wait()
			return nil, err
		}
		hc.start(ctx, stopHostile)
	}
	start := time.Now()
	deadline := start.Add(cfg.duration)
	wsRate := cfg.rate * (1 - soakHTTPShare) / float64(cfg.publishers)
	pubConns := make([]*websocket.Conn, cfg.publishers)
	var pubErr atomic.Value
	var pubWG sync.WaitGroup
	for i := range pubConns {
		pubWG.Go(func() {
			c, err := st.wsPublisher(ctx, i, wsRate, deadline)
			if err != nil {
				pubErr.CompareAndSwap(nil, err.Error())
				return
			}
			pubConns[i] = c
		})
	}
	pubWG.Go(func() { st.httpPublisher(ctx, cfg.rate*soakHTTPShare, deadline) })
	pubWG.Wait()
	elapsed := time.Since(start)
	close(stopChurn)
	churnWG.Wait()
	if hc != nil {
		close(stopHostile)
		hc.wait()
		sr.Hostile = &HostileReport{Actors: hc.report(), Seen: hc.surfaceReport(), MaxHeapBytes: int64(cfg.hostileHeapMB) << 20}
		ev, err := scrapeSeries(ctx, st.metricsClient, cfg.httpURL, evidenceNames())
		if err != nil {
			sr.violate("hostile: scraping /metrics: %v", err)
		}
		sr.Hostile.Evidence = ev
		for _, alts := range hostileEvidence {
			var n int64
			for _, name := range alts {
				n += ev[name]
			}
			if n == 0 && cfg.hostileLimits {
				sr.violate("hostile: %s did not move: that limit was never met", strings.Join(alts, " or "))
			}
		}
		for _, e := range hc.problems(cfg.hostileLimits) {
			sr.violate("hostile: %s", e)
		}
	}
	for _, c := range pubConns {
		if c != nil {
			_ = c.Close(websocket.StatusNormalClosure, "")
		}
	}
	if e := pubErr.Load(); e != nil {
		sr.violate("publisher: %v", e)
	}

	// Drain: the log is final now; wait for everyone to reach its end.
	phase.Store("drain")
	for _, rd := range readers {
		rd.hurry.Store(true)
	}
	ends, logBytes, err := st.logEnds(ctx)
	if err != nil {
		closeEverything()
		r.wg.Wait()
		return nil, err
	}
	groupEnds := ends[st.gtopic]
	drainUntil := time.Now().Add(cfg.drain)
	complete := func() bool {
		for _, rd := range readers {
			if rd.dropped.Load() {
				continue
			}
			for _, t := range rd.topics {
				for p := range rd.next[t] {
					if rd.next[t][p].Load() < ends[t][p] {
						return false
					}
				}
			}
		}
		return missing(groupEnds, &st.acked, &st.midAck) == 0
	}
	for !complete() && time.Now().Before(drainUntil) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	// The committed offsets follow the acks at once, but a mid-ack close
	// whose ack the gateway never read is settled by a redelivery.
	var lag, deadLetters int64
	for {
		lag, deadLetters, err = st.groupState(ctx, groupEnds)
		if err != nil || lag == 0 || !time.Now().Before(drainUntil) || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		sr.violate("group state: %v", err)
	}

	// Stop the load, close everything, and let the gateway settle.
	closeEverything()
	r.wg.Wait()
	stopProgress()
	stopSampling()
	r.httpc.CloseIdleConnections()
	phase.Store("final")
	var final Sample
	settle := time.Now().Add(settleTimeout)
	for {
		final = Sample{Goroutines: st.sampleQuiet(ctx)}
		if final.Goroutines <= baseline.Goroutines+int64(cfg.goroutineSlack) || !time.Now().Before(settle) || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	final = st.sample(ctx, "final")

	// Figures.
	st.sampleMu.Lock()
	sr.Samples = slices.Clone(st.samples)
	st.sampleMu.Unlock()
	ref := baseline
	for _, s := range sr.Samples {
		if s.Phase == "load" && s.T >= bounds.WarmupS {
			ref = s
			break
		}
	}
	if ref.Phase == "baseline" {
		for _, s := range sr.Samples {
			if s.Phase == "load" {
				ref = s
			}
		}
	}
	if h := sr.Hostile; h != nil {
		for _, x := range sr.Samples {
			if x.Phase == "load" {
				h.PeakHeap, h.PeakRSS = max(h.PeakHeap, x.HeapBytes), max(h.PeakRSS, x.RSSBytes)
			}
		}
		if growth := h.PeakHeap - baseline.HeapBytes; growth > h.MaxHeapBytes {
			sr.violate("hostile: peak heap during the load %.1f MiB above the baseline, over %d MiB",
				float64(growth)/(1<<20), cfg.hostileHeapMB)
		}
	}
	sr.Goroutines = SoakDelta{Baseline: baseline.Goroutines, Final: final.Goroutines, Growth: final.Goroutines - baseline.Goroutines}
	sr.Heap = SoakDelta{Baseline: ref.HeapBytes, Final: final.HeapBytes, Growth: final.HeapBytes - ref.HeapBytes}
	sr.LogBytes = logBytes
	for t := range ends {
		for _, e := range ends[t] {
			sr.LogRecords += e
		}
	}
	sr.WSPublish, sr.HTTPPub = st.wsPub.Load(), st.httpPub.Load()
	sr.ErrorFrame = st.errorFrames.Load()

	rep := &Report{Seconds: elapsed.Seconds(), Connections: int64(len(readers) + len(members) + cfg.publishers + 1), Sent: r.c.sent.Load()}
	classes := map[string]*SoakClass{"fast": {Name: "fast"}, "slow": {Name: "slow"}, "churn": {Name: "churn"}}
	for _, rd := range readers {
		c := classes[rd.class]
		c.Subscribers++
		var expected, tail int64
		for _, t := range rd.topics {
			for p := range rd.next[t] {
				expected += ends[t][p]
				tail += max(0, ends[t][p]-rd.next[t][p].Load())
			}
		}
		c.Expected += expected
		c.Delivered += rd.delivered.Load()
		c.Duplicates += rd.dups.Load()
		c.Unaccounted += rd.unaccounted.Load() + tail
		c.GapRecords += rd.gapRecords.Load()
		c.BadGaps += rd.badGaps.Load()
		c.Reconnects += rd.reconnects.Load()
		c.NotRecovered += rd.notRecovered.Load()
		if rd.gaps.Load() > 0 {
			c.WithGaps++
		}
		if rd.dropped.Load() {
			c.Disconnects++
		}
		rep.Expected += expected
		rep.Delivered += rd.delivered.Load()
		rep.Duplicates += rd.dups.Load()
		rep.Lost += rd.unaccounted.Load() + tail
	}
	for _, name := range []string{"fast", "slow", "churn"} {
		if c := classes[name]; c.Subscribers > 0 {
			sr.Classes = append(sr.Classes, *c)
		}
	}
	g := &sr.Group
	for _, e := range groupEnds {
		g.Records += e
	}
	g.Acked = st.acked.len()
	g.MidAck, g.InFlightCloses, g.Rejoins = st.midAckCloses.Load(), st.inFlightCloses.Load(), st.rejoins.Load()
	g.Deliveries, g.Redeliveries, g.Nacks = st.deliveries.Load(), st.redeliveries.Load(), st.nacks.Load()
	g.LateAcks, g.AckedRedelivered = st.lateAcks.Load(), st.ackedRedelivered.Load()
	g.Unacked = missing(groupEnds, &st.acked, &st.midAck)
	g.Lag, g.DeadLetters = lag, deadLetters
	for _, m := range members {
		if m.dropped.Load() {
			sr.violate("the gateway closed group member %d's connection", m.idx-2_000_000)
		}
	}

	st.verdict(sr, rep, baseline, ref, final, ends)
	rep.Soak = sr
	rep.Notes = append(rep.Notes, "soak: delivered counts distinct plain deliveries; the group's are in the group line")
	return rep, nil
}

// sampleQuiet counts goroutines without recording a sample.
func (st *soak) sampleQuiet(ctx context.Context) int64 {
	if st.r.cfg.inprocess {
		return int64(runtime.NumGoroutine())
	}
	g, _, _ := st.scrape(ctx)
	return g
}

// verdict turns the figures into violations.
func (st *soak) verdict(sr *SoakReport, rep *Report, baseline, ref, final Sample, ends [][]int64) {
	r := st.r
	if e := st.sampleErr.Load(); e != nil {
		sr.violate("sampling the gateway: %v", e)
	}
	if rep.Sent == 0 {
		sr.violate("nothing was published")
	}
	if n := r.c.publishErrors.Load(); n > 0 {
		sr.violate("%d publish(es) failed", n)
	}
	if n := r.c.connFailures.Load(); n > 0 {
		sr.violate("%d connection(s) failed", n)
	}
	if n := st.epochChanges.Load(); n > 0 {
		sr.violate("the gateway's epoch changed %d time(s) during the run", n)
	}
	if n := st.errorFrames.Load(); n > 0 {
		st.frameErrMu.Lock()
		first := strings.Join(st.frameErrs, " | ")
		st.frameErrMu.Unlock()
		sr.violate("clients received %d unexpected frame(s) (errors other than a late ack's not_in_flight); first: %s", n, first)
	}
	if r.c.publishErrors.Load() == 0 {
		for t := range ends {
			var inLog int64
			for p, e := range ends[t] {
				inLog += e
				if lo := st.lastOffset[t][p].Load(); lo > e {
					sr.violate("topic %s partition %d: a publish was confirmed at offset %d but the log ends at %d", r.topics[t], p, lo-1, e)
				}
			}
			if c := st.confirmed[t].Load(); c != inLog {
				sr.violate("topic %s: %d publishes confirmed, %d records in the log", r.topics[t], c, inLog)
			}
		}
	}
	for _, c := range sr.Classes {
		if c.Duplicates > 0 || c.Unaccounted > 0 || c.BadGaps > 0 {
			sr.violate("%s subscribers: %d duplicate or out-of-order deliveries, %d records lost without a gap, %d gaps overlapping deliveries",
				c.Name, c.Duplicates, c.Unaccounted, c.BadGaps)
		}
		if c.Delivered+c.GapRecords != c.Expected && c.Unaccounted == 0 {
			sr.violate("%s subscribers: delivered %d + gap records %d != %d records of their topics", c.Name, c.Delivered, c.GapRecords, c.Expected)
		}
		if c.Disconnects > 0 {
			sr.violate("%s subscribers: the gateway closed %d connection(s)", c.Name, c.Disconnects)
		}
		if c.NotRecovered > 0 {
			sr.violate("%s subscribers: %d resume(s) answered recovered:false", c.Name, c.NotRecovered)
		}
	}
	g := sr.Group
	if g.Records == 0 {
		sr.violate("nothing reached the group topic")
	}
	if g.Unacked > 0 {
		sr.violate("group: %d of %d records never acked by any member", g.Unacked, g.Records)
	}
	if g.AckedRedelivered > 0 {
		sr.violate("group: %d deliveries of records already acked", g.AckedRedelivered)
	}
	if g.Lag != 0 {
		sr.violate("group: committed offsets %d short of the log's end", g.Lag)
	}
	if g.DeadLetters > 0 {
		sr.violate("group: %d dead letter(s)", g.DeadLetters)
	}
	if !r.cfg.inprocess {
		if pid := r.cfg.serverPID; pid > 0 {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
				sr.violate("gateway process %d is gone", pid)
			}
		}
		if err := st.healthy(context.Background()); err != nil {
			sr.violate("gateway health: %v", err)
		}
	}
	if final.Goroutines > baseline.Goroutines+int64(sr.Bounds.GoroutineSlack) {
		sr.violate("goroutines: %d after the load, baseline %d + slack %d (checked for %v after every connection closed)",
			final.Goroutines, baseline.Goroutines, sr.Bounds.GoroutineSlack, settleTimeout)
	}
	if growth := final.HeapBytes - ref.HeapBytes; growth >= sr.Bounds.MaxHeapGrowthBytes {
		sr.violate("heap grew %.1f MiB from %.1fs to the end (bound %d MiB)",
			float64(growth)/(1<<20), ref.T, sr.Bounds.MaxHeapGrowthBytes>>20)
	}
}

// logEnds reads every topic's partitions' next offsets, and the bytes the
// log holds.
func (st *soak) logEnds(ctx context.Context) ([][]int64, int64, error) {
	r := st.r
	ends := make([][]int64, len(r.topics))
	var total int64
	for i, t := range r.topics {
		var info struct {
			Offsets []struct {
				Partition int   `json:"partition"`
				Next      int64 `json:"next"`
				Bytes     int64 `json:"bytes"`
			} `json:"offsets"`
		}
		if err := st.getJSON(ctx, "/v1/topics/"+t, &info); err != nil {
			return nil, 0, err
		}
		ends[i] = make([]int64, st.parts[i])
		for _, o := range info.Offsets {
			if o.Partition >= 0 && o.Partition < len(ends[i]) {
				ends[i][o.Partition] = o.Next
			}
			total += o.Bytes
		}
	}
	return ends, total, nil
}

// groupState reads how far the group's committed offsets are behind ends
// and how many dead letters it has.
func (st *soak) groupState(ctx context.Context, ends []int64) (lag, deadLetters int64, err error) {
	var g struct {
		Partitions []struct {
			Topic     string `json:"topic"`
			Partition int    `json:"partition"`
			Committed int64  `json:"committed"`
		} `json:"partitions"`
	}
	if err := st.getJSON(ctx, "/v1/groups/"+st.group, &g); err != nil {
		return 0, 0, err
	}
	committed := make([]int64, len(ends))
	for _, p := range g.Partitions {
		if p.Topic == st.r.topics[st.gtopic] && p.Partition >= 0 && p.Partition < len(ends) {
			committed[p.Partition] = p.Committed
		}
	}
	for p, e := range ends {
		lag += max(0, e-committed[p])
	}
	var dl struct {
		DeadLetters []json.RawMessage `json:"deadletters"`
	}
	if err := st.getJSON(ctx, "/v1/deadletters?group="+st.group+"&limit=1000", &dl); err != nil {
		return lag, 0, err
	}
	return lag, int64(len(dl.DeadLetters)), nil
}

func (st *soak) healthy(ctx context.Context) error {
	var h struct {
		Status string `json:"status"`
	}
	if err := st.getJSON(ctx, "/healthz", &h); err != nil {
		return err
	}
	if h.Status != "ok" {
		return fmt.Errorf("/healthz status %q", h.Status)
	}
	return nil
}

func (st *soak) getJSON(ctx context.Context, path string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.r.cfg.httpURL+path, nil)
	if err != nil {
		return err
	}
	resp, err := st.r.httpc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d: %.200s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
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
