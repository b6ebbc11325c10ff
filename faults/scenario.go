package faults

// Scenarios: a fault injected into a running cluster under load, healed,
// and the whole history checked.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// Scenario is a fault and how long it lasts.
type Scenario struct {
	Name string
	// Inject injects the fault into c and returns what heals it; Run
	// holds the fault for Hold, then heals it.
	Inject func(ctx context.Context, c *Cluster) (heal func(context.Context) error, err error)
	Hold   time.Duration
	// Window, when set, is the publishers' window for this scenario
	// (see RunOptions.Window).
	Window int
	// Failover: a publisher whose connection fails goes on through the
	// next gateway (else it dials its own again).
	Failover bool
	// Processes are the gateways that run the gateway command in a child
	// process (Options.Processes; gatewayproc.go).
	Processes []int
}

// RunOptions shape a run.
type RunOptions struct {
	// Warmup is how many publishes every publisher has acknowledged
	// before the fault (5 when zero); Recover how many more after the
	// heal (5 when zero).
	Warmup, Recover int
	// PublishersPerGateway (2 when zero) and one subscriber per gateway.
	PublishersPerGateway int
	// Window is how many publishes each publisher keeps in flight (1
	// when zero: one at a time), unless the scenario sets its own.
	Window int
	// HistoryDir receives a failing history's visualization (the system's
	// temporary directory when empty).
	HistoryDir string
	// Logger receives the gateways' logs (discarded when nil).
	Logger *slog.Logger
	// GatewayBinary is the gateway command for the scenarios' gateway
	// processes (BuildGateway); when empty, Run builds it for the run.
	// GatewayOutput receives the processes' output (discarded when nil).
	GatewayBinary string
	GatewayOutput io.Writer
}

// Report is what a run saw.
type Report struct {
	Scenario   string
	Operations int
	loadStats
	Violations []string
	// History is nil when the history is linearizable, else why not
	// (naming the saved visualization).
	History error
	Took    time.Duration
	// Checked is how long the history check took.
	Checked time.Duration
	// Late is how many records subscribers were delivered past the end of
	// the final read: stored after it by publishes whose answers were
	// lost (see Run).
	Late int
	// The group: deliveries, acks refused, records dead-lettered.
	GroupDeliveries, GroupAckErrors, DeadLetters int
}

// OK reports whether the run found nothing wrong.
func (r *Report) OK() bool { return len(r.Violations) == 0 && r.History == nil }

// String summarises the report on a few lines.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d operations in %v: %d acked (%d duplicates), failed %v, slowest failure %v, slowest ack %v, %d delivered (%d past the final read), %d gaps; group: %d deliveries, %d acks refused, %d dead letters; history checked in %v",
		r.Scenario, r.Operations, r.Took.Round(time.Millisecond), r.Acked, r.Duplicates, r.Failed,
		r.SlowestFailure.Round(time.Millisecond), r.SlowestAck.Round(time.Millisecond), r.Delivered, r.Late, r.Gaps, r.GroupDeliveries, r.GroupAckErrors, r.DeadLetters, r.Checked.Round(time.Millisecond))
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "\n  violation: %s", v)
	}
	if r.History != nil {
		fmt.Fprintf(&b, "\n  history: %v", r.History)
	}
	return b.String()
}

// Run starts a cluster of three NATS servers (R3) and three gateways, runs
// the load on it, injects the scenario's fault once every publisher has
// Warmup publishes acknowledged, heals it after Hold, waits until every
// publisher has Recover more acknowledged, stops the load, reads the log
// whole and checks the history. The error is for a run that could not be
// made (the cluster did not start, the load made no progress); what the
// run found is in the report. A scenario's gateway processes run
// RunOptions.GatewayBinary, or the gateway command built for the run. It
// is about 150 lines on purpose: the phases of a run (build, start, warm
// up, inject, hold, heal, recover, stop, read whole, check) follow one
// another in it as in this paragraph, sharing the cluster, the load and
// the history.
func Run(ctx context.Context, sc Scenario, o RunOptions) (*Report, error) {
	o = o.withDefaults(sc)
	start := time.Now()
	if len(sc.Processes) > 0 && o.GatewayBinary == "" {
		dir, err := os.MkdirTemp("", "switchyard-faults-gateway-")
		if err == nil {
			defer os.RemoveAll(dir)
			o.GatewayBinary, err = BuildGateway(ctx, dir)
		}
		if err != nil {
			return nil, err
		}
	}
	c, err := NewCluster(ctx, Options{Logger: o.Logger, Processes: sc.Processes,
		Binary: o.GatewayBinary, ProcessOutput: o.GatewayOutput})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	const topic, jobs = "faults.feed", "faults.jobs"
	gws := c.Gateways()
	if err := createTopics(ctx, gws[0].Eng, topic, jobs); err != nil {
		return nil, err
	}

	h := NewHistory()
	pubs := len(gws) * o.PublishersPerGateway
	l := newLoad(h, topic, jobs, pubs)
	pctx, stopPubs := context.WithCancel(ctx)
	sctx, stopSubs := context.WithCancel(ctx)
	defer func() {
		stopPubs()
		stopSubs()
		l.pubs.Wait()
		l.wg.Wait()
	}()
	for i := range pubs {
		l.pubs.Add(1)
		urls := []string{gws[i%len(gws)].WSURL()}
		if sc.Failover {
			urls = append(urls, gws[(i+1)%len(gws)].WSURL())
		}
		go l.publisher(pctx, i, urls, o.Window) // exits when the publishers stop
	}
	var subs []int
	for g, gw := range gws {
		subs = append(subs, pubs+g)
		l.wg.Add(1)
		go l.subscriber(sctx, pubs+g, gw.WSURL()) // exits when the subscribers stop
		l.wg.Add(1)
		go l.member(sctx, pubs+len(gws)+g, gw.WSURL()) // exits when the subscribers stop
	}

	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	err = l.waitProgress(wctx, make([]int, pubs), o.Warmup)
	cancel()
	if err != nil {
		l.mu.Lock()
		defer l.mu.Unlock()
		return nil, fmt.Errorf("faults: %s: warm-up: %w (failed %v, violations %q)", sc.Name, err, l.stats.Failed, l.violations)
	}
	l.mark("fault injected")
	heal, err := sc.Inject(ctx, c)
	if err != nil {
		return nil, fmt.Errorf("faults: %s: inject: %w", sc.Name, err)
	}
	if !pause(ctx, sc.Hold) {
		return nil, ctx.Err()
	}
	l.mark("fault healing")
	if heal != nil {
		if err := heal(ctx); err != nil {
			return nil, fmt.Errorf("faults: %s: heal: %w", sc.Name, err)
		}
	}
	wctx, cancel = context.WithTimeout(ctx, 90*time.Second)
	err = l.waitProgress(wctx, l.acked(), o.Recover)
	cancel()
	if err != nil {
		l.violate("no recovery after the heal: %v", err)
	}
	stopPubs()
	// The publishes in flight get their answers first (each within
	// PublishBound), so that the final read comes after every answered
	// publish. One whose answer was lost (its connection reset) may still
	// be stored after the read, as its gateway finishes it: the history
	// has it as of unknown outcome, and a subscriber delivered its record
	// then reads past the final read's end, which the check allows
	// (Report.Late counts them).
	l.pubs.Wait()

	// The whole log, read through a gateway once the cluster is whole.
	reader := pubs + 2*len(gws)
	all, err := readAll(ctx, gws[0], topic)
	if err != nil {
		return nil, fmt.Errorf("faults: %s: final read: %w", sc.Name, err)
	}
	h.ReadAll(reader, topic+"/0", all.start, all.data)
	jobsLog, err := readAll(ctx, gws[0], jobs)
	if err != nil {
		return nil, fmt.Errorf("faults: %s: final read: %w", sc.Name, err)
	}
	h.ReadAll(reader, jobs+"/0", jobsLog.start, jobsLog.data)
	// Every subscriber gets every record (or a gap for it), and the group
	// acks every record or dead-letters it.
	wctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	if err := l.waitSubscribers(wctx, subs, int64(len(all.data))); err != nil {
		l.violate("fan-out: %v", err)
	}
	cancel()
	// The group's check has its own minute: a fan-out that failed does
	// not fail it too.
	wctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	dead := map[int64]bool{}
	var dls []engine.DeadLetter
	err = whenAvailable(wctx, func() (err error) {
		dls, err = gws[0].Eng.DeadLetters(wctx, engine.DeadLetterFilter{Group: groupName})
		return err
	})
	if err == nil {
		for _, dl := range dls {
			dead[dl.Record.Offset] = true
		}
	} else {
		l.violate("dead letters: %v", err)
	}
	if err := l.waitGroup(wctx, int64(len(jobsLog.data)), dead); err != nil {
		l.violate("%v", err)
	}
	cancel()
	stopSubs()
	l.wg.Wait()
	for _, f := range c.ProcessFailures() {
		l.violate("%s", f)
	}

	r := &Report{Scenario: sc.Name, Operations: h.Len()}
	l.mu.Lock()
	r.loadStats = l.stats
	r.GroupDeliveries, r.GroupAckErrors, r.DeadLetters = l.group.deliveries, l.group.ackErrors, len(dead)
	l.mu.Unlock()
	r.Violations = l.violationList()
	r.Late = h.readsPast(topic+"/0", int64(len(all.data)))
	checking := time.Now()
	r.History = h.Check(o.HistoryDir, sc.Name, 60*time.Second)
	r.Checked = time.Since(checking)
	r.Took = time.Since(start)
	return r, nil
}

// withDefaults returns o with each zero field set to its default (see
// RunOptions), and the scenario's Window when it sets one.
func (o RunOptions) withDefaults(sc Scenario) RunOptions {
	o.Warmup = cmp.Or(o.Warmup, 5)
	o.Recover = cmp.Or(o.Recover, 5)
	if sc.Window > 0 {
		o.Window = sc.Window
	}
	o.Window = cmp.Or(o.Window, 1)
	o.PublishersPerGateway = cmp.Or(o.PublishersPerGateway, 2)
	if o.HistoryDir == "" {
		o.HistoryDir = os.TempDir()
	}
	return o
}

// createTopics creates the run's topics, one partition each, on eng.
func createTopics(ctx context.Context, eng engine.Engine, names ...string) error {
	for _, name := range names {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := eng.CreateTopic(cctx, engine.TopicConfig{Name: name, Partitions: 1})
		cancel()
		if err != nil {
			return fmt.Errorf("faults: create %s: %w", name, err)
		}
	}
	return nil
}

// logRead is a whole partition read at the end of a run.
type logRead struct {
	start time.Time
	data  []string
}

// readAll reads partition 0 of topic whole through gateway gw's engine.
func readAll(ctx context.Context, gw *Gateway, topic string) (logRead, error) {
	lr := logRead{start: time.Now()}
	for from := int64(0); ; {
		var recs []*engine.Record
		var next int64
		// Each read of up to 1,000 records has its own 30 s: the engine
		// reads a record a round trip, so a long log under -race on a
		// loaded machine outran one bound for the whole read.
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := whenAvailable(rctx, func() (err error) {
			recs, next, err = gw.Eng.Read(rctx, topic, 0, from, 1000)
			return err
		})
		cancel()
		if err != nil {
			return lr, err
		}
		for _, r := range recs {
			if r.Offset != int64(len(lr.data)) {
				return lr, fmt.Errorf("%s: offset %d after %d records", topic, r.Offset, len(lr.data))
			}
			s := string(r.Data)
			if n := len(r.Data); n >= 2 && r.Data[0] == '"' {
				s = string(r.Data[1 : n-1])
			}
			lr.data = append(lr.data, s)
		}
		if len(recs) == 0 {
			return lr, nil
		}
		from = next
	}
}

// whenAvailable runs fn until it does not fail with engine.ErrUnavailable
// or ctx ends: the checks read the log once the cluster is whole, but
// JetStream may still be electing its leaders for a moment after a heal
// ("JetStream system temporarily unavailable").
func whenAvailable(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if !errors.Is(err, engine.ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
