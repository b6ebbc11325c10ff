package memengine

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/lifecycle"
	"github.com/switchyard/switchyard/engine/internal/listing"
)

// topic is one topic's partitions and dedupe state.
type topic struct {
	name        string
	cfg         engine.TopicConfig // defaults applied
	created     time.Time
	parts       []*partition
	partitioner *engine.Partitioner

	deleted atomic.Bool // set by DeleteTopic; Append checks it under partition.mu

	dmu    sync.Mutex // guards following
	dedupe map[string]*dedupeEntry
	dq     []*dedupeEntry // in insertion (and so time) order, for expiry
}

// dedupeEntry remembers the first append of a MsgID. done is closed once
// res/err are set; a concurrent repeat waits on it.
type dedupeEntry struct {
	id   string
	at   time.Time
	done chan struct{}
	res  engine.Appended
	err  error
}

// partition is one partition's retained records: a ring buffer holding
// offsets [base, base+n).
type partition struct {
	index int

	mu       sync.Mutex // guards following
	buf      []*engine.Record
	head     int // index in buf of offset base
	n        int
	base     int64
	bytes    int64
	dropped  int64
	lastTime time.Time
	// Block policy: how many groups with members read this partition and
	// the lowest offset one of them still needs. Written by group code
	// (under the group's lock, then mu); waiters wait on space, which is
	// closed and replaced when floor rises or readers fall while
	// waiters > 0.
	readers int
	floor   int64
	waiters int
	space   chan struct{}

	// active lists the cursors of groups with a member assigned to this
	// partition: the ones whose position holds back a block-policy
	// partition. pumped lists those of them that an append pumps: active
	// and not parked (see parkAfter). Both copy-on-write: replaced under
	// mu (by a caller that also holds the cursor's group lock), read with
	// one atomic load and no lock.
	active atomic.Pointer[[]*gpart]
	pumped atomic.Pointer[[]*gpart]
}

func (p *partition) next() int64 { return p.base + int64(p.n) }

// at returns the record at offset o, which must be in [base, next).
func (p *partition) at(o int64) *engine.Record {
	return p.buf[(p.head+int(o-p.base))&(len(p.buf)-1)]
}

func recordBytes(r *engine.Record) int64 {
	b := len(r.Data) + len(r.Key)
	for k, v := range r.Headers {
		b += len(k) + len(v)
	}
	return int64(b)
}

func (p *partition) push(r *engine.Record) {
	if p.n == len(p.buf) {
		size := max(16, 2*len(p.buf))
		nb := make([]*engine.Record, size)
		for i := range p.n {
			nb[i] = p.buf[(p.head+i)&(len(p.buf)-1)]
		}
		p.buf, p.head = nb, 0
	}
	p.buf[(p.head+p.n)&(len(p.buf)-1)] = r
	p.n++
	p.bytes += recordBytes(r)
}

func (p *partition) trimOldest() {
	r := p.buf[p.head]
	p.buf[p.head] = nil
	p.head = (p.head + 1) & (len(p.buf) - 1)
	p.n--
	p.base++
	p.bytes -= recordBytes(r)
	p.dropped++
}

// trimAge drops records older than maxAge at now. Caller holds mu.
func (p *partition) trimAge(maxAge time.Duration, now time.Time) {
	if maxAge <= 0 {
		return
	}
	cutoff := now.Add(-maxAge)
	for p.n > 0 && p.buf[p.head].Time.Before(cutoff) {
		p.trimOldest()
	}
}

// search returns the first offset whose record time is at or after t.
// Caller holds mu. Append times never decrease within a partition.
func (p *partition) search(t time.Time) int64 {
	i := sort.Search(p.n, func(i int) bool {
		return !p.at(p.base + int64(i)).Time.Before(t)
	})
	return p.base + int64(i)
}

func (p *partition) info() engine.PartitionInfo {
	return engine.PartitionInfo{
		Partition: p.index, Earliest: p.base, Next: p.next(), Bytes: p.bytes, Dropped: p.dropped,
	}
}

// resolve turns s into an offset. Caller holds mu.
func (p *partition) resolve(s engine.Start) int64 {
	switch s.Kind {
	case engine.StartLatest:
		return p.next()
	case engine.StartTime:
		return p.search(s.Time)
	case engine.StartOffset:
		return min(max(s.Offset, p.base), p.next())
	default: // StartDefault, StartEarliest
		return p.base
	}
}

func (e *Engine) lookup(name string) *topic {
	if v, ok := e.topics.Load(name); ok {
		return v.(*topic)
	}
	return nil
}

func (e *Engine) topicErr(name string) error {
	return fmt.Errorf("memengine: topic %q: %w", name, engine.ErrUnknownTopic)
}

func (e *Engine) partitionOf(name string, partition int) (*topic, *partition, error) {
	t := e.lookup(name)
	if t == nil {
		return nil, nil, e.topicErr(name)
	}
	if partition < 0 || partition >= len(t.parts) {
		return nil, nil, fmt.Errorf("memengine: topic %q partition %d: %w", name, partition, engine.ErrUnknownPartition)
	}
	return t, t.parts[partition], nil
}

// CreateTopic creates a topic with cfg, zero fields taken from the engine's
// defaults. It fails with engine.ErrInvalidConfig or engine.ErrTopicExists.
func (e *Engine) CreateTopic(ctx context.Context, cfg engine.TopicConfig) (engine.TopicInfo, error) {
	if e.closed.Load() {
		return engine.TopicInfo{}, closedErr()
	}
	cfg = cfg.WithDefaults(e.defaults)
	if cfg.Name == "" {
		return engine.TopicInfo{}, fmt.Errorf("memengine: empty topic name: %w", engine.ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return engine.TopicInfo{}, fmt.Errorf("memengine: topic %q: %w", cfg.Name, err)
	}
	t, created := e.create(cfg)
	if !created {
		return engine.TopicInfo{}, fmt.Errorf("memengine: topic %q: %w", cfg.Name, engine.ErrTopicExists)
	}
	return e.topicInfo(t), nil
}

// create adds a topic unless the name is taken, returning the topic under
// that name and whether it is new. Groups whose pattern matches start
// reading it. A name whose deletion observers are still being told of is
// created once they were, so that they hear of the deletion before any
// record of the new topic.
func (e *Engine) create(cfg engine.TopicConfig) (*topic, bool) {
	e.topicsMu.Lock()
	for {
		if t := e.lookup(cfg.Name); t != nil {
			e.topicsMu.Unlock()
			return t, false
		}
		told := e.deleting[cfg.Name]
		if told == nil {
			break
		}
		e.topicsMu.Unlock()
		<-told
		e.topicsMu.Lock()
	}
	t := &topic{
		name:        cfg.Name,
		cfg:         cfg,
		created:     e.clock.Now(),
		parts:       make([]*partition, cfg.Partitions),
		partitioner: engine.NewPartitioner(cfg.Partitioner),
	}
	for i := range t.parts {
		t.parts[i] = &partition{index: i, space: make(chan struct{})}
	}
	e.topics.Store(cfg.Name, t)
	e.topicsMu.Unlock()

	for _, g := range e.groupsMatching(t.name) {
		g.mu.Lock()
		if !g.deleted {
			e.addTopicToGroup(g, t, false)
			e.rebalance(g)
		}
		g.mu.Unlock()
	}
	return t, true
}

// groupsMatching returns the groups whose pattern matches topic, from the
// pattern index: the cost is that of the groups that read the topic, not
// of every group.
func (e *Engine) groupsMatching(topic string) []*group {
	var gs []*group
	e.gmu.Lock()
	e.index.Match(topic, func(_ string, vs []*group) { gs = append(gs, vs...) })
	e.gmu.Unlock()
	return gs
}

// DeleteTopic removes a topic and its records, drops its groups' cursors on
// it (in-flight records on it can no longer be acked) and then calls every
// observer's TopicDeleted, before any record of a topic created again under
// the name. Appends blocked on it fail.
func (e *Engine) DeleteTopic(ctx context.Context, name string) error {
	e.topicsMu.Lock()
	t := e.lookup(name)
	if t == nil {
		e.topicsMu.Unlock()
		return e.topicErr(name)
	}
	e.topics.Delete(name)
	t.deleted.Store(true)
	told := make(chan struct{})
	if e.deleting == nil {
		e.deleting = make(map[string]chan struct{})
	}
	e.deleting[name] = told
	e.topicsMu.Unlock()
	defer func() {
		e.topicsMu.Lock()
		delete(e.deleting, name)
		e.topicsMu.Unlock()
		close(told)
	}()
	// Barrier: an Append that saw the topic before it was deleted finishes
	// (and announces) under partition.mu before TopicDeleted below.
	for _, p := range t.parts {
		p.mu.Lock()
		close(p.space) // wake blocked appenders; they see deleted
		p.space = make(chan struct{})
		p.mu.Unlock()
	}

	for _, g := range e.groupsMatching(name) {
		g.mu.Lock()
		if !g.deleted && e.removeTopicFromGroup(g, t) {
			e.rebalance(g)
		}
		g.mu.Unlock()
	}

	for _, o := range e.observers.List() {
		o.TopicDeleted(name)
	}
	return nil
}

// Topic returns a topic's configuration and partition state.
func (e *Engine) Topic(ctx context.Context, name string) (engine.TopicInfo, error) {
	t := e.lookup(name)
	if t == nil {
		return engine.TopicInfo{}, e.topicErr(name)
	}
	return e.topicInfo(t), nil
}

// Topics returns every topic, sorted by name.
func (e *Engine) Topics(ctx context.Context) ([]engine.TopicInfo, error) {
	var ts []*topic
	e.topics.Range(func(_, v any) bool {
		ts = append(ts, v.(*topic))
		return true
	})
	slices.SortFunc(ts, func(a, b *topic) int { return strings.Compare(a.name, b.name) })
	out := make([]engine.TopicInfo, 0, len(ts))
	for _, t := range ts {
		out = append(out, e.topicInfo(t))
	}
	return out, nil
}

// TopicsPage returns at most limit topics named after after, sorted by
// name, and whether more follow (see engine.Engine). It visits every
// topic but keeps only the page's: memory in proportion to limit.
func (e *Engine) TopicsPage(ctx context.Context, after string, limit int) ([]engine.TopicInfo, bool, error) {
	p := listing.New[*topic](after, limit)
	e.topics.Range(func(k, v any) bool {
		p.Add(k.(string), v.(*topic))
		return true
	})
	ts, more := p.Sorted()
	out := make([]engine.TopicInfo, 0, len(ts))
	for _, t := range ts {
		out = append(out, e.topicInfo(t))
	}
	return out, more, nil
}

func (e *Engine) topicInfo(t *topic) engine.TopicInfo {
	info := engine.TopicInfo{Config: t.cfg, Created: t.created, Parts: make([]engine.PartitionInfo, len(t.parts))}
	now := e.clock.Now()
	for i, p := range t.parts {
		p.mu.Lock()
		p.trimAge(t.cfg.MaxAge, now)
		info.Parts[i] = p.info()
		p.mu.Unlock()
	}
	return info
}

// errTopicGone: the topic was deleted between lookup and append.
var errTopicGone = fmt.Errorf("memengine: topic deleted during append: %w", engine.ErrUnknownTopic)

// Append stores m and calls every observer before returning. An unknown
// topic is created with the defaults unless the engine is strict. With a
// MsgID, a repeat within the dedupe window returns the first append's
// position with Duplicate set and stores nothing. Under the Block policy it
// waits (see engine.Block) and fails with an error wrapping
// engine.ErrBackpressure, ctx's error, or engine.ErrClosed.
func (e *Engine) Append(ctx context.Context, m engine.Message) (engine.Appended, error) {
	// A topic deleted under a concurrent Append is looked up (and, unless
	// strict, created) again; three tries bound the loop.
	var err error
	for range 3 {
		if e.closed.Load() {
			return engine.Appended{}, closedErr()
		}
		t := e.lookup(m.Topic)
		if t == nil {
			if e.strict {
				return engine.Appended{}, e.topicErr(m.Topic)
			}
			cfg := e.defaults
			cfg.Name = m.Topic
			t, _ = e.create(cfg)
		}
		var a engine.Appended
		if m.MsgID == "" {
			a, err = e.appendTo(ctx, t, &m)
		} else {
			a, err = e.appendOnce(ctx, t, &m)
		}
		if err != errTopicGone {
			return a, err
		}
	}
	return engine.Appended{}, err
}

// appendOnce appends m unless its MsgID was appended to t within the dedupe
// window. A repeat of an id whose first append is still running waits for
// it, after engine.BeforeWait.
func (e *Engine) appendOnce(ctx context.Context, t *topic, m *engine.Message) (engine.Appended, error) {
	window := e.policy.DedupeWindow
	for range 3 { // retried when a concurrent first append failed
		now := e.clock.Now()
		t.dmu.Lock()
		if t.dedupe == nil {
			t.dedupe = make(map[string]*dedupeEntry)
		}
		// Expire from the front: entries are in time order.
		for len(t.dq) > 0 && now.Sub(t.dq[0].at) >= window {
			old := t.dq[0]
			t.dq[0] = nil
			t.dq = t.dq[1:]
			if t.dedupe[old.id] == old {
				delete(t.dedupe, old.id)
			}
		}
		if first, ok := t.dedupe[m.MsgID]; ok {
			t.dmu.Unlock()
			select {
			case <-first.done:
			default:
				// The first append is still storing (it may itself wait
				// for room under Block): a wait of this Append's own.
				engine.BeforeWait(ctx)
				select {
				case <-first.done:
				case <-ctx.Done():
					return engine.Appended{}, ctx.Err()
				}
			}
			if first.err != nil {
				continue
			}
			a := first.res
			a.Duplicate = true
			return a, nil
		}
		d := &dedupeEntry{id: m.MsgID, at: now, done: make(chan struct{})}
		t.dedupe[m.MsgID] = d
		t.dq = append(t.dq, d)
		t.dmu.Unlock()

		d.res, d.err = e.appendTo(ctx, t, m)
		if d.err != nil {
			t.dmu.Lock()
			if t.dedupe[m.MsgID] == d {
				delete(t.dedupe, m.MsgID)
			}
			t.dmu.Unlock()
		}
		close(d.done)
		return d.res, d.err
	}
	return e.appendTo(ctx, t, m)
}

// appendTo stores m in one of t's partitions and announces it.
func (e *Engine) appendTo(ctx context.Context, t *topic, m *engine.Message) (engine.Appended, error) {
	p := t.parts[t.partitioner.Partition(m.Key, len(t.parts))]
	r := &engine.Record{
		Topic:     t.name,
		Partition: p.index,
		Key:       m.Key,
		Data:      append([]byte(nil), m.Data...),
		Priority:  m.Priority,
	}
	if len(m.Headers) > 0 {
		r.Headers = maps.Clone(m.Headers)
	}
	maxMsgs := t.cfg.MaxMessages
	var bw *lifecycle.Timeout // set on the first wait under the Block policy

	p.mu.Lock()
	now := e.clock.Now()
	for {
		if t.deleted.Load() {
			p.mu.Unlock()
			bw.Stop()
			return engine.Appended{}, errTopicGone
		}
		p.trimAge(t.cfg.MaxAge, now)
		if maxMsgs <= 0 || int64(p.n) < maxMsgs {
			break
		}
		// Full. Under Block, wait while a group still needs the oldest.
		if t.cfg.OnFull == engine.Block && p.readers > 0 && p.floor <= p.base {
			if bw == nil {
				bw = e.newBlockWait(t.cfg.BlockTimeout)
			}
			if err := e.waitForSpace(ctx, t, p, bw); err != nil {
				bw.Stop()
				return engine.Appended{}, err
			}
			now = e.clock.Now()
			continue
		}
		for int64(p.n) >= maxMsgs {
			p.trimOldest()
		}
	}
	bw.Stop()
	if now.Before(p.lastTime) {
		now = p.lastTime // keep times ordered for Resolve's binary search
	}
	p.lastTime = now
	r.Offset = p.next()
	r.Time = now
	p.push(r)
	for _, o := range e.observers.List() {
		engine.Announce(ctx, o, r)
	}
	p.mu.Unlock()

	// Only cursors with a member that can take a record are listed, each
	// pumped under its own group's lock: an append costs what the live
	// groups on the partition need.
	if pumped := p.pumped.Load(); pumped != nil {
		for _, gp := range *pumped {
			gp.g.mu.Lock()
			e.pumpAppended(gp)
			gp.g.mu.Unlock()
		}
	}
	return engine.Appended{Partition: r.Partition, Offset: r.Offset, Time: now}, nil
}

func (e *Engine) newBlockWait(d time.Duration) *lifecycle.Timeout {
	return e.life.Timeout(e.clock, d)
}

// waitForSpace waits, with p.mu released, until the partition's floor may
// have risen, the block timeout passes, ctx is done or the engine closes.
// Caller holds p.mu; it is held again on return.
func (e *Engine) waitForSpace(ctx context.Context, t *topic, p *partition, bw *lifecycle.Timeout) error {
	space := p.space
	p.waiters++
	p.mu.Unlock()
	engine.BeforeWait(ctx)
	var err error
	select {
	case <-space:
	case <-bw.Done():
		err = fmt.Errorf("memengine: topic %q partition %d full for %v: %w",
			t.name, p.index, t.cfg.BlockTimeout, engine.ErrBackpressure)
	case <-ctx.Done():
		err = ctx.Err()
	case <-e.closeCh:
		err = closedErr()
	}
	p.mu.Lock()
	p.waiters--
	if err != nil {
		p.mu.Unlock()
	}
	return err
}

// Read returns up to limit records from offset from (clamped up to the
// earliest retained) and the offset after the last one returned. A limit
// of zero or less returns no records.
func (e *Engine) Read(ctx context.Context, topicName string, partition int, from int64, limit int) ([]*engine.Record, int64, error) {
	t, p, err := e.partitionOf(topicName, partition)
	if err != nil {
		return nil, 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trimAge(t.cfg.MaxAge, e.clock.Now())
	from = min(max(from, p.base), p.next())
	n := int(min(int64(max(limit, 0)), p.next()-from))
	recs := make([]*engine.Record, n)
	for i := range recs {
		recs[i] = p.at(from + int64(i))
	}
	return recs, from + int64(n), nil
}

// Resolve turns s into an offset of a partition: earliest retained, latest
// (the next offset), the first record at or after a time (the next offset
// when there is none), or an offset clamped to [earliest, next].
func (e *Engine) Resolve(ctx context.Context, topicName string, partition int, s engine.Start) (int64, error) {
	t, p, err := e.partitionOf(topicName, partition)
	if err != nil {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trimAge(t.cfg.MaxAge, e.clock.Now())
	return p.resolve(s), nil
}

var _ engine.AsyncAppender = (*Engine)(nil)

// AppendAsync implements engine.AsyncAppender: an in-memory append waits on
// nothing, so it runs Append and calls done before returning.
func (e *Engine) AppendAsync(ctx context.Context, m engine.Message, done func(engine.Appended, error)) {
	done(e.Append(ctx, m))
}
