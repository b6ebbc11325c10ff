package main

// The torture run, go run ./loadtest torture: a seeded, randomised, time-
// bounded run against an embedded gateway (--engine memory or embedded)
// that checks the gateway's promises rather than its speed. It prints its
// seed first; --seed N chooses the same mix of clients and behaviours again
// (timing still differs from run to run).
//
// At once, for --duration, it runs: pipelined WebSocket publishers and
// HTTP publishers, with and without keys and msg_ids, killed now and then;
// a pair of publishers that send the same msg_id on two connections at
// once, one of them behind a batch of ordinary publishes in the same read;
// exact and wildcard subscribers over raw WebSocket (resumed from the
// positions they saw), SSE (resumed with last_event_id) and the Go client
// (resumed by the client), killed abruptly now and then; slow readers,
// non-readers killed while a keepalive ping waits for them, clients that
// ping, clients killed in the middle of a frame; consumer-group members
// that ack, nack, stall and crash, and an HTTP pull member; a stalled
// member that keeps a Block topic full; topic deletes and re-creates; and
// presence churn.
//
// It checks, each with a one-line verdict at the end:
//
//  1. delivery: every acknowledged publish reaches every live subscriber
//     whose pattern matches, in per-partition order, or falls inside a gap
//     the subscriber was told about (from a subscriber's first subscription
//     on, across its kills and resumes; records of deleted generations of a
//     topic excepted);
//  2. stall: no reading subscriber waits more than --stall for a record
//     acknowledged while this process was not starved of CPU; after a
//     resume, the records published since queue behind the replay of what
//     the subscriber missed, so their clock starts when that replay is
//     done, and the replay itself may not go --stall without a record;
//  3. groups: every acknowledged record of the checked group is acked by
//     some member or dead-lettered, no ack is confirmed twice, and nothing
//     is delivered again after its ack;
//  4. baseline: --settle after every client left, the gateway holds no
//     connection and no subscription, and this process's goroutines and
//     file descriptors are back at their baseline; after the run's topics
//     are deleted, so is the live heap;
//  5. no panic, no deadlock: the gateway logged no panic and stopped
//     cleanly, publishes kept being acknowledged, and a watchdog dumps
//     every goroutine and fails the run when it overruns its time;
//  6. attacks (torture_attacks.go, --without attacks leaves them out): the
//     hostile soak's SSE non-readers, forged Last-Event-IDs, presence
//     churn beside slow members, group-name spray, never-acking
//     multi-group session and connect storm against a slow hook each met
//     their bound, and broke no promise they check.
//
// It exits 1 when any verdict is FAIL. See torture_ledger.go for the
// books behind 1 and 2 and torture_groups.go for 3.
//
// Graceful gateway restarts (--restart-every; torture_gateway.go): on the
// embedded engine, and one gateway at a time with --cluster, a gateway is
// stopped gracefully and started again on the same address and data
// while every client runs; clients reconnect and resume, and every
// invariant above still holds. An SSE stream resumed on the new process
// is answered "recovered": false and replayed from the earliest records,
// as router/sse_resume.go promises for an id the process does not know;
// the books accept that replay (sview.unrecovered) and still check its
// order and completeness. The memory engine is never restarted: its log
// dies with the process by design.
//
// --cluster runs three gateways on three clustered NATS servers; each
// client uses one gateway chosen by the seed, so publishes made on one
// node are checked at subscribers and members of the others.
//
// Subscribers of every kind subscribe to topics that are deleted and
// created again. A subscriber connected through a delete is told
// topic_deleted and then gets the new topic from offset 0. One that was
// away (killed) while a topic was deleted and created again resumes with
// positions of the old topic, which name no incarnation, so the new
// topic's records up to those positions are skipped without a word: the
// protocol cannot tell, and the books excuse exactly those records
// (sview.deletedWhile), counted in invariant 1's figures.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// tortureConfig holds the flags of a torture run.
type tortureConfig struct {
	seed         int64
	duration     time.Duration
	stall        time.Duration
	settle       time.Duration
	drain        time.Duration
	keepalive    time.Duration
	engine       string
	cluster      bool
	restartEvery time.Duration
	ackTimeout   time.Duration // the groups' ack timeout; zero: tortureAckTimeout (tests only)
	writeTimeout time.Duration // the sessions' write timeout; zero: the default (tests only)
	quiet        bool
	without      map[string]bool // behaviours left out
}

// tortureBehaviours can be left out with --without, to tell which one a
// failure needs.
var tortureBehaviours = []string{"same-msg-id", "deletes", "non-readers", "kills", "sse", "client", "groups", "mid-frame", "presence", "restarts", "attacks"}

func parseTortureFlags(args []string, stderr io.Writer) (*tortureConfig, error) {
	fs := flag.NewFlagSet("loadtest torture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg := &tortureConfig{}
	fs.Int64Var(&cfg.seed, "seed", 0, "seed of the run's choices; 0: a new one (printed first)")
	fs.DurationVar(&cfg.duration, "duration", 30*time.Second, "how long the load runs")
	fs.DurationVar(&cfg.stall, "stall", 2*time.Second, "longest a reading subscriber may wait for an acknowledged record")
	fs.DurationVar(&cfg.settle, "settle", 5*time.Second, "how soon after every client left the gateway must be back at its baseline")
	fs.DurationVar(&cfg.drain, "drain", 30*time.Second, "how long to wait after the load for subscribers and the group to catch up")
	fs.DurationVar(&cfg.keepalive, "keepalive", time.Second, "the embedded gateway's keepalive ping interval")
	fs.StringVar(&cfg.engine, "engine", "memory", "the embedded gateway's engine: memory or embedded (JetStream on an embedded NATS server)")
	fs.BoolVar(&cfg.cluster, "cluster", false, "three gateways on three clustered NATS servers (implies --engine embedded)")
	fs.DurationVar(&cfg.restartEvery, "restart-every", 15*time.Second, "mean time between graceful gateway restarts (not on the memory engine)")
	fs.BoolVar(&cfg.quiet, "quiet", false, "no progress lines")
	without := fs.String("without", "", "comma-separated behaviours to leave out, of: "+strings.Join(tortureBehaviours, ", "))
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	cfg.without = map[string]bool{}
	for _, w := range strings.Split(*without, ",") {
		if w = strings.TrimSpace(w); w == "" {
			continue
		}
		if !slices.Contains(tortureBehaviours, w) {
			return nil, fmt.Errorf("--without %q: want some of %s", w, strings.Join(tortureBehaviours, ", "))
		}
		cfg.without[w] = true
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	case cfg.duration <= 0 || cfg.stall <= 0 || cfg.settle <= 0 || cfg.drain <= 0 || cfg.keepalive <= 0 || cfg.restartEvery <= 0:
		return nil, errors.New("--duration, --stall, --settle, --drain, --keepalive and --restart-every must be positive")
	case cfg.cluster && cfg.engine == "memory" && engineSet(fs):
		return nil, errors.New("--cluster runs on the embedded engine; leave --engine out")
	case cfg.engine != "memory" && cfg.engine != "embedded":
		return nil, fmt.Errorf("--engine %q: want memory or embedded", cfg.engine)
	}
	if cfg.cluster {
		cfg.engine = "embedded"
	}
	if cfg.engine == "memory" {
		// The memory engine's log dies with its process: see
		// torture_gateway.go.
		cfg.without["restarts"] = true
	}
	if !cfg.without["restarts"] {
		// The attacks check bounds of a gateway that stays up: a restart
		// closes their sessions (1001) and answers 503 while it stops,
		// which they would report as broken promises.
		cfg.without["attacks"] = true
	}
	if cfg.seed == 0 {
		cfg.seed = time.Now().UnixNano() & (1<<53 - 1)
	}
	return cfg, nil
}

// engineSet reports whether --engine was given.
func engineSet(fs *flag.FlagSet) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "engine" })
	return set
}

// tortureCommand is go run ./loadtest torture; it returns the exit code.
func tortureCommand(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, err := parseTortureFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadtest torture:", err)
		return 2
	}
	mode := cfg.engine
	if cfg.cluster {
		mode = "embedded, cluster of 3"
	}
	restarts := "every ~" + cfg.restartEvery.String() + " (attacks left out)"
	if cfg.without["restarts"] {
		restarts = "none"
	}
	fmt.Fprintf(stdout, "torture: seed %d, engine %s, duration %v, stall bound %v, settle bound %v, gateway restarts %s\n",
		cfg.seed, mode, cfg.duration, cfg.stall, cfg.settle, restarts)
	ok, err := runTorture(ctx, cfg, stdout, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "loadtest torture:", err)
		return 1
	}
	if !ok {
		replay := "--engine " + cfg.engine
		if cfg.cluster {
			replay = "--cluster"
		}
		fmt.Fprintf(stdout, "torture: FAIL (replay with --seed %d %s)\n", cfg.seed, replay)
		return 1
	}
	fmt.Fprintln(stdout, "torture: PASS")
	return 0
}

// torture is one run. Counters are updated concurrently.
type torture struct {
	cfg     *tortureConfig
	gw      *tortureGateway
	hostile *hostile
	l       *ledger
	groups  *groupLedger
	sse     *http.Client

	plain, deletable, groupTopics []*tortureTopic
	pubTopics                     []*tortureTopic
	block                         *tortureTopic
	quiet                         *tortureTopic // published to by sameIDPublishers only
	deleteMu                      sync.RWMutex  // held by resumes shared, by deletes exclusively

	msgIDs, kills, deletes, resets, sameIDRounds atomic.Int64
	restarts, worstRestart                       atomic.Int64 // count, nanoseconds
	subsOnDeleted                                atomic.Int64 // SSE and Go client subscribers whose pattern matches a deleted topic
	pubErrors, subErrors, dialErrors, badFrames  atomic.Int64
	setupErrors                                  atomic.Int64
	v5                                           violations
}

// baseline is what the process holds without clients.
type baseline struct {
	goroutines, fds, conns, subs int64
	heap                         uint64      // live heap, the NATS servers' share included
	natsHeap                     uint64      // the embedded NATS servers' share (heapsplit.go)
	stacks                       stackCounts // goroutines by stack
}

// gatewayHeap is the live heap less the NATS servers' share.
func (b baseline) gatewayHeap() uint64 { return b.heap - min(b.natsHeap, b.heap) }

func (tr *torture) measure(ctx context.Context) baseline {
	runtime.GC()
	runtime.GC() // the heap profile is as of the collection before the last
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	b := baseline{goroutines: int64(runtime.NumGoroutine()), heap: ms.HeapAlloc, stacks: takeStackCounts()}
	if tr.gw.nats != nil {
		b.natsHeap = heapAllocatedUnder(natsServerPkg)
	}
	if ents, err := os.ReadDir("/proc/self/fd"); err == nil {
		b.fds = int64(len(ents))
	}
	b.conns, b.subs = tr.gw.gauges(ctx)
	return b
}

func runTorture(ctx context.Context, cfg *tortureConfig, stdout, stderr io.Writer) (bool, error) {
	started := time.Now()
	if cfg.quiet {
		stderr = io.Discard
	}
	gw, err := startTortureGateway(cfg)
	if err != nil {
		return false, err
	}
	gwStopped := false
	defer func() {
		if !gwStopped {
			_ = gw.stop()
		}
	}()
	h, err := newHostile(gw.nodes[0].wsURL)
	if err != nil {
		return false, err
	}
	over := &overloadWatch{}
	h.starved = func(from, to time.Time) bool { return over.during(from.UnixNano(), to.UnixNano()) }
	tr := &torture{cfg: cfg, gw: gw, hostile: h, groups: &groupLedger{recs: map[pkey]*grec{}},
		sse: &http.Client{Transport: &http.Transport{}}}
	all, err := tr.makeTopics(ctx, over)
	if err != nil {
		return false, err
	}

	// Background checkers, started before the baseline so that it counts
	// their goroutines.
	stopCheckers := tr.startCheckers(over)
	defer stopCheckers()
	hard := cfg.duration + 2*cfg.drain + cfg.settle + 90*time.Second
	watchdog := time.AfterFunc(hard, func() {
		fmt.Fprintf(stdout, "invariant 5 (no panic, no deadlock): FAIL  the run overran %v; every goroutine:\n", hard)
		_ = pprof.Lookup("goroutine").WriteTo(stdout, 2)
		os.Exit(3)
	})
	defer watchdog.Stop()

	if gw.nats != nil {
		if err := gw.nats.waitStreams(ctx, time.Minute); err != nil {
			return false, err
		}
	}
	base := tr.measure(ctx)
	if base.conns < 0 {
		return false, errors.New("cannot read the gateway's /metrics")
	}

	// The load, then the drain: subscribers reconnected and reading, then
	// caught up; the group settled.
	cctx, cancelClients := context.WithCancel(ctx)
	defer cancelClients()
	stop := make(chan struct{})
	clients, final := tr.startLoad(ctx, cctx, stop, stderr)
	tr.progress(ctx, started, stderr)
	close(stop)
	loadEnd := time.Now()
	unsettled := tr.drain(ctx, final)
	drained := time.Since(loadEnd)

	// Every client leaves (the non-readers and raw subscribers without a
	// close frame), then the process comes back to its baseline.
	cancelClients()
	clients.Wait()
	f := tr.backToBaseline(ctx, base, all)
	f.unsettled, f.drained, f.started = unsettled, drained, started

	gwStopped = true
	f.stopErr = gw.stop()
	if f.stopErr != nil {
		tr.v5.add("the gateway did not stop cleanly: %v", f.stopErr)
	}
	var problems []string
	f.problems, problems = gw.problems.snapshot()
	for _, p := range problems {
		if strings.Contains(strings.ToLower(p), "panic") {
			tr.v5.add("the gateway logged: %s", p)
		}
	}
	return tr.report(stdout, f), nil
}

// makeTopics names the run's topics, makes the ledger and creates the
// topics on the gateway, the Block topic filled so that its publishes wait
// from the start; it returns every topic but the Block one.
func (tr *torture) makeTopics(ctx context.Context, over *overloadWatch) ([]*tortureTopic, error) {
	mk := func(name string, parts int) *tortureTopic { return &tortureTopic{name: name, parts: parts} }
	for i := range 4 {
		tr.plain = append(tr.plain, mk(fmt.Sprintf("tt.a.%d", i), 2))
	}
	tr.deletable = []*tortureTopic{mk("tt.d.0", 2), mk("tt.d.1", 1)}
	for _, t := range tr.deletable {
		t.deletable = true
	}
	tr.quiet = mk("tt.q.0", 1)
	tr.groupTopics = []*tortureTopic{mk("tg.0", 2), mk("tg.1", 2)}
	tr.block = mk("tb.0", 1)
	all := append(append(append([]*tortureTopic{}, tr.plain...), tr.deletable...), tr.groupTopics...)
	tr.pubTopics = all
	if tr.cfg.without["groups"] {
		tr.pubTopics = append(append([]*tortureTopic{}, tr.plain...), tr.deletable...)
	}
	all = append(all, tr.quiet)
	tr.l = newLedger(append(all, tr.block), tr.cfg.stall, over)
	for _, t := range all {
		if err := tr.createTopic(ctx, t, ""); err != nil {
			return nil, err
		}
	}
	if err := tr.createTopic(ctx, tr.block, `,"on_full":"block","block_timeout":"4s","retention":{"max_messages":16}`); err != nil {
		return nil, err
	}
	for i := range 16 {
		body := appendTorturePublish(nil, -1, tr.block.name, "", "fill"+itoa(i), time.Now(), 0)
		if _, status, err := tr.do(ctx, http.MethodPost, "/v1/publish", body); err != nil || status != http.StatusOK {
			return nil, fmt.Errorf("filling %s: status %d: %v", tr.block.name, status, err)
		}
	}
	return all, nil
}

// startCheckers starts the overload watch and the stall checker; the
// function it returns stops both and waits for them.
func (tr *torture) startCheckers(over *overloadWatch) (stop func()) {
	bgStop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(2)
	go func() { defer bg.Done(); over.run(bgStop) }()
	go func() { // checks stalls until bgStop
		defer bg.Done()
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-bgStop:
				return
			case now := <-t.C:
				tr.l.mu.Lock()
				subs := append([]*sview(nil), tr.l.subs...)
				tr.l.mu.Unlock()
				for _, v := range subs {
					v.checkStalls(now)
				}
			}
		}
	}()
	return func() { close(bgStop); bg.Wait() }
}

// progress prints the run's figures every second for --duration, and is
// the second half of the deadlock check: acknowledged publishes must keep
// coming while the load runs.
func (tr *torture) progress(ctx context.Context, started time.Time, stderr io.Writer) {
	end := time.Now().Add(tr.cfg.duration)
	lastAcked, lastMove := int64(0), time.Now()
	for time.Now().Before(end) && ctx.Err() == nil {
		pause(ctx, time.Second)
		a := tr.l.acked.Load()
		if a != lastAcked {
			lastAcked, lastMove = a, time.Now()
		} else if time.Since(lastMove) > 15*time.Second {
			tr.v5.add("no publish acknowledged for %v", time.Since(lastMove).Round(time.Second))
			var sb strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&sb, 1)
			fmt.Fprintf(stderr, "torture: no progress; goroutines:\n%s\n", sb.String())
			lastMove = time.Now()
		}
		fmt.Fprintf(stderr, "torture: %v acked %d delivered %d gapped %d group acks %d kills %d deletes %d | v1 %d v2 %d v3 %d\n",
			time.Since(started).Round(time.Second), a, tr.l.delivered.Load(), tr.l.gapped.Load(), tr.groups.acks.Load(),
			tr.kills.Load(), tr.deletes.Load(), tr.l.v1.count(), tr.l.v2.count(), tr.groups.v.count())
	}
}

// drain waits, each for at most --drain, for the subscribers to be back
// and reading (final), for them to have every record owed (then reports
// what is missing), and for the group to settle; it returns the group's
// unsettled records.
func (tr *torture) drain(ctx context.Context, final *sync.WaitGroup) (unsettled int64) {
	cfg := tr.cfg
	waitGroupFor(final, cfg.drain)
	drainEnd := time.Now().Add(cfg.drain)
	for time.Now().Before(drainEnd) && ctx.Err() == nil {
		missing := int64(0)
		for _, v := range tr.l.subs {
			missing += v.missing(false)
		}
		if missing == 0 {
			break
		}
		pause(ctx, 200*time.Millisecond)
	}
	for _, v := range tr.l.subs {
		v.missing(true)
	}
	if cfg.without["groups"] {
		// No member joined the checked group: there is nothing to settle.
		return 0
	}
	var err error
	for time.Now().Before(drainEnd.Add(cfg.drain)) && ctx.Err() == nil {
		if unsettled, err = tr.unsettled(ctx, false); err == nil && unsettled == 0 {
			break
		}
		pause(ctx, 500*time.Millisecond)
	}
	if unsettled, err = tr.unsettled(ctx, true); err != nil {
		tr.groups.v.add("%v", err)
	}
	return unsettled
}

// backToBaseline measures the process once every client has left: the
// connections, subscriptions, goroutines and descriptors within
// --settle, then, once the run's topics and groups are deleted, the heap.
func (tr *torture) backToBaseline(ctx context.Context, base baseline, all []*tortureTopic) verdictFigures {
	cfg := tr.cfg
	left := time.Now()
	http.DefaultClient.CloseIdleConnections()
	tr.sse.CloseIdleConnections()
	f := verdictFigures{base: base}
	settled := false
	for time.Since(left) < cfg.settle {
		f.last = tr.measure(ctx)
		if f.last.conns == base.conns && f.last.subs == base.subs &&
			f.last.goroutines <= base.goroutines+goroutineSlack && f.last.fds <= base.fds+fdSlack {
			settled = true
			break
		}
		pause(ctx, 100*time.Millisecond)
	}
	f.settleTook = time.Since(left)
	if !settled && f.last.goroutines > base.goroutines+goroutineSlack {
		f.grown = base.stacks.growth(f.last.stacks, 12, 6)
	}
	for _, t := range append(all, tr.block) {
		_, _, _ = tr.do(ctx, http.MethodDelete, "/v1/topics/"+t.name, nil)
	}
	for _, g := range []string{tortureGroup, tortureBlockGroup} {
		_, _, _ = tr.do(ctx, http.MethodDelete, "/v1/groups/"+g, nil)
	}
	http.DefaultClient.CloseIdleConnections()
	// The embedded engine's NATS server runs in this process: its block
	// caches of the deleted streams expire on its own timers, so the heap
	// is given heapSettle to come back.
	f.after = tr.measure(ctx)
	heapSlack := tr.heapSlackMiB()
	heapOK := f.after.gatewayHeap() <= base.gatewayHeap()+heapSlack<<20
	for heapEnd := time.Now().Add(heapSettle); !heapOK && time.Now().Before(heapEnd) && ctx.Err() == nil; {
		pause(ctx, 500*time.Millisecond)
		f.after = tr.measure(ctx)
		heapOK = f.after.gatewayHeap() <= base.gatewayHeap()+heapSlack<<20
	}
	f.settled = settled && heapOK
	return f
}

// grownLines are the lines of a stack growth, as a verdict's examples.
func grownLines(grown string) []string {
	if grown == "" {
		return nil
	}
	return append([]string{"goroutines over the baseline, by stack:"}, strings.Split(strings.TrimRight(grown, "\n"), "\n")...)
}

// verdictFigures are the figures of a run's end that the verdicts use.
type verdictFigures struct {
	settled           bool
	settleTook        time.Duration
	base, last, after baseline
	unsettled         int64
	grown             string // the goroutines over the baseline, by stack, when too many
	stopErr           error
	problems          int
	drained           time.Duration
	started           time.Time
}

// report prints a verdict per invariant and the run's figures; it reports
// whether every verdict is PASS.
func (tr *torture) report(stdout io.Writer, f verdictFigures) bool {
	ok := true
	verdict := func(name string, pass bool, figures string, examples []string) {
		word := "PASS"
		if !pass {
			word, ok = "FAIL", false
		}
		fmt.Fprintf(stdout, "%s: %s  %s\n", name, word, figures)
		for _, e := range examples {
			fmt.Fprintf(stdout, "    %s\n", e)
		}
	}
	var missingTotal int64
	for _, v := range tr.l.subs {
		missingTotal += v.missing(false)
	}
	v1 := tr.l.v1.count()
	verdict("invariant 1 (every acknowledged record arrives, in order, or in a gap)", v1 == 0,
		fmt.Sprintf("%d acknowledged publishes, %d deliveries checked over %d subscribers, %d records in gaps, %d resumes told \"recovered\": false, %d records excused after a delete while away, %d missing, %d violations",
			tr.l.acked.Load(), tr.l.delivered.Load(), len(tr.l.subs), tr.l.gapped.Load(), tr.l.unrecovered.Load(), tr.l.excusedCount(), missingTotal, v1), tr.l.v1.examples())
	over := tr.l.over
	over.mu.Lock()
	overloaded := over.total
	over.mu.Unlock()
	v2 := tr.l.v2.count()
	verdict("invariant 2 (no reading subscriber waits over the stall bound)", v2 == 0,
		fmt.Sprintf("%d stalls over %v, worst wait %v, longest replay after a resume %v, process starved for %v in all",
			v2, tr.cfg.stall, time.Duration(tr.l.worstWait.Load()).Round(time.Millisecond),
			time.Duration(tr.l.worstCatchUp.Load()).Round(time.Millisecond), overloaded.Round(time.Millisecond)), tr.l.v2.examples())
	v3 := tr.groups.v.count()
	verdict("invariant 3 (group records acked or dead-lettered, once, never redelivered after ack)", v3 == 0,
		fmt.Sprintf("%d deliveries, %d confirmed acks, %d acked with the confirmation lost, %d unsettled, %d violations",
			tr.groups.deliveries.Load(), tr.groups.acks.Load(), tr.groups.unconfirmed.Load(), f.unsettled, v3), tr.groups.v.examples())
	verdict("invariant 4 (back to baseline once every client left)", f.settled,
		fmt.Sprintf("after %v: connections %d (baseline %d), subscriptions %d (%d), goroutines %d (%d, slack %d), fds %d (%d, slack %d); gateway heap %d MiB (%d MiB, slack %d MiB), NATS servers' heap %d MiB (%d MiB)",
			f.settleTook.Round(time.Millisecond), f.last.conns, f.base.conns, f.last.subs, f.base.subs, f.last.goroutines, f.base.goroutines, goroutineSlack,
			f.last.fds, f.base.fds, fdSlack, f.after.gatewayHeap()>>20, f.base.gatewayHeap()>>20, tr.heapSlackMiB(),
			f.after.natsHeap>>20, f.base.natsHeap>>20), grownLines(f.grown))
	v5 := tr.v5.count()
	verdict("invariant 5 (no panic, no deadlock)", v5 == 0,
		fmt.Sprintf("%d gateway warnings or errors logged, stopped cleanly: %v", f.problems, f.stopErr == nil), tr.v5.examples())
	if !tr.cfg.without["attacks"] {
		problems, figures := tr.attackVerdict()
		verdict("invariant 6 (every attack met its bound)", len(problems) == 0, figures, problems)
	}
	fmt.Fprintf(stdout, "torture: records checked %d (deliveries %d, group deliveries %d), publishes acknowledged %d, kills %d, topic deletes %d (SSE and Go client subscribers on them %d), gateway restarts %d (longest away %v), same-msg_id rounds %d, resets %d, publish errors %d, setup errors %d, drained in %v, run time %v\n",
		tr.l.delivered.Load()+tr.groups.deliveries.Load(), tr.l.delivered.Load(), tr.groups.deliveries.Load(), tr.l.acked.Load(),
		tr.kills.Load(), tr.deletes.Load(), tr.subsOnDeleted.Load(), tr.restarts.Load(), time.Duration(tr.worstRestart.Load()).Round(time.Millisecond),
		tr.sameIDRounds.Load(), tr.resets.Load(), tr.pubErrors.Load(), tr.setupErrors.Load(),
		f.drained.Round(time.Millisecond), time.Since(f.started).Round(time.Millisecond))
	if tr.l.acked.Load() == 0 || tr.l.delivered.Load() == 0 {
		fmt.Fprintln(stdout, "torture: FAIL: nothing was published or delivered; the run checked nothing")
		ok = false
	}
	return ok
}

// startLoad starts every client of the run, on cctx, with choices drawn
// from the seed; the publishers and churners stop when stop is closed,
// the rest when cctx ends. clients is done when every client has left,
// final when every subscriber is connected and reading after stop.
// It is about 110 lines on purpose: one short loop per kind of client, in
// the order they start, each drawing from the one seeded source; the list
// reads as the run's cast.
func (tr *torture) startLoad(ctx, cctx context.Context, stop <-chan struct{}, stderr io.Writer) (clients, final *sync.WaitGroup) {
	cfg := tr.cfg
	master := rand.New(rand.NewPCG(uint64(cfg.seed), 0x70727475))
	clients, final = &sync.WaitGroup{}, &sync.WaitGroup{}
	n := 0
	spawn := func(f func(rng *rand.Rand)) {
		n++
		rng := rand.New(rand.NewPCG(uint64(cfg.seed), uint64(n)))
		clients.Add(1)
		go func() { defer clients.Done(); f(rng) }()
	}
	patterns := []string{"tt.a.1", "tt.a.*", "tt.#", "tt.d.0", "tt.*.0", "#", "tg.*", "tt.a.3", "tt.d.*"}
	// Deleted topics too (tt.d.*): see sview.deletedWhile.
	clientPatterns := []string{"tt.a.*", "tt.a.2", "tg.#", "tt.a.0", "tt.d.*", "tt.#", "tt.d.0"}
	counts := map[string]int{
		"ws publishers": 2 + master.IntN(3), "http publishers": 1 + master.IntN(2), "same-msg_id pairs": 1,
		"raw subscribers": 6 + master.IntN(4), "sse subscribers": 1 + master.IntN(2), "client subscribers": 1 + master.IntN(2),
		"members": 2 + master.IntN(3), "pull members": 1, "non-readers": 2 + master.IntN(2), "mid-frame": 1,
		"presence": 1 + master.IntN(2),
	}
	for _, w := range []struct{ behaviour, count string }{{"sse", "sse subscribers"}, {"client", "client subscribers"},
		{"non-readers", "non-readers"}, {"mid-frame", "mid-frame"}, {"presence", "presence"}, {"same-msg-id", "same-msg_id pairs"},
		{"groups", "members"}, {"groups", "pull members"}} {
		if cfg.without[w.behaviour] {
			counts[w.count] = 0
		}
	}
	spawn(func(*rand.Rand) { tr.blockStaller(cctx) })
	// A member first, so that it fixes the group's window.
	for range counts["members"] {
		spawn(func(rng *rand.Rand) { tr.member(cctx, rng, stop) })
	}
	for i := range counts["raw subscribers"] {
		p := patterns[master.IntN(len(patterns))]
		slow, ping := master.IntN(4) == 0, master.IntN(3) == 0
		if i == 0 {
			p, slow = tr.quiet.name, false // see sameIDPublishers
		}
		v := tr.l.newView(fmt.Sprintf("raw%d", n), p, !slow)
		final.Add(1)
		steady := i == 0 // never killed
		spawn(func(rng *rand.Rand) {
			tr.rawSubscriber(cctx, rng, v, slow, ping, steady, stop, sync.OnceFunc(final.Done))
		})
	}
	onDeleted := func(p string) string {
		if patternMatches(p, tr.deletable[0].name) || patternMatches(p, tr.deletable[1].name) {
			tr.subsOnDeleted.Add(1)
		}
		return p
	}
	// The first SSE and the first Go client subscriber are on deleted
	// topics; the others' patterns are drawn.
	pickClient := func(i int, first string) string {
		p := clientPatterns[master.IntN(len(clientPatterns))]
		if i == 0 && !cfg.without["deletes"] {
			p = first
		}
		return onDeleted(p)
	}
	for i := range counts["sse subscribers"] {
		v := tr.l.newView(fmt.Sprintf("sse%d", n), pickClient(i, "tt.d.*"), true)
		final.Add(1)
		spawn(func(rng *rand.Rand) { tr.sseSubscriber(cctx, rng, v, stop, sync.OnceFunc(final.Done)) })
	}
	for i := range counts["client subscribers"] {
		v := tr.l.newView(fmt.Sprintf("client%d", n), pickClient(i, "tt.d.0"), true)
		final.Add(1)
		spawn(func(rng *rand.Rand) { tr.clientSubscriber(cctx, rng, v, stop, sync.OnceFunc(final.Done)) })
	}
	pause(ctx, 500*time.Millisecond) // subscribers first: most records are owed to someone
	for range counts["ws publishers"] {
		spawn(func(rng *rand.Rand) { tr.wsPublisher(cctx, rng, stop) })
	}
	for range counts["http publishers"] {
		spawn(func(rng *rand.Rand) { tr.httpPublisher(cctx, rng, stop) })
	}
	for range counts["same-msg_id pairs"] {
		spawn(func(rng *rand.Rand) { tr.sameIDPublishers(cctx, rng, stop) })
	}
	for range counts["pull members"] {
		spawn(func(rng *rand.Rand) { tr.pullMember(cctx, rng, stop) })
	}
	for range counts["non-readers"] {
		spawn(func(rng *rand.Rand) { tr.nonReader(cctx, rng, stop) })
	}
	for range counts["mid-frame"] {
		spawn(func(rng *rand.Rand) { tr.midFrame(cctx, rng, stop) })
	}
	for range counts["presence"] {
		spawn(func(rng *rand.Rand) { tr.presenceChurn(cctx, rng, stop) })
	}
	if !cfg.without["deletes"] {
		spawn(func(rng *rand.Rand) { tr.deleter(cctx, rng, stop) })
	}
	if !cfg.without["attacks"] {
		counts["attack sets (torture_attacks.go)"] = 1
		spawn(func(rng *rand.Rand) { tr.attacks(cctx, rng, stop) })
	}
	if !cfg.without["restarts"] {
		counts["gateway restarter"] = 1
		spawn(func(rng *rand.Rand) { tr.restarter(cctx, rng, stop) })
	}
	var mix []string
	for k, c := range counts {
		mix = append(mix, fmt.Sprintf("%d %s", c, k))
	}
	fmt.Fprintf(stderr, "torture: clients: %s\n", strings.Join(sortedStrings(mix), ", "))

	return clients, final
}

// Slack of the baseline check: goroutines and file descriptors of this
// process that may come and go without a client (the HTTP client's and
// the runtime's), and heap the engine's empty structures may keep.
const (
	goroutineSlack = 20
	fdSlack        = 8
	// heapSlackMiB bounds the gateways' heap above the baseline; the
	// embedded NATS servers' share is left out (heapsplit.go): each keeps
	// 8 MiB block buffers of its file store for reuse (a run's profile at
	// the check: 16–70 MiB of them per server), the server's, not the
	// gateway's to return.
	heapSlackMiB = 64
	// heapSettle is how long the heap may take to come back once the
	// run's topics are deleted (the NATS server's caches expire in
	// seconds).
	heapSettle = 30 * time.Second
)

// heapSlackMiB is the heap the baseline check allows above the baseline.
func (tr *torture) heapSlackMiB() uint64 { return heapSlackMiB }

// waitGroupFor waits for wg at most d.
func waitGroupFor(wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }() // exits when wg is done; bounded by the clients' own ends
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

func sortedStrings(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}
