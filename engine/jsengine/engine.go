package jsengine

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/groupstate"
	"github.com/switchyard/switchyard/engine/internal/lifecycle"
)

// Options configures an Engine. Each field's zero value means the default
// stated on it.
type Options struct {
	// URL is the NATS server to dial when Conn is nil. The engine owns that
	// connection: it reconnects forever (MaxReconnects -1), does not buffer
	// while reconnecting (ReconnectBufSize -1), logs disconnects and
	// reconnects, and Close closes it. Default: nats.DefaultURL
	// (nats://127.0.0.1:4222).
	URL string
	// Conn is a connection the caller owns; when set, URL is ignored and
	// Close leaves it open. It should reconnect by itself (MaxReconnects
	// -1), or the engine stays unavailable after the first outage, and
	// should not buffer while reconnecting (ReconnectBufSize -1): a
	// buffered append that times out may still be stored once the
	// connection is back.
	Conn *nats.Conn
	// Prefix namespaces everything the engine creates in NATS: the streams
	// <Prefix>_rec and <Prefix>_dl, the buckets <Prefix>_topics,
	// <Prefix>_groups, <Prefix>_live and <Prefix>_dedupe, and the subjects
	// <Prefix>.rec.> and <Prefix>.dl.>. Gateway nodes that share a Prefix
	// share one log; tests use a unique Prefix to isolate themselves.
	// Letters, digits, '_' and '-' only. Default: "switchyard".
	Prefix string
	// Defaults apply to fields a TopicConfig leaves at zero and to topics
	// created by a first Append. Default: engine.Defaults (each zero field
	// is taken from it).
	Defaults engine.TopicConfig
	// Strict makes Append to an unknown topic fail with
	// engine.ErrUnknownTopic instead of creating it. Default: false.
	Strict bool
	// Policy holds the group delivery rules and the dedupe window.
	// Default: engine.DefaultGroupPolicy (each zero field is taken from it).
	// The first node to create the streams fixes the stream's server-side
	// duplicates window to its Policy.DedupeWindow.
	Policy engine.GroupPolicy
	// Clock is the time source for append times, age retention, the dedupe
	// window, ack timeouts, backoff and block timeouts. Member liveness
	// (MemberTTL) always runs on real time: the NATS server expires it.
	// Default: engine.SystemClock{}.
	Clock engine.Clock
	// NewID makes generated member IDs and dead-letter IDs. It must be
	// safe for concurrent use. Default: 16 random bytes in hex.
	NewID func() string
	// Logger receives background errors (failed commits, lost watches).
	// Default: slog.Default().
	Logger *slog.Logger
	// MemberTTL is how long a node's group members stay registered after
	// the node stops heartbeating (it heartbeats every MemberTTL/3): the
	// longest a crashed node's partitions wait before moving on. A node
	// that Closes hands them over at once. Default: 10 s, long enough to
	// ride out a NATS reconnect without a rebalance storm.
	MemberTTL time.Duration
	// Replicas is how many servers of a NATS cluster keep a copy of each
	// stream and bucket the engine creates, 1 to 5; with 3, the log and
	// the groups' state survive the loss of any one server. Streams and
	// buckets that exist with another count are updated to it (see
	// replicas.go). More than 1 needs a clustered NATS. Default: 1.
	Replicas int
}

// DefaultPrefix is the Prefix used when Options.Prefix is empty.
const DefaultPrefix = "switchyard"

// defaultMemberTTL: see Options.MemberTTL.
const defaultMemberTTL = 10 * time.Second

var prefixRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// Engine is the JetStream engine. It is safe for concurrent use by multiple
// goroutines; see the package documentation for the callback rules, the
// goroutines it runs and the lock order.
type Engine struct {
	nc     *nats.Conn
	ownNC  bool
	js     jetstream.JetStream
	prefix string
	node   string // this engine's node ID: random, a safe subject token

	clock    engine.Clock
	newID    func() string
	defaults engine.TopicConfig
	strict   bool
	policy   engine.GroupPolicy
	log      *slog.Logger
	ttl      time.Duration
	replicas int
	epoch    string

	rec     jetstream.Stream // <prefix>_rec: every record of every topic
	dl      jetstream.Stream // <prefix>_dl: dead letters
	topicKV jetstream.KeyValue
	groupKV jetstream.KeyValue
	liveKV  jetstream.KeyValue
	dedupKV jetstream.KeyValue
	// liveMarkers: the server marks expired live keys (NATS 2.11+), so the
	// live watcher sees dead nodes without listing the bucket.
	liveMarkers bool

	closed  atomic.Bool
	closeCh chan struct{} // closed by Close
	wg      sync.WaitGroup

	life lifecycle.Guard // engine-closed flag, timer callbacks and afterReal goroutines

	topicsGen    atomic.Uint64 // bumped when a topic is installed or dropped
	groupFetches atomic.Int64  // group fetches from NATS started (fetchAhead)
	oneAtATime   atomic.Int64  // AppendAsync calls appended as by Append (appendAfter)
	topicsMu     sync.Mutex    // guards topicsC
	topicsC      *topicsCache

	tmu    sync.RWMutex // guards following
	topics map[string]*topic
	// deleted remembers the KV revision of each topic name's last delete
	// seen, so a late create event for an older incarnation is ignored.
	deleted map[string]uint64

	gmu     sync.Mutex // guards following, partition.gparts/floor state and every group
	groups  map[string]*group
	flights groupstate.Machine[*gpart]   // set by New, then read-only
	reg     map[string]map[string]string // group -> member -> node (the live registry)
	nodes   map[string]bool              // live nodes
	dirty   map[*gpart]struct{}          // commits to write
	kick    chan struct{}                // capacity 1: wakes the committer

	observers lifecycle.Observers

	tailMu   sync.Mutex // guards following
	tailSeq  uint64     // last stream sequence the tail has announced
	tailWake chan struct{}
	tailWait int
	// tailGaveUp is the highest sequence a waitTail gave up on because the
	// tail did not reach it within tailWaitMax (set by New; tests shorten
	// it); tailGiveUps counts those give-ups.
	tailGaveUp  uint64
	tailWaitMax time.Duration
	tailGiveUps atomic.Int64
	tailCC      jetstream.ConsumeContext

	// The tail goroutine's hand-off and announcement runs (tail.go).
	tailQ     chan jetstream.Msg // from the consumer's callback to tailLoop
	tailStop  chan struct{}      // closed by shutdown once the consumer has stopped
	tailBatch engine.Batch       // used by the tail goroutine only
	tailCtx   context.Context    // carries tailBatch; what the tail announces with

	settleSub *nats.Subscription // serves acks and nacks forwarded to this node

	statusCh chan nats.Status // the connection's status changes, for watchConn
	connMu   sync.Mutex       // guards following
	// connCtx is canceled when the connection to NATS is lost and replaced
	// when it is back, so calls in progress fail at once (see onConn).
	connCtx    context.Context
	connCancel context.CancelCauseFunc
	// back is closed (and replaced) when the connection is back after a
	// loss: the watch loops then resume their watchers.
	back chan struct{}

	dmu   sync.Mutex // guards following
	dedup map[string]*dedupCall

	// Pipelined appends (pipeline.go): wmu orders this node's pipelined
	// publishes; wsem bounds them.
	wmu  sync.Mutex
	w    pipe // guarded by wmu
	wsem chan struct{}
	// reappends counts refused pipelined records appended again.
	reappends atomic.Int64

	qfAdded   atomic.Int64 // queue_full letters this node stored
	qfEvicted atomic.Int64 // queue_full letters its purges dropped at the cap

	pres presence // see presence.go

	lmu        sync.Mutex    // guards following
	letterQ    []letterJob   // max_attempts letters for letterWriter
	letterKick chan struct{} // capacity 1: wakes letterWriter

	// beforeMemberBeat, when set (by tests), runs in the heartbeat after
	// it has listed this node's members and before it writes their keys.
	beforeMemberBeat atomic.Pointer[func()]
	// beforeGroupEvent, when set (by tests), runs in the group bucket's
	// watcher before it applies a change, with the change's key.
	beforeGroupEvent atomic.Pointer[func(key string)]
	// beforeTrim, when set (by tests), runs in an append that trims its
	// partition to MaxMessages, after the record is stored and before the
	// purge.
	beforeTrim atomic.Pointer[func()]
	// beforeClaimedPublish, when set (by tests), runs in an append with a
	// MsgID once it holds its claim, before it publishes.
	beforeClaimedPublish atomic.Pointer[func()]
	dlb                  dlBounds // the dead-letter bounds (deadletter.go)
}

var _ engine.Engine = (*Engine)(nil)

// New connects (unless opts.Conn is set), creates or opens the streams and
// buckets under opts.Prefix, loads the topics, groups and live members, and
// starts the engine's goroutines: the live tail, three bucket watchers, the
// commit writer and the heartbeat. Close stops them and waits. It fails
// with an error wrapping engine.ErrUnavailable when NATS cannot be reached.
func New(ctx context.Context, opts Options) (*Engine, error) {
	e := &Engine{
		prefix:      opts.Prefix,
		clock:       opts.Clock,
		newID:       opts.NewID,
		defaults:    opts.Defaults.WithDefaults(engine.Defaults),
		strict:      opts.Strict,
		policy:      opts.Policy.WithDefaults(engine.DefaultGroupPolicy),
		log:         opts.Logger,
		ttl:         opts.MemberTTL,
		replicas:    opts.Replicas,
		closeCh:     make(chan struct{}),
		topics:      make(map[string]*topic),
		deleted:     make(map[string]uint64),
		groups:      make(map[string]*group),
		reg:         make(map[string]map[string]string),
		nodes:       make(map[string]bool),
		dirty:       make(map[*gpart]struct{}),
		kick:        make(chan struct{}, 1),
		letterKick:  make(chan struct{}, 1),
		tailWake:    make(chan struct{}),
		tailWaitMax: defaultTailWaitMax,
		tailQ:       make(chan jetstream.Msg, tailQueueLen),
		tailStop:    make(chan struct{}),
		dedup:       make(map[string]*dedupCall),
		wsem:        make(chan struct{}, maxPipelined),
		node:        randomID()[:16],
	}
	e.tailCtx = engine.WithBatch(context.Background(), &e.tailBatch)
	if e.prefix == "" {
		e.prefix = DefaultPrefix
	}
	if !prefixRE.MatchString(e.prefix) {
		return nil, fmt.Errorf("jsengine: prefix %q: %w", e.prefix, engine.ErrInvalidConfig)
	}
	if e.replicas == 0 {
		e.replicas = 1
	}
	if e.replicas < 1 || e.replicas > maxReplicas {
		return nil, fmt.Errorf("jsengine: replicas %d, want 1 to %d: %w", e.replicas, maxReplicas, engine.ErrInvalidConfig)
	}
	if e.clock == nil {
		e.clock = engine.SystemClock{}
	}
	if e.newID == nil {
		e.newID = randomID
	}
	if e.log == nil {
		e.log = slog.Default()
	}
	if e.ttl <= 0 {
		e.ttl = defaultMemberTTL
	}
	e.flights = e.newMachine()
	e.ttl = max(e.ttl, time.Second) // the server's marker TTL resolution
	if err := e.defaults.Validate(); err != nil {
		return nil, fmt.Errorf("jsengine: defaults: %w", err)
	}
	e.nc = opts.Conn
	if e.nc == nil {
		url := opts.URL
		if url == "" {
			url = nats.DefaultURL
		}
		nc, err := nats.Connect(url, nats.Name("switchyard-gateway"), nats.MaxReconnects(-1),
			// While reconnecting, fail publishes and requests at once
			// instead of buffering them: a buffered append would be
			// stored after its caller was told it failed.
			nats.ReconnectBufSize(-1),
			nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
				if !e.closed.Load() {
					e.log.Warn("jsengine: NATS connection lost; reconnecting", "err", err)
				}
			}),
			nats.ReconnectHandler(func(nc *nats.Conn) {
				e.log.Info("jsengine: NATS reconnected", "url", nc.ConnectedUrl())
			}),
			nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
				if e.closed.Load() {
					return
				}
				subject := ""
				if sub != nil {
					subject = sub.Subject
				}
				e.log.Info("jsengine: NATS", "subject", subject, "err", err)
			}))
		if err != nil {
			return nil, unavailable("connect", err)
		}
		e.nc, e.ownNC = nc, true
	}
	e.connCtx, e.connCancel = context.WithCancelCause(context.Background())
	e.back = make(chan struct{})
	e.statusCh = e.nc.StatusChanged(nats.CONNECTED, nats.RECONNECTING, nats.DISCONNECTED, nats.CLOSED)
	e.wg.Add(1)
	go e.watchConn() // exits when shutdown removes the status listener
	if err := e.setup(ctx); err != nil {
		e.closed.Store(true)
		close(e.closeCh)
		e.shutdown()
		e.wg.Wait()
		return nil, err
	}
	return e, nil
}

func (e *Engine) setup(ctx context.Context) error {
	js, err := jetstream.New(e.nc, jetstream.WithPublishAsyncMaxPending(2*maxPipelined), jetstream.WithPublishAsyncTimeout(pipelineAckTimeout))
	if err != nil {
		return unavailable("jetstream", err)
	}
	e.js = js
	epoch := randomID()
	e.rec, err = e.openStream(ctx, jetstream.StreamConfig{
		Name:        e.prefix + "_rec",
		Subjects:    []string{e.prefix + ".rec.>"},
		Storage:     jetstream.FileStorage,
		Duplicates:  e.policy.DedupeWindow,
		AllowDirect: true,
		Metadata:    map[string]string{"switchyard_epoch": epoch},
	})
	if err != nil {
		return err
	}
	e.epoch = e.rec.CachedInfo().Config.Metadata["switchyard_epoch"]
	if e.epoch == "" { // a stream made by someone else: tie the epoch to its creation
		ci := e.rec.CachedInfo()
		e.epoch = strconv.FormatInt(ci.Created.UnixNano(), 36) + "-" + ci.Config.Name
	}
	e.dl, err = e.openStream(ctx, jetstream.StreamConfig{
		Name:        e.prefix + "_dl",
		Subjects:    []string{e.prefix + ".dl.>"},
		Storage:     jetstream.FileStorage,
		AllowDirect: true,
	})
	if err != nil {
		return err
	}
	if e.topicKV, err = e.openKV(ctx, jetstream.KeyValueConfig{Bucket: e.prefix + "_topics"}); err != nil {
		return err
	}
	if e.groupKV, err = e.openKV(ctx, jetstream.KeyValueConfig{Bucket: e.prefix + "_groups"}); err != nil {
		return err
	}
	liveCfg := jetstream.KeyValueConfig{Bucket: e.prefix + "_live", TTL: e.ttl, LimitMarkerTTL: e.ttl}
	e.liveMarkers = true
	if e.liveKV, err = e.openKV(ctx, liveCfg); errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
		// Before NATS 2.11 expired keys vanish silently: the heartbeat
		// lists the bucket to notice them (see reconcileLive).
		liveCfg.LimitMarkerTTL, e.liveMarkers = 0, false
		e.liveKV, err = e.openKV(ctx, liveCfg)
	}
	if err != nil {
		return err
	}
	if e.dedupKV, err = e.openKV(ctx, jetstream.KeyValueConfig{Bucket: e.prefix + "_dedupe", TTL: e.policy.DedupeWindow}); err != nil {
		return err
	}
	if _, err := e.liveKV.Put(ctx, "n."+e.node, []byte("1")); err != nil {
		return unavailable("register node", err)
	}
	e.nodes[e.node] = true

	// Watchers: each delivers the current values, then a nil marker, then
	// updates. Wait for all three markers so New returns with full state.
	ready := make(chan struct{}, 3)
	for _, w := range []struct {
		kv jetstream.KeyValue
		fn func(jetstream.KeyValueEntry, bool)
	}{{e.topicKV, e.topicEvent}, {e.groupKV, e.groupEvent}, {e.liveKV, e.liveEvent}} {
		kw, err := e.watch(w.kv, 0)
		if err != nil {
			return unavailable("watch", err)
		}
		e.wg.Add(1)
		go e.watchLoop(w.kv, kw, w.fn, ready) // exits when the engine closes
	}
	for range 3 {
		select {
		case <-ready:
		case <-ctx.Done():
			return unavailable("initial watch", ctx.Err())
		}
	}

	// The live tail starts after the last record stored now.
	info, err := e.rec.Info(ctx)
	if err != nil {
		return unavailable("stream info", err)
	}
	e.tailSeq = info.State.LastSeq
	cons, err := e.rec.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{e.prefix + ".rec.>"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    info.State.LastSeq + 1,
	})
	if err != nil {
		return unavailable("tail", err)
	}
	e.wg.Add(1)
	go e.tailLoop() // exits when shutdown closes tailStop
	cc, err := cons.Consume(e.tailHandoff, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !e.closed.Load() {
			e.log.Debug("jsengine: tail", "err", err)
		}
	}))
	if err != nil {
		return unavailable("tail", err)
	}
	e.tailCC = cc

	if err := e.subscribeSettle(); err != nil {
		return err
	}
	e.wg.Add(3)
	go e.committer()    // exits when closeCh is closed
	go e.heartbeat()    // exits when closeCh is closed
	go e.letterWriter() // exits when closeCh is closed
	return nil
}

func (e *Engine) openStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	cfg.Replicas = e.replicas
	cfg.AllowDirect = cfg.AllowDirect && e.replicas == 1 // see replicas.go
	s, err := e.js.CreateStream(ctx, cfg)
	if err == nil {
		return s, nil
	}
	if s, err2 := e.js.Stream(ctx, cfg.Name); err2 == nil {
		if _, err := e.conform(ctx, s); err != nil {
			return nil, err
		}
		return e.js.Stream(ctx, cfg.Name)
	}
	return nil, createError("stream "+cfg.Name, err)
}

func (e *Engine) openKV(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	cfg.Replicas = e.replicas
	kv, err := e.js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
		return nil, err
	}
	if err != nil {
		if kv, err = e.js.KeyValue(ctx, cfg.Bucket); err != nil {
			return nil, createError("bucket "+cfg.Bucket, err)
		}
	}
	s, err := e.js.Stream(ctx, "KV_"+cfg.Bucket)
	if err != nil {
		return nil, unavailable("bucket "+cfg.Bucket, err)
	}
	changed, err := e.conform(ctx, s)
	if err != nil || !changed {
		return kv, err
	}
	// Bind again: the handle reads with direct gets when the stream
	// allowed them as it bound.
	if kv, err = e.js.KeyValue(ctx, cfg.Bucket); err != nil {
		return nil, unavailable("bucket "+cfg.Bucket, err)
	}
	return kv, nil
}

// kvWatch is a bucket watcher that lives until stop.
type kvWatch struct {
	kw     jetstream.KeyWatcher
	cancel context.CancelFunc
}

// watch starts a watcher of every key of kv: from revision from on, or,
// when from is 0, the current values, a nil marker, then updates.
func (e *Engine) watch(kv jetstream.KeyValue, from uint64) (*kvWatch, error) {
	var opts []jetstream.WatchOpt
	if from > 0 {
		opts = append(opts, jetstream.ResumeFromRevision(from))
	}
	// The watcher's subscription ends when ctx does, so ctx must outlive
	// it; the timer bounds only its creation.
	ctx, cancel := context.WithCancel(context.Background())
	t := time.AfterFunc(5*time.Second, cancel)
	kw, err := kv.WatchAll(ctx, opts...)
	if !t.Stop() && err == nil {
		(&kvWatch{kw, cancel}).stop()
		err = context.DeadlineExceeded
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &kvWatch{kw, cancel}, nil
}

// stop ends the watcher and drains what it had queued, so its callback,
// which blocks while the queue is full, can return (bounded: 5 s).
func (w *kvWatch) stop() {
	_ = w.kw.Stop()
	w.cancel()
	timeout := time.NewTimer(5 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case _, ok := <-w.kw.Updates():
			if !ok {
				return
			}
		case <-timeout.C:
			return
		}
	}
}

// watchLoop feeds one bucket's changes to fn, with initial true until the
// watcher's end-of-initial-values marker, which it reports on ready. When
// the connection comes back after a loss it replaces the watcher with one
// resuming after the last revision it applied: the client library would
// notice a watcher lost with a restarted server only after two missed idle
// heartbeats (10 to 20 s). It exits when the engine closes.
func (e *Engine) watchLoop(kv jetstream.KeyValue, w *kvWatch, fn func(jetstream.KeyValueEntry, bool), ready chan<- struct{}) {
	defer e.wg.Done()
	defer func() {
		if w != nil { // nil when the engine closed while resuming the watch
			w.stop()
		}
	}()
	initial := true
	var last uint64 // revision of the last change applied
	for {
		e.connMu.Lock()
		back := e.back
		e.connMu.Unlock()
		select {
		case <-e.closeCh:
			return
		case <-back:
			if initial {
				continue // New is still waiting for the marker and will fail
			}
			w.stop()
			if w = e.rewatch(kv, last+1); w == nil {
				return
			}
		case ent, ok := <-w.kw.Updates():
			if !ok {
				if e.closed.Load() {
					return
				}
				// Ended under us (its subscription was closed): resume.
				w.stop()
				if w = e.rewatch(kv, last+1); w == nil {
					return
				}
				continue
			}
			if ent == nil {
				if initial {
					initial = false
					ready <- struct{}{}
				}
				continue
			}
			last = max(last, ent.Revision())
			fn(ent, initial)
		}
	}
}

// rewatch starts a watcher of kv from revision from, retrying with backoff
// until it succeeds; nil when the engine closes first.
func (e *Engine) rewatch(kv jetstream.KeyValue, from uint64) *kvWatch {
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		w, err := e.watch(kv, from)
		if err == nil {
			return w
		}
		if e.closed.Load() {
			return nil
		}
		e.log.Warn("jsengine: resume watch", "bucket", kv.Bucket(), "err", err)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-e.closeCh:
			t.Stop()
			return nil
		}
	}
}

// heartbeat keeps this node and its members registered in the live bucket.
func (e *Engine) heartbeat() {
	defer e.wg.Done()
	t := time.NewTicker(e.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-e.closeCh:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.ttl/3)
		if _, err := e.liveKV.Put(ctx, "n."+e.node, []byte("1")); err != nil {
			e.log.Warn("jsengine: heartbeat", "err", err)
		}
		e.beatMembers(ctx)
		if !e.liveMarkers {
			e.reconcileLive(ctx)
		}
		cancel()
	}
}

// beatMembers rewrites the live keys of this node's members. The keys are
// listed under gmu and written without it, so a member can leave between
// the two: its Leave has deleted the key, and the write here brings it
// back for every other node to see (until it expires, a member nobody
// serves would be assigned partitions). Keys of members that are no longer
// local once the writes are done are therefore deleted again.
func (e *Engine) beatMembers(ctx context.Context) {
	type beat struct{ group, id string }
	e.gmu.Lock()
	var beats []beat
	for _, g := range e.groups {
		for id := range g.local {
			beats = append(beats, beat{g.name, id})
		}
	}
	e.gmu.Unlock()
	if f := e.beforeMemberBeat.Load(); f != nil {
		(*f)()
	}
	written := beats[:0]
	for _, b := range beats {
		if _, err := e.liveKV.Put(ctx, memberKey(b.group, b.id), []byte(e.node)); err != nil {
			e.log.Warn("jsengine: heartbeat", "err", err)
			break
		}
		written = append(written, b)
	}
	var gone []beat
	e.gmu.Lock()
	for _, b := range written {
		if g := e.groups[b.group]; g == nil || g.local[b.id] == nil {
			gone = append(gone, b)
		}
	}
	e.gmu.Unlock()
	for _, b := range gone {
		if err := e.liveKV.Delete(ctx, memberKey(b.group, b.id)); err != nil {
			e.log.Warn("jsengine: heartbeat", "err", err)
			return
		}
	}
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// enc makes any string a safe KV key token.
func enc(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func dec(s string) string {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return ""
	}
	return string(b)
}

// Epoch returns the ID stored in the record stream's metadata when the
// stream was created: it changes exactly when the stream (and with it every
// offset) is recreated.
func (e *Engine) Epoch() string { return e.epoch }

// afterFunc runs f after d on the engine's clock, unless the engine has
// been closed by then. Close waits for callbacks that are already running.
func (e *Engine) afterFunc(d time.Duration, f func()) engine.Timer {
	return e.life.AfterFunc(e.clock, d, f)
}

// Watch registers o for the live tail until stop is called; stop may be
// called more than once. Appended is called from the engine's tail
// goroutine for every record stored by any node sharing the Prefix, in
// offset order per partition (AppendedContext, for an
// engine.ContextObserver, with a context carrying the tail's engine.Batch); TopicDeleted from the topic watcher (or,
// for a topic re-created on another node, from whichever goroutine first
// meets the new incarnation, before its first record).
func (e *Engine) Watch(o engine.Observer) (stop func()) {
	return e.observers.Add(o)
}

// Close stops appends (they fail with engine.ErrClosed, including appends
// blocked on a full partition), stops every timer, hands this node's
// partitions back (records in flight are redelivered by the next owner)
// and removes its members from the registry so other nodes take over at
// once, then stops the tail and the watchers and waits for every goroutine
// the engine started, or until ctx is done (returning ctx's error). Records
// stay in NATS. Calling Close again returns nil.
func (e *Engine) Close(ctx context.Context) error {
	if !e.life.Close(func() {
		e.closed.Store(true)
		close(e.closeCh)
	}) {
		return nil
	}

	// Hand back: drop windows, then write the releases and unregister.
	type release struct {
		key string
		val []byte
		rev uint64
	}
	var rels []release
	var memberKeys []string
	e.gmu.Lock()
	for _, g := range e.groups {
		for id := range g.local {
			memberKeys = append(memberKeys, memberKey(g.name, id))
		}
		clear(g.local)
		for _, gp := range g.parts {
			if gp.holding {
				v := commitVal{Off: gp.Committed, Skipped: gp.Skipped, By: e.node, Leases: gp.leases(false),
					Redo: gp.redoOffsets(), Asked: gp.untaken(gp.stored.Asked)}
				gp.dropWindow()
				gp.holding = false
				rels = append(rels, release{gp.key, v.marshal(), gp.storedRev})
			}
			gp.member = nil
		}
	}
	e.gmu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	for _, r := range rels {
		if _, err := e.groupKV.Update(wctx, r.key, r.val, r.rev); err != nil {
			e.log.Debug("jsengine: release on close", "key", r.key, "err", err)
		}
	}
	for _, k := range memberKeys {
		_ = e.liveKV.Delete(wctx, k)
	}
	_ = e.liveKV.Delete(wctx, "n."+e.node)
	cancel()

	e.shutdown()

	done := make(chan struct{})
	go func() { // exits when the engine's goroutines and callbacks return
		e.wg.Wait()
		e.life.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// shutdown stops the tail (the consumer, then the tail goroutine) and
// watchConn, and closes an owned connection.
// The watch loops stop their watchers themselves once closeCh is closed.
func (e *Engine) shutdown() {
	e.nc.RemoveStatusListener(e.statusCh)
	if e.settleSub != nil {
		_ = e.settleSub.Unsubscribe()
	}
	if e.tailCC != nil {
		e.tailCC.Stop()
		<-e.tailCC.Closed()
	}
	close(e.tailStop)
	if e.ownNC {
		e.nc.Close()
	}
}

func closedErr() error { return fmt.Errorf("jsengine: %w", engine.ErrClosed) }

// errConnLost is the cause of connCtx's cancellation.
var errConnLost = errors.New("connection to NATS lost")

// watchConn keeps connCtx in step with the connection: canceled while it is
// down, fresh once it is back. It exits when its status channel is closed.
func (e *Engine) watchConn() {
	defer e.wg.Done()
	for st := range e.statusCh {
		e.connMu.Lock()
		switch {
		case st != nats.CONNECTED:
			e.connCancel(errConnLost)
		case e.connCtx.Err() != nil:
			e.connCtx, e.connCancel = context.WithCancelCause(context.Background())
			close(e.back)
			e.back = make(chan struct{})
		}
		e.connMu.Unlock()
	}
	e.connMu.Lock()
	e.connCancel(closedErr())
	e.connMu.Unlock()
}

// onConn returns ctx, canceled as well when the connection to NATS is
// lost, for a call's NATS round trips: a request already sent when the
// connection drops would otherwise wait for its timeout. done releases it
// and turns the call's error into one wrapping engine.ErrUnavailable when
// the connection was lost meanwhile.
func (e *Engine) onConn(ctx context.Context) (_ context.Context, done func(error) error) {
	e.connMu.Lock()
	conn := e.connCtx
	e.connMu.Unlock()
	cctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(conn, func() { cancel(context.Cause(conn)) })
	return cctx, func(err error) error {
		stop()
		lost := errors.Is(context.Cause(cctx), errConnLost)
		cancel(nil)
		if err != nil && lost && !errors.Is(err, engine.ErrUnavailable) {
			err = fmt.Errorf("jsengine: %w: %w: %w", errConnLost, engine.ErrUnavailable, err)
		}
		return err
	}
}

// reachable fails at once, wrapping engine.ErrUnavailable, while the
// connection to NATS is down, so calls do not wait out their timeouts
// during an outage (and, on a caller's connection that buffers while
// reconnecting, are not sent after their caller was told they failed).
func (e *Engine) reachable() error {
	if s := e.nc.Status(); s != nats.CONNECTED {
		return fmt.Errorf("jsengine: NATS connection %s: %w", strings.ToLower(s.String()), engine.ErrUnavailable)
	}
	return nil
}

// unavailable wraps an error talking to NATS: connection-level failures
// also wrap engine.ErrUnavailable, so callers may retry.
func unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("jsengine: %s: %w: %w", op, engine.ErrUnavailable, err)
	}
	return fmt.Errorf("jsengine: %s: %w", op, err)
}

// isWrongLast reports a failed optimistic-concurrency check: a publish's
// expected last subject sequence or a KV revision did not match.
func isWrongLast(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return errors.Is(err, jetstream.ErrKeyExists)
}
