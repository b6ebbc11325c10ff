package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

// runner runs one scenario. Its connections update counters concurrently;
// the rest of it runs on the caller's goroutine.
type runner struct {
	cfg     *config
	log     io.Writer
	prefix  string // topic and group prefix, unique per run
	c       counters
	lat     *histogram
	connect *histogram
	// connectPhase is how long the last dialAll took (nanoseconds).
	connectPhase atomic.Int64
	httpc        *http.Client

	topics []string       // topic names; each ends with its index
	sentTo []atomic.Int64 // confirmed publishes per topic

	wg sync.WaitGroup // reader goroutines of every connection
}

func newRunner(cfg *config, log io.Writer) *runner {
	return &runner{
		cfg:     cfg,
		log:     log,
		prefix:  cmp.Or(cfg.topicPrefix, "lt."+strconv.FormatInt(time.Now().UnixNano(), 36)),
		lat:     newHistogram(),
		connect: newHistogram(),
		httpc:   &http.Client{Timeout: 10 * time.Second},
	}
}

func (r *runner) setTopics(group string, n int) {
	r.topics = make([]string, n)
	for i := range r.topics {
		r.topics[i] = r.prefix + "." + group + ".t" + itoa(i)
	}
	r.sentTo = make([]atomic.Int64, n)
}

func (r *runner) run(ctx context.Context) (*Report, error) {
	cpu0 := selfCPU()
	var srvCPU0 time.Duration
	if r.cfg.serverPID > 0 {
		var err error
		if srvCPU0, err = procCPU(r.cfg.serverPID); err != nil {
			return nil, fmt.Errorf("--server-pid: %w", err)
		}
	}
	var (
		rep *Report
		err error
	)
	switch r.cfg.scenario {
	case "fanout", "wildcard", "slow", "idle", "smoke":
		rep, err = r.runPlain(ctx)
	case "groups":
		rep, err = r.runGroups(ctx)
	case "connect":
		rep, err = r.runConnect(ctx)
	case "soak":
		rep, err = r.runSoak(ctx)
	}
	if err != nil {
		return nil, err
	}
	rep.Scenario, rep.Target, rep.URL, rep.InProcess = r.cfg.scenario, r.cfg.target, r.cfg.url, r.cfg.inprocess
	rep.Latency = r.lat.percentiles()
	rep.Connect = r.connect.percentiles()
	rep.ConnectPhase = time.Duration(r.connectPhase.Load()).Seconds()
	rep.ClientCPU = (selfCPU() - cpu0).Seconds()
	rep.ConnectErrors = r.c.connFailures.Load()
	rep.Gaps, rep.GapRecords = r.c.gapEvents.Load(), r.c.gapRecords.Load()
	rep.PublishErrors = r.c.publishErrors.Load()
	rep.Disconnects = r.c.disconnects.Load()
	rep.Redeliveries, rep.Acks, rep.Nacks = r.c.redeliveries.Load(), r.c.acks.Load(), r.c.nacks.Load()
	if rep.Seconds > 0 {
		rep.PublishesPerS = float64(rep.Sent) / rep.Seconds
		rep.DeliveriesPerS = float64(rep.Delivered) / rep.Seconds
	}
	if r.cfg.inprocess {
		rep.Notes = append(rep.Notes, "in-process gateway: generator cpu includes the gateway's")
	}
	if pid := r.cfg.serverPID; pid > 0 {
		if cpu, err := procCPU(pid); err == nil {
			s := (cpu - srvCPU0).Seconds()
			rep.ServerCPU = &s
			if rep.Delivered > 0 {
				us := s * 1e6 / float64(rep.Delivered)
				rep.ServerCPUPerD = &us
			}
		}
		if rss, err := procPeakRSS(pid); err == nil {
			rep.ServerPeakRSS = &rss
		}
	}
	rep.Params = r.params()
	return rep, nil
}

func (r *runner) params() map[string]string {
	c := r.cfg
	p := map[string]string{
		"duration": c.duration.String(),
		"rate":     strconv.FormatFloat(c.rate, 'f', -1, 64),
		"size":     itoa(c.size),
	}
	switch c.scenario {
	case "groups":
		p["members"] = itoa(c.members)
		p["partitions"] = itoa(cmp.Or(c.partitions, c.members))
		p["max_in_flight"] = itoa(c.maxInFlight)
		p["nack_share"] = strconv.FormatFloat(c.nackShare, 'f', -1, 64)
		p["stall_share"] = strconv.FormatFloat(c.stallShare, 'f', -1, 64)
	case "connect":
		p["connections"] = itoa(c.subscribers)
		p["concurrency"] = itoa(c.concurrency)
		delete(p, "rate")
		delete(p, "size")
	default:
		p["subscribers"] = itoa(c.subscribers)
	}
	if c.scenario != "connect" {
		p["publishers"] = itoa(c.publishers)
	}
	if c.overRaw != overWS {
		p["publish_over"] = strings.Join(c.over, ",")
		p["http_conns"] = itoa(c.httpConns)
		if slices.Contains(c.over, overHTTPBatch) {
			p["batch"] = itoa(c.batch)
		}
	}
	switch c.scenario {
	case "wildcard":
		p["topics"], p["patterns"] = itoa(c.topics), itoa(c.patterns)
	case "idle":
		p["topics"] = itoa(c.topics)
	case "slow":
		p["slow_share"] = strconv.FormatFloat(c.slowShare, 'f', -1, 64)
		p["slow_delay"] = c.slowDelay.String()
	}
	if c.onFull != "" {
		p["on_full"] = c.onFull
	}
	if c.lean {
		p["envelope"] = "lean"
	}
	if c.target == targetNATS {
		p["target"] = targetNATS
	}
	return p
}

// client returns the HTTP client a subscriber or publisher dials with:
// small receive buffers for a slow reader, coalesced writes for the groups
// scenario with --coalesce-writes, else the default (nil).
func (r *runner) client(slow bool) *http.Client {
	switch {
	case slow:
		return smallBufferClient
	case r.cfg.coalesce && r.cfg.scenario == "groups":
		return coalescingClient
	}
	return nil
}

// --- plain subscriptions ---

// subscriber is one WebSocket with one plain subscription (or, with group
// set, one group member).
type subscriber struct {
	r       *runner
	idx     int
	slow    bool
	pattern string
	group   string
	topics  []int // topics it expects every record of (plain)

	conn  *websocket.Conn
	mq    *mqttConn  // --target mqtt: the MQTT connection instead (mqtt.go)
	ready chan error // the subscribe reply

	// Owned by the reader goroutine.
	last     [][]int64 // [topic][partition] last offset seen; -1 none
	readyMet bool
	ackBuf   []byte
	frameEnd func() bool // called after each frame's lines; nil: nothing
	// Group members with --ack-batch: the acks of the frame being read,
	// by partition, and the send times of its first attempts.
	pending  [][]int64
	pendSent []int64

	delivered  atomic.Int64
	dups       atomic.Int64
	gapRecords atomic.Int64
	dropped    atomic.Bool // the gateway closed the connection
	closing    atomic.Bool // we are closing the connection
	hurry      atomic.Bool // publishing stopped: a slow reader drains at full speed

	// Group members.
	stalled atomic.Bool // holds its deliveries without acking
	tracker *offsetSet  // offsets of the group topic acked by any member
}

// seen records (topic, partition, offset) and reports whether it is new.
func (s *subscriber) seen(topic, partition int, offset int64) bool {
	for len(s.last) <= topic {
		s.last = append(s.last, nil)
	}
	ps := s.last[topic]
	for len(ps) <= partition {
		ps = append(ps, -1)
	}
	s.last[topic] = ps
	if offset <= ps[partition] {
		return false
	}
	ps[partition] = offset
	return true
}

// line handles one frame of a plain subscriber.
func (s *subscriber) line(l []byte) bool {
	r := s.r
	switch {
	case isOp(l, opMessage):
		if t, ok := sendTime(l); ok {
			r.lat.record(s.idx, time.Duration(time.Now().UnixNano()-t))
		}
		r.c.delivered.Add(1)
		s.delivered.Add(1)
		ti, _ := topicIndex(l)
		p, _ := intAfter(l, keyPartition)
		off, _ := intAfter(l, keyOffset)
		if !s.seen(ti, int(p), off) {
			s.dups.Add(1)
			r.c.duplicates.Add(1)
		}
		if s.slow && !s.hurry.Load() {
			time.Sleep(r.cfg.slowDelay)
		}
	case isOp(l, opGap):
		from, _ := intAfter(l, keyFrom)
		to, _ := intAfter(l, keyTo)
		s.gapRecords.Add(to - from)
		r.c.gapEvents.Add(1)
		r.c.gapRecords.Add(to - from)
	case isOp(l, opSubscribed):
		s.signal(nil)
	case isOp(l, opError):
		if !s.readyMet {
			s.signal(fmt.Errorf("subscribe %q: %s", s.pattern, l))
		} else {
			fmt.Fprintf(r.log, "error frame: %s\n", l)
		}
	}
	return true
}

func (s *subscriber) signal(err error) {
	if !s.readyMet {
		s.readyMet = true
		s.ready <- err
	}
}

// start dials, subscribes and starts the reader goroutine, which returns
// when the connection closes.
func (s *subscriber) start(ctx context.Context, onFull, from string, line func([]byte) bool) error {
	r := s.r
	u := r.cfg.url
	if n := len(r.cfg.subURLs); n > 0 {
		u = r.cfg.subURLs[s.idx%n]
	}
	if r.cfg.lean {
		sep := "?"
		if strings.Contains(u, "?") {
			sep = "&"
		}
		u += sep + "envelope=lean"
	}
	conn, took, err := dialGatewayWith(ctx, u, r.client(s.slow))
	if err != nil {
		return err
	}
	r.connect.record(s.idx, took)
	r.c.conns.Add(1)
	s.conn = conn
	s.ready = make(chan error, 1)
	req := map[string]any{"op": "subscribe", "id": 1, "pattern": s.pattern}
	if s.group != "" {
		req["group"] = s.group
		if r.cfg.maxInFlight > 0 {
			req["max_in_flight"] = r.cfg.maxInFlight
		}
	}
	if onFull != "" {
		req["on_full"] = onFull
	}
	if from != "" {
		req["from"] = from
	}
	b, _ := json.Marshal(req)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.c.conns.Add(-1)
		err := readFramesThen(context.Background(), conn, line, s.frameEnd)
		if websocket.CloseStatus(err) != websocket.StatusNormalClosure && !s.closing.Load() {
			s.dropped.Store(true)
			r.c.disconnects.Add(1)
		}
		if !s.readyMet {
			s.signal(fmt.Errorf("connection closed before subscribed: %w", err))
		}
	}()
	if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
		conn.CloseNow()
		return err
	}
	select {
	case err := <-s.ready:
		if err != nil {
			conn.CloseNow()
		}
		return err
	case <-ctx.Done():
		conn.CloseNow()
		return ctx.Err()
	}
}

// dialAll starts subs with at most --concurrency dials at once; it returns
// the ones that are subscribed.
func (r *runner) dialAll(ctx context.Context, subs []*subscriber, start func(context.Context, *subscriber) error) []*subscriber {
	ctx, cancel := context.WithTimeout(ctx, max(30*time.Second, r.cfg.duration))
	defer cancel()
	began := time.Now()
	defer func() { r.connectPhase.Store(int64(time.Since(began))) }()
	sem := make(chan struct{}, r.cfg.concurrency)
	ok := make([]bool, len(subs))
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for i, s := range subs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			r.c.connFailures.Add(int64(len(subs) - i))
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := start(ctx, s); err != nil {
				r.c.connFailures.Add(1)
				firstErr.CompareAndSwap(nil, err.Error())
				return
			}
			ok[i] = true
		}()
	}
	wg.Wait()
	if e := firstErr.Load(); e != nil {
		fmt.Fprintf(r.log, "connection failures: %d (first: %s)\n", r.c.connFailures.Load(), e)
	}
	var live []*subscriber
	for i, s := range subs {
		if ok[i] {
			live = append(live, s)
		}
	}
	return live
}

// closeAll closes the connections of subs; their readers then return
// (r.wg).
func (r *runner) closeAll(subs []*subscriber) {
	sem := make(chan struct{}, r.cfg.concurrency)
	var wg sync.WaitGroup
	for _, s := range subs {
		if s.conn == nil && s.mq == nil {
			continue
		}
		s.closing.Store(true)
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if s.mq != nil {
				s.mq.close()
				return
			}
			_ = s.conn.Close(websocket.StatusNormalClosure, "")
		}()
	}
	wg.Wait()
}

// plainLayout builds the subscribers and topics of a plain scenario.
func (r *runner) plainLayout() []*subscriber {
	cfg := r.cfg
	n := cfg.subscribers
	subs := make([]*subscriber, n)
	for i := range subs {
		subs[i] = &subscriber{r: r, idx: i}
	}
	switch cfg.scenario {
	case "fanout", "slow":
		r.setTopics(cfg.scenario, 1)
		slow := 0
		if cfg.scenario == "slow" && cfg.slowShare > 0 {
			slow = max(1, int(math.Round(float64(n)*cfg.slowShare)))
		}
		for i, s := range subs {
			s.pattern, s.topics = r.topics[0], []int{0}
			s.slow = i < slow
		}
	case "smoke":
		r.setTopics("smoke", 1)
		pats := []string{r.topics[0], r.prefix + ".smoke.*", r.prefix + ".#", r.prefix + ".*.t0"}
		for i, s := range subs {
			s.pattern, s.topics = pats[i%len(pats)], []int{0}
		}
	case "wildcard":
		r.setTopics("w", cfg.topics)
		// Pattern j < P-1 covers the topics i with i%(P-1) == j; the last
		// pattern is '#' over all of them (with P == 1, the only one).
		groups := max(1, cfg.patterns-1)
		r.topics = r.topics[:0]
		for i := range cfg.topics {
			r.topics = append(r.topics, r.prefix+".w"+itoa(i%groups)+".t"+itoa(i))
		}
		for i, s := range subs {
			j := i % cfg.patterns
			if j == cfg.patterns-1 {
				s.pattern = r.prefix + ".#"
				for t := range cfg.topics {
					s.topics = append(s.topics, t)
				}
				continue
			}
			s.pattern = r.prefix + ".w" + itoa(j) + ".*"
			for t := j; t < cfg.topics; t += groups {
				s.topics = append(s.topics, t)
			}
		}
	case "idle":
		r.setTopics("idle", cfg.topics)
		for i, s := range subs {
			t := i % cfg.topics
			s.pattern, s.topics = r.topics[t], []int{t}
		}
	}
	return subs
}

func (r *runner) runPlain(ctx context.Context) (*Report, error) {
	cfg := r.cfg
	subs := r.plainLayout()
	stopProgress := r.startProgress()
	defer stopProgress()
	nats := cfg.target == targetNATS
	subs = r.dialAll(ctx, subs, func(ctx context.Context, s *subscriber) error {
		if nats {
			return s.startNATS(ctx)
		}
		if cfg.mqttTarget != "" {
			return s.startMQTT(ctx)
		}
		return s.start(ctx, cfg.onFull, "", s.line)
	})
	defer r.wg.Wait()
	defer r.closeAll(subs)
	topics := make([]int, len(r.topics))
	for i := range topics {
		topics[i] = i
	}
	expect := func(s *subscriber) int64 {
		var e int64
		for _, t := range s.topics {
			e += r.sentTo[t].Load()
		}
		return e
	}
	drained := func() bool {
		for _, s := range subs {
			if s.dropped.Load() {
				continue
			}
			if s.delivered.Load()-s.dups.Load()+s.gapRecords.Load() < expect(s) {
				return false
			}
		}
		return true
	}
	start := time.Now()
	var (
		pubs   []*subscriber
		phases []PhaseReport
		err    error
	)
	switch {
	case nats:
		pubs, err = r.publishNATS(ctx, topics)
	case cfg.mqttPublish:
		pubs, err = r.publishMQTT(ctx, topics)
	case len(cfg.over) == 1 && cfg.over[0] == overWS:
		pubs, err = r.publish(ctx, topics)
	default:
		pubs, phases, err = r.publishPhases(ctx, topics, drained)
	}
	if err != nil {
		r.closeAll(pubs)
		return nil, err
	}
	elapsed := time.Since(start)
	// Slow readers now read at full speed, so that what the gateway
	// dropped shows up as gaps rather than as a backlog.
	for _, s := range subs {
		s.hurry.Store(true)
	}
	r.drain(ctx, drained)
	r.closeAll(subs)
	r.closeAll(pubs)
	rep := &Report{Seconds: elapsed.Seconds(), Connections: int64(len(subs) + len(pubs)), Sent: r.c.sent.Load(),
		PublishOver: phases}
	classes := map[bool]*ClassReport{false: {Name: "fast"}, true: {Name: "slow"}}
	for _, s := range subs {
		e := expect(s)
		uniq := s.delivered.Load() - s.dups.Load()
		rep.Expected += e
		rep.Delivered += uniq
		rep.Duplicates += s.dups.Load()
		lost := max(0, e-uniq)
		rep.Lost += lost
		cl := classes[s.slow]
		cl.Subscribers++
		cl.Expected += e
		cl.Delivered += uniq
		cl.Lost += lost
		cl.GapRecords += s.gapRecords.Load()
		cl.Unaccounted += max(0, lost-s.gapRecords.Load())
		if s.dropped.Load() {
			cl.Disconnects++
		}
	}
	if cfg.scenario == "slow" {
		rep.Classes = []ClassReport{*classes[false], *classes[true]}
	}
	return rep, nil
}

func (r *runner) startProgress() (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() { // exits when stop is called
		defer close(exited)
		progress(r.log, &r.c, time.Now(), done)
	}()
	return func() {
		close(done)
		<-exited
	}
}

// drain waits until complete reports true or --drain passes.
func (r *runner) drain(ctx context.Context, complete func() bool) {
	deadline := time.Now().Add(r.cfg.drain)
	for !complete() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
}

// --- publishers ---

// publish runs --publishers connections publishing round-robin over
// topics (indices into r.topics) for --duration, at --rate in total, with
// at most --window publishes outstanding each. It returns when every
// publisher has stopped and its outstanding replies have arrived (or 10s
// passed); the connections are left open for the caller to close.
func (r *runner) publish(ctx context.Context, topics []int) ([]*subscriber, error) {
	cfg := r.cfg
	pubs := make([]*subscriber, cfg.publishers)
	inflight := make([]chan int, cfg.publishers)
	for i := range pubs {
		pubs[i] = &subscriber{r: r, idx: 1_000_000 + i}
		inflight[i] = make(chan int, cfg.window)
	}
	var wg sync.WaitGroup
	for i, p := range pubs {
		conn, took, err := dialGatewayWith(ctx, cfg.url, r.client(false))
		if err != nil {
			r.closeAll(pubs)
			return nil, fmt.Errorf("publisher: %w", err)
		}
		r.connect.record(p.idx, took)
		p.conn = conn
		fifo := inflight[i]
		r.readReplies(conn, func([]byte) {
			r.sentTo[<-fifo].Add(1)
			r.c.sent.Add(1)
		}, func() { <-fifo })
	}
	deadline, rate, quota := publisherShare(cfg)
	for i, p := range pubs {
		wg.Add(1)
		go func() { // exits at the deadline, the quota or a write error
			defer wg.Done()
			buf := make([]byte, 0, 128+r.cfg.size)
			write := func(ctx context.Context, ti int, n int64) error {
				buf = appendPublish(buf[:0], n, r.topics[ti], r.cfg.size, time.Now())
				return p.conn.Write(ctx, websocket.MessageText, buf)
			}
			r.pace(ctx, write, inflight[i], topics, i, rate, quota, deadline)
		}()
	}
	wg.Wait()
	// Wait for the outstanding replies.
	until := time.Now().Add(10 * time.Second)
	for _, f := range inflight {
		for len(f) > 0 && time.Now().Before(until) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return pubs, nil
}

// readReplies starts the reply reader of a publisher's connection, a
// goroutine counted in r.wg and, while it runs, as an open connection: it
// hands each "published" reply to published, and for each "error" reply
// calls failed and counts a publish error (printing the first five). It
// exits when the connection closes.
func (r *runner) readReplies(conn *websocket.Conn, published func(l []byte), failed func()) {
	r.c.conns.Add(1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.c.conns.Add(-1)
		_ = readFrames(context.Background(), conn, func(l []byte) bool {
			switch {
			case isOp(l, opPublished):
				published(l)
			case isOp(l, opError):
				failed()
				if r.c.publishErrors.Add(1) <= 5 {
					fmt.Fprintf(r.log, "publish error: %s\n", l)
				}
			}
			return true
		})
	}()
}

// pace is one publisher's send loop: write sends publish n to topic ti,
// which is in fifo until confirmed.
func (r *runner) pace(ctx context.Context, write func(ctx context.Context, ti int, n int64) error, fifo chan int, topics []int, idx int, rate float64, quota int64, deadline time.Time) {
	start := time.Now()
	var n int64
	for ctx.Err() == nil {
		now := time.Now()
		if !now.Before(deadline) || (quota > 0 && n >= quota) {
			return
		}
		if rate > 0 {
			due := int64(now.Sub(start).Seconds()*rate) + 1
			if n >= due {
				time.Sleep(time.Millisecond)
				continue
			}
		}
		ti := topics[(int64(idx)+n)%int64(len(topics))]
		select {
		case fifo <- ti:
		case <-ctx.Done():
			return
		}
		if err := write(ctx, ti, n); err != nil {
			fmt.Fprintf(r.log, "publisher %d: %v\n", idx, err)
			return
		}
		n++
	}
}

// --- connect ---

func (r *runner) runConnect(ctx context.Context) (*Report, error) {
	cfg := r.cfg
	stopProgress := r.startProgress()
	defer stopProgress()
	ctx, cancel := context.WithTimeout(ctx, cfg.duration)
	defer cancel()
	conns := make([]*subscriber, cfg.subscribers)
	sem := make(chan struct{}, cfg.concurrency)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range conns {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			r.c.connFailures.Add(int64(len(conns) - i))
			break
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			conn, took, err := dialGateway(ctx, cfg.url, false)
			if err != nil {
				r.c.connFailures.Add(1)
				return
			}
			r.connect.record(i, took)
			r.c.conns.Add(1)
			s := &subscriber{r: r, idx: i, conn: conn}
			conns[i] = s
			r.wg.Add(1)
			go func() { // exits when the connection closes
				defer r.wg.Done()
				defer r.c.conns.Add(-1)
				_ = readFrames(context.Background(), conn, func([]byte) bool { return true })
			}()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	var open []*subscriber
	for _, s := range conns {
		if s != nil {
			open = append(open, s)
		}
	}
	r.closeAll(open)
	r.wg.Wait()
	rep := &Report{Seconds: elapsed.Seconds(), Connections: int64(len(open))}
	rep.Notes = append(rep.Notes, fmt.Sprintf("%d connections in %.2fs (%.0f/s)", len(open), elapsed.Seconds(),
		float64(len(open))/elapsed.Seconds()))
	return rep, nil
}

func (r *runner) createTopic(ctx context.Context, name string, partitions int) error {
	body, _ := json.Marshal(map[string]any{"name": name, "partitions": partitions})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.cfg.httpURL+"/v1/topics", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.httpc.Do(req)
	if err != nil {
		return fmt.Errorf("creating topic: %w", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusConflict {
		return fmt.Errorf("creating topic: HTTP %d: %s", resp.StatusCode, b)
	}
	return nil
}

// publisherShare returns when publishing stops and each publisher's share
// of the rate (messages/s; 0: as fast as replies allow) and of --messages
// (0: no quota).
func publisherShare(cfg *config) (deadline time.Time, rate float64, quota int64) {
	deadline = time.Now().Add(cfg.duration)
	rate = cfg.rate / float64(cfg.publishers)
	if cfg.messages > 0 {
		quota = max(1, cfg.messages/int64(cfg.publishers))
	}
	return deadline, rate, quota
}
