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
	"context"
	"fmt"
	"net/http"
	"runtime"
	"runtime/pprof"
	"slices"
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

// --- state ---

// soak is one run of the scenario. Its connections update it concurrently;
// fields without a comment are set before any connection starts.
type soak struct {
	r *runner
	// goroutines counts the process's goroutines in an in-process run
	// (runtime.NumGoroutine; a test sets its own).
	goroutines func() int
	// failedConn is the first error of a connection that failed for good
	// during the load (a churner's reconnect, a member's rejoin), so the
	// verdict names it when the progress lines are off.
	failedConn atomic.Value // string
	parts      []int        // partitions per topic index
	gtopic     int          // index of the group topic
	group      string
	start      time.Time

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

	// The steps of runSoak hand these on to each other; only runSoak's
	// goroutine touches them, except phase, which the sampler reads.
	sr                         *SoakReport
	readers                    []*soakReader // plain subscribers, then churners
	members                    []*soakMember
	phase                      atomic.Value  // the label of the sampler's samples (string)
	stopSampling, stopProgress func()        // each runs once, later calls do nothing
	baseline, final            Sample        // before any connection of ours; after all closed
	leftStacks                 string        // in process: the goroutines left over the slack at the end, by stack
	elapsed                    time.Duration // of the publishing
	ends                       [][]int64     // [topic][partition] the log's end after the load
	logBytes                   int64         // what the log holds after the load
	lag, deadLetters           int64         // the group's after the drain
	drainTook                  time.Duration // how long the drain waited
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

// --- the run ---

// runSoak runs the scenario, one step per phase of the comment at the top
// of this file.
func (r *runner) runSoak(ctx context.Context) (*Report, error) {
	st := newSoak(r)
	st.startSampling(ctx) // the baseline comes before any connection of ours
	defer st.stopSampling()
	st.stopProgress = sync.OnceFunc(r.startProgress())
	defer st.stopProgress()

	if err := st.connect(ctx); err != nil {
		return nil, err
	}
	if err := st.load(ctx); err != nil {
		return nil, err
	}
	if err := st.drain(ctx); err != nil {
		return nil, err
	}
	st.settle(ctx)
	return st.figures(), nil
}

// newSoak names the topics and lays out the run's state and bounds; it
// opens nothing.
func newSoak(r *runner) *soak {
	cfg := r.cfg
	r.setTopics("soak", cfg.topics+1)
	st := &soak{
		r: r, gtopic: cfg.topics, group: r.prefix + ".workers", start: time.Now(), goroutines: runtime.NumGoroutine,
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
	st.sr = &SoakReport{Bounds: bounds, Passed: true}
	return st
}

// startSampling takes the baseline sample and starts the sampler, whose
// samples are labelled "load" until the phase changes; st.stopSampling
// stops it and waits for it.
func (st *soak) startSampling(ctx context.Context) {
	st.baseline = st.sample(ctx, "baseline")
	st.phase.Store("load")
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // exits when stop is closed
		defer close(done)
		st.sampler(ctx, &st.phase, stop)
	}()
	st.stopSampling = sync.OnceFunc(func() { close(stop); <-done })
}

// connect creates the topics and connects every plain subscriber, churner
// and group member, at most --concurrency at a time and each within 30s;
// it returns once every subscription is confirmed. If any failed, it
// closes the others and returns an error.
func (st *soak) connect(ctx context.Context) error {
	r, cfg := st.r, st.r.cfg
	for i, t := range r.topics {
		if err := r.createTopic(ctx, t, st.parts[i]); err != nil {
			return err
		}
	}
	st.addClients()

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
	for _, rd := range st.readers {
		dial(rd.connect)
	}
	for _, m := range st.members {
		dial(m.join)
	}
	wg.Wait()
	if n := failures.Load(); n > 0 {
		r.c.connFailures.Add(n)
		st.closeClients()
		return fmt.Errorf("%d connection(s) failed; first: %v", n, firstErr.Load())
	}
	return nil
}

// addClients lays out the plain subscribers (the slow ones first), the
// churners and the group members, none of them connected.
func (st *soak) addClients() {
	cfg := st.r.cfg
	slow := 0
	if cfg.slowShare > 0 && cfg.subscribers > 0 {
		slow = max(1, int(float64(cfg.subscribers)*cfg.slowShare+0.5))
	}
	for i := range cfg.subscribers {
		class := "fast"
		if i < slow {
			class = "slow"
		}
		st.addReader(class, i)
	}
	for i := range cfg.churners {
		st.addReader("churn", i)
	}
	st.members = make([]*soakMember, cfg.members)
	for i := range st.members {
		st.members[i] = &soakMember{st: st, idx: 2_000_000 + i, churn: i == 0 && cfg.members > 1}
	}
}

// addReader adds the i-th plain subscriber of class (fast, slow or churn):
// slow ones read the wildcard with drop_old; the others alternately a
// literal topic and the wildcard, and half the fast ones ask for drop_old.
func (st *soak) addReader(class string, i int) {
	r := st.r
	rd := &soakReader{st: st, idx: len(st.readers), class: class, next: make([][]atomic.Int64, len(r.topics))}
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
	st.readers = append(st.readers, rd)
}

// closeClients closes every plain subscriber's and member's connection
// and waits for every reader goroutine of the run to return.
func (st *soak) closeClients() {
	st.stopping.Store(true)
	var wg sync.WaitGroup
	for _, rd := range st.readers {
		wg.Go(func() { rd.close(false) })
	}
	for _, m := range st.members {
		wg.Go(m.close)
	}
	wg.Wait()
	st.r.wg.Wait()
}

// load runs the churners, with --hostile the hostile clients, and the
// publishers for --duration. It returns once the publishers have stopped
// and their connections are closed, the churners are connected again and
// the hostile clients have stopped and been checked.
func (st *soak) load(ctx context.Context) error {
	cfg := st.r.cfg
	// The hostile clients are made before any churner starts, so that a
	// failure leaves nothing running.
	var hc *hostile
	if cfg.hostile {
		var err error
		if hc, err = newHostile(cfg.url); err != nil {
			st.closeClients()
			return err
		}
	}
	stopChurn := make(chan struct{})
	var churnWG sync.WaitGroup
	for _, rd := range st.readers {
		if rd.class == "churn" {
			churnWG.Go(func() { rd.churn(ctx, stopChurn) })
		}
	}
	for _, m := range st.members {
		if m.churn {
			churnWG.Go(func() { m.churnLoop(ctx, stopChurn) })
		}
	}
	stopHostile := make(chan struct{})
	if hc != nil {
		hc.start(ctx, stopHostile)
	}
	start := time.Now()
	pubConns, pubErr := st.publish(ctx, start.Add(cfg.duration))
	st.elapsed = time.Since(start)
	close(stopChurn)
	churnWG.Wait()
	if hc != nil {
		close(stopHostile)
		hc.wait()
		st.hostileVerdict(ctx, hc)
	}
	for _, c := range pubConns {
		if c != nil {
			_ = c.Close(websocket.StatusNormalClosure, "")
		}
	}
	if pubErr != "" {
		st.sr.violate("publisher: %v", pubErr)
	}
	return nil
}

// publish runs the --publishers WebSocket publishers and the HTTP one
// until deadline. It returns when all have stopped, with the WebSocket
// publishers' connections still open (nil for one that did not connect)
// and the first of their errors.
func (st *soak) publish(ctx context.Context, deadline time.Time) (conns []*websocket.Conn, firstErr string) {
	cfg := st.r.cfg
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
	firstErr, _ = pubErr.Load().(string)
	return pubConns, firstErr
}

// hostileVerdict reports the stopped hostile clients and the evidence in
// the gateway's metrics that each limit was met.
func (st *soak) hostileVerdict(ctx context.Context, hc *hostile) {
	cfg, sr := st.r.cfg, st.sr
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

// drain reads the log's end, now final, and waits up to --drain for every
// subscriber still connected to reach it (slow readers stop lingering),
// for every group record to be acked and for the group's committed offsets
// to follow.
func (st *soak) drain(ctx context.Context) error {
	st.phase.Store("drain")
	for _, rd := range st.readers {
		rd.hurry.Store(true)
	}
	ends, logBytes, err := st.logEnds(ctx)
	if err != nil {
		st.closeClients()
		return err
	}
	st.ends, st.logBytes = ends, logBytes
	// --drain bounds a wait without progress: while the subscribers still
	// owed records keep reading (a loaded machine), the wait goes on, up
	// to drainProgressMax times --drain in all. What is still owed at the
	// end counts as lost.
	start := time.Now()
	drainUntil := start.Add(st.r.cfg.drain)
	owed := st.owed()
	for !st.drained() && time.Now().Before(drainUntil) && ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
		if now := st.owed(); now < owed {
			owed = now
			drainUntil = time.Now().Add(min(st.r.cfg.drain, time.Until(start.Add(drainProgressMax*st.r.cfg.drain))))
		}
	}
	st.drainTook = time.Since(start)
	// The committed offsets follow the acks at once, but a mid-ack close
	// whose ack the gateway never read is settled by a redelivery.
	for {
		st.lag, st.deadLetters, err = st.groupState(ctx, st.ends[st.gtopic])
		if err != nil || st.lag == 0 || !time.Now().Before(drainUntil) || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		st.sr.violate("group state: %v", err)
	}
	return nil
}

// drainProgressMax bounds a drain that keeps progressing, in --drain.
const drainProgressMax = 6

// owed is the records the subscribers still connected have not reached.
func (st *soak) owed() (n int64) {
	for _, rd := range st.readers {
		if rd.dropped.Load() {
			continue
		}
		for _, t := range rd.topics {
			for p := range rd.next[t] {
				n += max(0, st.ends[t][p]-rd.next[t][p].Load())
			}
		}
	}
	return n
}

// drained reports whether every subscriber still connected has reached
// the log's end and every group record was acked.
func (st *soak) drained() bool {
	for _, rd := range st.readers {
		if rd.dropped.Load() {
			continue
		}
		for _, t := range rd.topics {
			for p := range rd.next[t] {
				if rd.next[t][p].Load() < st.ends[t][p] {
					return false
				}
			}
		}
	}
	return missing(st.ends[st.gtopic], &st.acked, &st.midAck) == 0
}

// settle stops the load: it closes every connection, stops the sampler
// and the progress line, and takes the final sample once its goroutines
// are back within the slack of the baseline, or after settleTimeout. The
// sample judged is the one kept: a count taken again afterwards could
// catch a burst of timer callbacks the clock fired together.
func (st *soak) settle(ctx context.Context) {
	r := st.r
	st.closeClients()
	st.stopProgress()
	st.stopSampling()
	r.httpc.CloseIdleConnections()
	st.phase.Store("final")
	bound := st.baseline.Goroutines + int64(r.cfg.goroutineSlack)
	settle := time.Now().Add(settleTimeout)
	for {
		s := st.measure(ctx, "final")
		if s.Goroutines <= bound || !time.Now().Before(settle) || ctx.Err() != nil {
			st.final = st.record(s)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if r.cfg.inprocess && st.final.Goroutines > bound {
		st.leftStacks = goroutineStacks(4 << 10)
	}
}

// goroutineStacks is this process's goroutines grouped by stack, most
// common first as the runtime lists them, cut at max bytes: what a
// verdict of goroutines left after the load shows.
func goroutineStacks(max int) string {
	var sb strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&sb, 1)
	s := sb.String()
	if len(s) > max {
		s = s[:max] + "…"
	}
	return s
}

// figures sums the run up into its report and checks it.
func (st *soak) figures() *Report {
	r, sr := st.r, st.sr
	st.sampleMu.Lock()
	sr.Samples = slices.Clone(st.samples)
	st.sampleMu.Unlock()
	ref := st.heapRef()
	if h := sr.Hostile; h != nil {
		for _, x := range sr.Samples {
			if x.Phase == "load" {
				h.PeakHeap, h.PeakRSS = max(h.PeakHeap, x.HeapBytes), max(h.PeakRSS, x.RSSBytes)
			}
		}
		if growth := h.PeakHeap - st.baseline.HeapBytes; growth > h.MaxHeapBytes {
			sr.violate("hostile: peak heap during the load %.1f MiB above the baseline, over %d MiB",
				float64(growth)/(1<<20), r.cfg.hostileHeapMB)
		}
	}
	base, final := st.baseline, st.final
	sr.Goroutines = SoakDelta{Baseline: base.Goroutines, Final: final.Goroutines, Growth: final.Goroutines - base.Goroutines}
	sr.Heap = SoakDelta{Baseline: ref.HeapBytes, Final: final.HeapBytes, Growth: final.HeapBytes - ref.HeapBytes}
	sr.LogBytes = st.logBytes
	for t := range st.ends {
		for _, e := range st.ends[t] {
			sr.LogRecords += e
		}
	}
	sr.WSPublish, sr.HTTPPub = st.wsPub.Load(), st.httpPub.Load()
	sr.ErrorFrame = st.errorFrames.Load()

	rep := &Report{Seconds: st.elapsed.Seconds(), Connections: int64(len(st.readers) + len(st.members) + r.cfg.publishers + 1), Sent: r.c.sent.Load()}
	st.readerFigures(rep)
	st.groupFigures()
	st.verdict(sr, rep, base, ref, final, st.ends)
	rep.Soak = sr
	rep.Notes = append(rep.Notes, "soak: delivered counts distinct plain deliveries; the group's are in the group line")
	return rep
}

// heapRef is the sample heap growth is measured from: the first of the
// load after the warm-up, else the load's last, else the baseline.
func (st *soak) heapRef() Sample {
	ref := st.baseline
	for _, s := range st.sr.Samples {
		if s.Phase == "load" && s.T >= st.sr.Bounds.WarmupS {
			ref = s
			break
		}
	}
	if ref.Phase == "baseline" {
		for _, s := range st.sr.Samples {
			if s.Phase == "load" {
				ref = s
			}
		}
	}
	return ref
}

// readerFigures sums the plain subscribers up by class into the soak
// report and into rep's totals.
func (st *soak) readerFigures(rep *Report) {
	classes := map[string]*SoakClass{"fast": {Name: "fast"}, "slow": {Name: "slow"}, "churn": {Name: "churn"}}
	for _, rd := range st.readers {
		c := classes[rd.class]
		c.Subscribers++
		var expected, tail int64
		for _, t := range rd.topics {
			for p := range rd.next[t] {
				expected += st.ends[t][p]
				tail += max(0, st.ends[t][p]-rd.next[t][p].Load())
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
			st.sr.Classes = append(st.sr.Classes, *c)
		}
	}
}

// groupFigures sums the consumer group up into the soak report; a member
// whose connection the gateway closed is a violation.
func (st *soak) groupFigures() {
	sr := st.sr
	groupEnds := st.ends[st.gtopic]
	g := &sr.Group
	for _, e := range groupEnds {
		g.Records += e
	}
	g.Acked = st.acked.len()
	g.MidAck, g.InFlightCloses, g.Rejoins = st.midAckCloses.Load(), st.inFlightCloses.Load(), st.rejoins.Load()
	g.Deliveries, g.Redeliveries, g.Nacks = st.deliveries.Load(), st.redeliveries.Load(), st.nacks.Load()
	g.LateAcks, g.AckedRedelivered = st.lateAcks.Load(), st.ackedRedelivered.Load()
	g.Unacked = missing(groupEnds, &st.acked, &st.midAck)
	g.Lag, g.DeadLetters = st.lag, st.deadLetters
	sr.DrainS = st.drainTook.Seconds()
	for _, m := range st.members {
		if m.dropped.Load() {
			sr.violate("the gateway closed group member %d's connection", m.idx-2_000_000)
		}
	}
}
