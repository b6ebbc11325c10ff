package jsengine

// The Engine, its options, New and Close.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
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
	// <Prefix>_groups, <Prefix>_live and <Prefix>_dedupe (and, once used,
	// <Prefix>_presence and <Prefix>_retained), and the subjects
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
	// Set by New, then read-only.
	nc     *nats.Conn
	ownNC  bool
	js     jetstream.JetStream
	acks   *ackInbox // chained records' acknowledgements (pipeline_ack.go)
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

	settleSub   *nats.Subscription // serves acks and nacks forwarded to this node
	replicasSub *nats.Subscription // other nodes' notices of a change of replicas (replicas_live.go)

	closed  atomic.Bool
	closeCh chan struct{} // closed by Close
	wg      sync.WaitGroup

	life lifecycle.Guard // engine-closed flag, timer callbacks and afterReal goroutines

	// One struct per lock, each declared beside the code that takes it;
	// the lock order is in the package documentation.
	topicTable  // tmu: the topic map (topics.go)
	topicList   // topicsMu: the last load of every topic (listing.go)
	groupTable  // gmu: groups, cursors, the live registry (group.go)
	tailState   // tailMu: the tail's progress and hand-off (tail.go)
	connState   // connMu: the connection's status (conn.go)
	dedupeCalls // dmu: this node's appends with a MsgID (dedupe.go)
	pipeline    // wmu: this node's pipelined publishes (pipeline.go)
	letterQueue // lmu: max_attempts letters to store (deadletter.go)

	observers lifecycle.Observers
	pres      presence     // see presence.go
	ret       retained     // see retained.go
	mqs       mqttSessions // see mqttsession.go
	nodeSrv   nodeServer   // see nodes.go

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
	// beforeBatchResend, when set (by tests), runs in the ack reader before
	// a refused batch is sent again, after the partition's state was
	// reloaded, with the partition's amu held.
	beforeBatchResend atomic.Pointer[func()]
	// beforeBatchSend, when set (by tests), runs before a batch holding a
	// record with a MsgID is first published, with the partition's amu
	// held (pipeline_msgid_batch.go).
	beforeBatchSend atomic.Pointer[func()]
	// beforePipelinedPublish, when set (by tests), runs in AppendAsync
	// before a chained record is published, with its partition's amu and
	// Engine.wmu held.
	beforePipelinedPublish atomic.Pointer[func()]
	// beforeSettle, when set (by tests), runs on the ack reader before it
	// applies a pipelined record's answer, with no lock held.
	beforeSettle atomic.Pointer[func()]
	dlb          dlBounds // the dead-letter bounds (deadletter.go)
}

// letterQueue hands max_attempts dead letters to the letter writer and
// counts the queue_full letters (deadletter.go).
type letterQueue struct {
	lmu        sync.Mutex    // guards following
	letterQ    []letterJob   // max_attempts letters for letterWriter
	letterKick chan struct{} // capacity 1: wakes letterWriter
	// letterBusy is non-nil while the letter writer stores a letter, and
	// closed once the outcome is applied: Close waits for it (bounded by
	// closeLetterWait) before it hands the partitions back.
	letterBusy chan struct{}
	// beforeCloseWaitsLetter, when set (by tests), runs in Close when it
	// waits for a letter being stored.
	beforeCloseWaitsLetter atomic.Pointer[func()]

	qfAdded   atomic.Int64 // queue_full letters this node stored
	qfEvicted atomic.Int64 // queue_full letters its purges dropped at the cap
}

var _ engine.Engine = (*Engine)(nil)

// New connects (unless opts.Conn is set), creates or opens the streams and
// buckets under opts.Prefix, loads the topics, groups and live members, and
// starts the engine's goroutines: the live tail, three bucket watchers, the
// commit writer and the heartbeat. Close stops them and waits. It fails
// with an error wrapping engine.ErrUnavailable when NATS cannot be reached.
func New(ctx context.Context, opts Options) (*Engine, error) {
	e := &Engine{
		prefix:   opts.Prefix,
		clock:    opts.Clock,
		newID:    opts.NewID,
		defaults: opts.Defaults.WithDefaults(engine.Defaults),
		strict:   opts.Strict,
		policy:   opts.Policy.WithDefaults(engine.DefaultGroupPolicy),
		log:      opts.Logger,
		ttl:      opts.MemberTTL,
		replicas: opts.Replicas,
		closeCh:  make(chan struct{}),
		topicTable: topicTable{
			topics:  make(map[string]*topic),
			deleted: make(map[string]uint64),
		},
		groupTable: groupTable{
			groups: make(map[string]*group),
			reg:    make(map[string]map[string]string),
			nodes:  make(map[string]bool),
			dirty:  make(map[*gpart]struct{}),
			kick:   make(chan struct{}, 1),
		},
		letterQueue: letterQueue{letterKick: make(chan struct{}, 1)},
		tailState: tailState{
			tailWake:    make(chan struct{}),
			tailWaitMax: defaultTailWaitMax,
			tailQ:       make(chan jetstream.Msg, tailQueueLen),
			tailStop:    make(chan struct{}),
		},
		dedupeCalls: dedupeCalls{dedup: make(map[string]*dedupCall)},
		pipeline:    pipeline{wsem: make(chan struct{}, maxPipelined)},
		node:        randomID()[:16],
	}
	e.tailCtx = engine.WithBatch(context.Background(), &e.tailBatch)
	if err := e.applyDefaults(); err != nil {
		return nil, err
	}
	e.flights = e.newMachine()
	e.nc = opts.Conn
	if e.nc == nil {
		if err := e.dial(opts.URL); err != nil {
			return nil, err
		}
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

// applyDefaults fills in the options New left empty and checks the
// values it was given.
func (e *Engine) applyDefaults() error {
	if e.prefix == "" {
		e.prefix = DefaultPrefix
	}
	if !prefixRE.MatchString(e.prefix) {
		return fmt.Errorf("jsengine: prefix %q: %w", e.prefix, engine.ErrInvalidConfig)
	}
	if e.replicas == 0 {
		e.replicas = 1
	}
	if e.replicas < 1 || e.replicas > maxReplicas {
		return fmt.Errorf("jsengine: replicas %d, want 1 to %d: %w", e.replicas, maxReplicas, engine.ErrInvalidConfig)
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
	e.ttl = max(e.ttl, time.Second) // the server's marker TTL resolution
	if err := e.defaults.Validate(); err != nil {
		return fmt.Errorf("jsengine: defaults: %w", err)
	}
	return nil
}

// dial connects to url (nats.DefaultURL when empty) for an engine that owns
// its connection.
func (e *Engine) dial(url string) error {
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
		return unavailable("connect", err)
	}
	e.nc, e.ownNC = nc, true
	return nil
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
// engine.ContextObserver, with a context carrying the tail's
// engine.Batch); TopicDeleted from the topic watcher (or, for a topic
// re-created on another node, from whichever goroutine first meets the
// new incarnation, before its first record).
func (e *Engine) Watch(o engine.Observer) (stop func()) {
	return e.observers.Add(o)
}

// Close stops appends (they fail with engine.ErrClosed, including appends
// blocked on a full partition), stops every timer, hands this node's
// partitions back (records in flight are redelivered by the next owner,
// or dead-lettered by it when that was their last attempt, records acked
// above them are not; a release that a hand-back left to
// the committer is written here, the committer stopping with Close) and
// removes its members from the registry so other nodes take over at
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
	e.waitLetter(ctx)

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
				e.letGo(gp)
			}
			if gp.loaded && gp.stored.Holder == e.node && !gp.removed {
				// Held, or released (a member handed back) but not yet
				// written: the committer stops with Close.
				rels = append(rels, release{gp.key, e.releaseVal(gp).marshal(), gp.storedRev})
			}
			gp.member = nil
		}
	}
	e.gmu.Unlock()
	wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	for _, r := range rels {
		e.releaseOnClose(wctx, r.key, r.val, r.rev)
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

// releaseOnClose writes val, a release of a partition this node held, over
// revision rev of key. The committer may have written the key since rev
// (its round was under way when Close began); a value this node wrote is
// replaced all the same, for val is newer: without that, the next holder
// would start from that older write and deliver again what was acked since
// (or above a record not yet settled). A value another node wrote (a Seek,
// a redrive asked for) is left alone. At most three tries.
func (e *Engine) releaseOnClose(ctx context.Context, key string, val []byte, rev uint64) {
	var err error
	for range 3 {
		if _, err = e.groupKV.Update(ctx, key, val, rev); !isWrongLast(err) {
			break
		}
		ent, gerr := e.groupKV.Get(ctx, key)
		if gerr != nil {
			err = gerr
			break
		}
		var v commitVal
		if json.Unmarshal(ent.Value(), &v) != nil || v.By != e.node || v.Holder != e.node {
			break
		}
		rev = ent.Revision()
	}
	if err != nil {
		e.log.Debug("jsengine: release on close", "key", key, "err", err)
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
	if e.replicasSub != nil {
		_ = e.replicasSub.Unsubscribe()
	}
	e.stopTail()
	close(e.tailStop)
	if e.acks != nil {
		e.acks.close(closedErr())
	}
	if e.ownNC {
		e.nc.Close()
	}
}

func closedErr() error { return fmt.Errorf("jsengine: %w", engine.ErrClosed) }
