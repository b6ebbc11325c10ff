package jsengine

// Topics. One stream, <prefix>_rec, holds every record of every topic on
// subject <prefix>.rec.<topic>.<inc>.<partition>. Topic names are valid
// subject tokens as they are (their characters are [A-Za-z0-9_:-], '.'
// separates segments, '$' may start the first); the partition is the last
// token and inc the one before it, so parsing from the end is unambiguous.
// inc is the topic bucket revision that created the topic: a deleted and
// recreated topic gets fresh subjects, so stale appends by a node that has
// not yet heard of the delete can never leak into the new incarnation.
// One stream rather than one per topic or partition because streams are
// heavy in NATS (a Raft group each when replicated, files, consumers,
// limits bookkeeping): a gateway with thousands of auto-created topics
// would otherwise create thousands of streams. The price is that stream
// limits cannot be per topic; see retention.go.
//
// Topic configurations live in the <prefix>_topics bucket, keyed by the
// base64url of the name (KV keys cannot hold ':' or '$'); creating one is
// an atomic KV create, so two nodes cannot both create a name; the one
// refused waits for the other's create to show (see replicas.go). Every
// node keeps every topic's configuration in its topicTable, kept by the
// bucket's watcher (topicEvent), which also announces topic deletion to
// every node.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

// topicTable is this node's map of topics: every topic's current
// incarnation, kept by the topic bucket's watcher (topicEvent) and by
// calls that meet a topic first (lookup, create).
type topicTable struct {
	tmu    sync.RWMutex // guards following; never held while taking another lock
	topics map[string]*topic
	// deleted remembers the KV revision of each topic name's last delete
	// seen, so a late create event for an older incarnation is ignored.
	deleted map[string]uint64

	topicsGen atomic.Uint64 // bumped when a topic is installed or dropped
}

type topicVal struct {
	Config  engine.TopicConfig `json:"config"`
	Created time.Time          `json:"created"`
}

// topic is one incarnation of a topic: inc is the topic bucket revision that
// created it, and part of every subject of its records.
type topic struct {
	name        string
	cfg         engine.TopicConfig
	created     time.Time
	inc         uint64
	parts       []*partition
	partitioner *engine.Partitioner
	deleted     atomic.Bool
}

// partition is this node's view of one partition.
type partition struct {
	t       *topic
	index   int
	subject string
	loaded  atomic.Bool // the state was read from NATS at least once

	amu sync.Mutex // serialises this node's appends and trims of the partition; guards following
	// Pipelined records of this partition in flight (pipeline.go); pcond
	// (on amu) is signalled when one is answered. broken: one was refused
	// or its outcome is unknown, so no more are published until every one
	// in flight is answered.
	inflight int
	broken   bool
	chain    uint64 // the chain (Engine.w.epoch) of p's last pipelined record
	pcond    *sync.Cond
	// The writer's state: the subject's last message, as of the last load
	// or append. Another node's append makes it stale; the next publish
	// then fails its expected-sequence check and reloads.
	known     bool
	lastSeq   uint64
	lastMark  bool
	nextW     int64
	earliestW int64
	cum       int64
	baseCum   int64     // cum before earliestW (valid after a load)
	firstTime time.Time // time of the record at earliestW; zero: unknown
	lastTime  time.Time

	smu      sync.Mutex // guards following: the view the tail and appends keep
	next     int64
	earliest int64
	seen     uint64   // the highest stream sequence of the subject seen here
	cache    []cached // contiguous ascending offsets
	// Block policy, written by group code under Engine.gmu then smu.
	readers int
	floor   int64
	waiters int
	space   chan struct{}

	// Group cursors on this partition, guarded by Engine.gmu: every one
	// (gparts), those an appended record must pump (pumped: a member on
	// this node owns it or this node holds it), and those of groups with
	// a member on some node (reading: they hold back a block topic). The
	// tail reads npumped, the length of pumped, without gmu: a partition
	// that no local live group reads costs an append no engine-wide lock.
	// tailed is the offset after the last record of the partition this
	// node's tail announced (0: none yet): the tail brings every record
	// from there on, so a cursor waiting for one need not fetch it.
	tailed int64

	gparts  []*gpart
	pumped  []*gpart
	reading []*gpart
	npumped atomic.Int32
}

func (e *Engine) newTopic(name string, v topicVal, inc uint64) *topic {
	t := &topic{
		name:        name,
		cfg:         v.Config,
		created:     v.Created,
		inc:         inc,
		parts:       make([]*partition, v.Config.Partitions),
		partitioner: engine.NewPartitioner(v.Config.Partitioner),
	}
	for i := range t.parts {
		t.parts[i] = &partition{
			t: t, index: i, space: make(chan struct{}),
			subject: fmt.Sprintf("%s.rec.%s.%d.%d", e.prefix, name, inc, i),
		}
		t.parts[i].pcond = sync.NewCond(&t.parts[i].amu)
	}
	return t
}

func (e *Engine) topicErr(name string) error {
	return fmt.Errorf("jsengine: topic %q: %w", name, engine.ErrUnknownTopic)
}

func (e *Engine) local(name string) *topic {
	e.tmu.RLock()
	defer e.tmu.RUnlock()
	return e.topics[name]
}

// lookup returns the topic, asking the bucket when this node has not heard
// of it yet.
func (e *Engine) lookup(ctx context.Context, name string) (*topic, error) {
	if t := e.local(name); t != nil {
		return t, nil
	}
	ent, err := e.topicKV.Get(ctx, enc(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, e.topicErr(name)
	}
	if err != nil {
		return nil, unavailable("topic", err)
	}
	return e.installEntry(name, ent)
}

// installEntry installs the topic stored in the bucket entry ent (see
// install), failing with engine.ErrUnknownTopic when a later delete is
// known.
func (e *Engine) installEntry(name string, ent jetstream.KeyValueEntry) (*topic, error) {
	var v topicVal
	if err := json.Unmarshal(ent.Value(), &v); err != nil {
		return nil, fmt.Errorf("jsengine: topic %q: bad config: %w", name, err)
	}
	t, _ := e.install(name, v, ent.Revision())
	if t == nil {
		return nil, e.topicErr(name)
	}
	return t, nil
}

// refresh asks the bucket for the topic's current incarnation, even when
// this node knows one: the tail calls it for a record of a newer
// incarnation than the local one, which another node created after a
// delete this node's topic watcher has not reached yet.
func (e *Engine) refresh(ctx context.Context, name string) (*topic, error) {
	if t := e.local(name); t == nil {
		return e.lookup(ctx, name)
	}
	ent, err := e.topicKV.Get(ctx, enc(name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return e.local(name), nil // deleted again since: the watcher drops it
	}
	if err != nil {
		return nil, unavailable("topic", err)
	}
	var v topicVal
	if err := json.Unmarshal(ent.Value(), &v); err != nil {
		return nil, fmt.Errorf("jsengine: topic %q: bad config: %w", name, err)
	}
	t, _ := e.install(name, v, ent.Revision())
	return t, nil
}

// install makes (name, inc) the local incarnation unless a newer one or a
// later delete is known, replacing an older one: that one's deletion is
// announced to observers here (before any record of the new one), and the
// topic watcher, reaching it later, does not announce it again. It returns
// the current incarnation and whether it was added.
func (e *Engine) install(name string, v topicVal, inc uint64) (*topic, bool) {
	e.tmu.Lock()
	cur := e.topics[name]
	if (cur != nil && cur.inc >= inc) || e.deleted[name] >= inc {
		e.tmu.Unlock()
		return cur, false
	}
	t := e.newTopic(name, v, inc)
	e.topics[name] = t
	e.tmu.Unlock()
	e.topicsGen.Add(1)
	if cur != nil {
		e.dropTopic(cur)
		for _, o := range e.observers.List() {
			o.TopicDeleted(name)
		}
	}
	e.gmu.Lock()
	for _, g := range e.groups {
		if g.matches(name) {
			e.addTopicToGroup(g, t)
			e.rebalance(g)
		}
	}
	e.gmu.Unlock()
	return t, true
}

// dropTopic forgets an incarnation locally: appends to it fail and groups
// stop reading it.
func (e *Engine) dropTopic(t *topic) {
	if t.deleted.Swap(true) {
		return
	}
	e.tmu.Lock()
	if e.topics[t.name] == t {
		delete(e.topics, t.name)
	}
	e.tmu.Unlock()
	e.topicsGen.Add(1)
	for _, p := range t.parts {
		p.smu.Lock()
		close(p.space) // wake blocked appenders; they see deleted
		p.space = make(chan struct{})
		p.smu.Unlock()
	}
	e.gmu.Lock()
	for _, g := range e.groups {
		if e.removeTopicFromGroup(g, t) {
			e.rebalance(g)
		}
	}
	e.gmu.Unlock()
}

// topicEvent applies a change of the topic bucket, from any node.
func (e *Engine) topicEvent(ent jetstream.KeyValueEntry, initial bool) {
	name := dec(ent.Key())
	switch ent.Operation() {
	case jetstream.KeyValuePut:
		var v topicVal
		if err := json.Unmarshal(ent.Value(), &v); err != nil {
			e.log.Warn("jsengine: bad topic config", "topic", name, "err", err)
			return
		}
		e.install(name, v, ent.Revision())
	default: // delete, or purge
		e.tmu.Lock()
		e.deleted[name] = max(e.deleted[name], ent.Revision())
		cur := e.topics[name]
		e.tmu.Unlock()
		if cur != nil && cur.inc < ent.Revision() {
			e.dropTopic(cur)
		}
		// A newer incarnation installed first (see install) announced
		// this delete already.
		if !initial && (cur == nil || cur.inc < ent.Revision()) {
			for _, o := range e.observers.List() {
				o.TopicDeleted(name)
			}
		}
	}
}

// CreateTopic creates a topic with cfg, zero fields taken from the engine's
// defaults. It fails with engine.ErrInvalidConfig or engine.ErrTopicExists
// (also when another node created the name first).
func (e *Engine) CreateTopic(ctx context.Context, cfg engine.TopicConfig) (_ engine.TopicInfo, err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	if e.closed.Load() {
		return engine.TopicInfo{}, closedErr()
	}
	if err := e.reachable(); err != nil {
		return engine.TopicInfo{}, err
	}
	cfg = cfg.WithDefaults(e.defaults)
	if cfg.Name == "" {
		return engine.TopicInfo{}, fmt.Errorf("jsengine: empty topic name: %w", engine.ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return engine.TopicInfo{}, fmt.Errorf("jsengine: topic %q: %w", cfg.Name, err)
	}
	t, created, err := e.create(ctx, cfg)
	if err != nil {
		return engine.TopicInfo{}, err
	}
	if !created {
		return engine.TopicInfo{}, fmt.Errorf("jsengine: topic %q: %w", cfg.Name, engine.ErrTopicExists)
	}
	info := engine.TopicInfo{Config: t.cfg, Created: t.created, Parts: make([]engine.PartitionInfo, len(t.parts))}
	for i := range info.Parts {
		info.Parts[i].Partition = i
	}
	return info, nil
}

// create stores cfg in the topic bucket unless the name is taken, returning
// the topic under that name and whether it is new.
func (e *Engine) create(ctx context.Context, cfg engine.TopicConfig) (*topic, bool, error) {
	v := topicVal{Config: cfg, Created: e.clock.Now().UTC()}
	b, _ := json.Marshal(v)
	rev, ent, err := createOrGet(ctx, e.topicKV, enc(cfg.Name), b)
	if err != nil {
		return nil, false, unavailable("create topic", err)
	}
	if ent != nil { // another node created it first
		t, err := e.installEntry(cfg.Name, ent)
		return t, false, err
	}
	t, _ := e.install(cfg.Name, v, rev)
	if t == nil || t.inc != rev {
		return t, false, nil
	}
	return t, true, nil
}

// DeleteTopic removes a topic and its records on every node: its groups
// stop reading it and every node's observers are told (from the topic
// watcher, so shortly after DeleteTopic returns). Appends blocked on it
// fail. Once the topic and its records are gone it succeeds: the
// positions its groups committed, which it removes last, are under an
// incarnation no topic has any more and go with their groups when a
// listing of them is not answered (within a round trip's bound).
func (e *Engine) DeleteTopic(ctx context.Context, name string) (err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	if err := e.reachable(); err != nil {
		return err
	}
	t, err := e.lookup(ctx, name)
	if err != nil {
		return err
	}
	err = e.topicKV.Delete(ctx, enc(name), jetstream.LastRevision(t.inc))
	if isWrongLast(err) {
		// Deleted or recreated meanwhile: drop what we knew and report it gone.
		e.dropTopic(t)
		return e.topicErr(name)
	}
	if err != nil {
		return unavailable("delete topic", err)
	}
	e.dropTopic(t)
	if err := e.rec.Purge(ctx, jetstream.WithPurgeSubject(fmt.Sprintf("%s.rec.%s.%d.*", e.prefix, name, t.inc))); err != nil {
		e.log.Warn("jsengine: purge deleted topic", "topic", name, "err", err)
	}
	// Its groups' committed offsets go too. A listing not answered ends
	// within a round trip's bound (bounded.go); the topic is deleted by
	// then, and its positions, under an incarnation no topic has any
	// more, go with their groups: the caller is not told to retry a
	// delete that is done.
	lister, err := e.groupKV.ListKeysFiltered(ctx, fmt.Sprintf("c.*.%s.%d.*", enc(name), t.inc))
	if err != nil {
		e.log.Warn("jsengine: deleted topic's group positions not listed; they go with their groups", "topic", name, "err", err)
		return nil
	}
	for k := range lister.Keys() {
		_ = e.groupKV.Purge(ctx, k)
	}
	return nil
}

func (e *Engine) partitionOf(ctx context.Context, name string, partition int) (*topic, *partition, error) {
	t, err := e.lookup(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	if partition < 0 || partition >= len(t.parts) {
		return nil, nil, fmt.Errorf("jsengine: topic %q partition %d: %w", name, partition, engine.ErrUnknownPartition)
	}
	return t, t.parts[partition], nil
}

// snapshot loads a partition's state from NATS and applies age retention.
func (e *Engine) snapshot(ctx context.Context, p *partition) (engine.PartitionInfo, uint64, error) {
	p.amu.Lock()
	p.quiesce()
	earliestBefore, _ := p.view()
	err := e.loadState(ctx, p)
	if err == nil {
		err = e.trimAge(ctx, p, e.clock.Now())
	}
	pi := engine.PartitionInfo{
		Partition: p.index, Earliest: p.earliestW, Next: p.nextW,
		Bytes: p.cum - p.baseCum, Dropped: p.earliestW,
	}
	seq := p.lastSeq
	p.amu.Unlock()
	if err != nil {
		return engine.PartitionInfo{}, 0, err
	}
	if earliest, _ := p.view(); earliest != earliestBefore {
		e.pumpPartition(p)
	}
	return pi, seq, nil
}

// pumpPartition lets p's groups catch up after retention moved its
// earliest offset.
func (e *Engine) pumpPartition(p *partition) {
	if p.npumped.Load() == 0 {
		return
	}
	e.gmu.Lock()
	defer e.gmu.Unlock()
	for _, gp := range p.pumped { // copied on write: pump may change it
		e.pump(gp)
	}
}

// Topic returns a topic's configuration and partition state, read from
// NATS. Dropped equals Earliest: records leave a partition only by
// retention, and a topic's offsets start at 0.
func (e *Engine) Topic(ctx context.Context, name string) (_ engine.TopicInfo, err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	if err := e.reachable(); err != nil {
		return engine.TopicInfo{}, err
	}
	t, err := e.lookup(ctx, name)
	if err != nil {
		return engine.TopicInfo{}, err
	}
	return e.topicInfo(ctx, t)
}

func (e *Engine) topicInfo(ctx context.Context, t *topic) (engine.TopicInfo, error) {
	info := engine.TopicInfo{Config: t.cfg, Created: t.created, Parts: make([]engine.PartitionInfo, len(t.parts))}
	for i, p := range t.parts {
		pi, _, err := e.snapshot(ctx, p)
		if err != nil {
			return engine.TopicInfo{}, err
		}
		info.Parts[i] = pi
	}
	return info, nil
}

// errTopicGone: the topic was deleted between lookup and append.
var errTopicGone = fmt.Errorf("jsengine: topic deleted during append: %w", engine.ErrUnknownTopic)
