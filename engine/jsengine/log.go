package jsengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/lifecycle"
	"github.com/switchyard/switchyard/engine/internal/listing"
)

// Record headers. Payload bytes are the NATS message data.
const (
	hOff  = "Sy-Off"  // the record's offset (a marker's: the last offset used)
	hTime = "Sy-Time" // append time from the engine's clock, Unix nanoseconds
	hCum  = "Sy-Cum"  // retained-size bookkeeping: bytes appended to the partition so far
	hMeta = "Sy-Meta" // JSON {k, h, p}: key, headers, priority (absent when all empty)
	hMark = "Sy-Mark" // "1" on a trim marker, which holds a partition's next offset
)

// cacheSize is how many recent records of a partition the tail keeps in
// memory for Read and group delivery; older ones are fetched from NATS.
const cacheSize = 512

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

type cached struct {
	rec *engine.Record
	seq uint64
}

type recMeta struct {
	K string            `json:"k,omitempty"`
	H map[string]string `json:"h,omitempty"`
	P uint8             `json:"p,omitempty"`
}

// trimSlack is how many records past MaxMessages a large drop_oldest
// partition may hold between trims. A trim is a purge round trip made by
// an append one at a time (after the partition's pipelined appends), so
// trimming on every append at the cap would end pipelining for good once
// a busy topic fills (the default cap is reached in minutes at hundreds of
// publishes per second). With the slack, an append trims back to
// MaxMessages only once fewer than maxPipelined records of slack are left,
// and the appends in between stay pipelined (see AppendAsync). Caps below
// 32768 records, and Block topics, are kept exactly (no slack).
func trimSlack(cfg engine.TopicConfig) int64 {
	if cfg.OnFull == engine.Block || cfg.MaxMessages < 32768 {
		return 0
	}
	return min(cfg.MaxMessages/16, 8192)
}

func recordBytes(r *engine.Record) int64 {
	b := len(r.Data) + len(r.Key)
	for k, v := range r.Headers {
		b += len(k) + len(v)
	}
	return int64(b)
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

// parsed is a stored message decoded: a record or a trim marker.
type parsed struct {
	rec  *engine.Record
	seq  uint64
	off  int64
	cum  int64
	mark bool
	time time.Time
}

func parseMsg(t *topic, partition int, seq uint64, h nats.Header, data []byte) (parsed, error) {
	off, err := strconv.ParseInt(h.Get(hOff), 10, 64)
	if err != nil {
		return parsed{}, fmt.Errorf("jsengine: message %d has no offset", seq)
	}
	ns, _ := strconv.ParseInt(h.Get(hTime), 10, 64)
	cum, _ := strconv.ParseInt(h.Get(hCum), 10, 64)
	p := parsed{seq: seq, off: off, cum: cum, time: time.Unix(0, ns).UTC(), mark: h.Get(hMark) == "1"}
	if p.mark {
		return p, nil
	}
	r := &engine.Record{Topic: t.name, Partition: partition, Offset: off, Data: data, Time: p.time}
	if m := h.Get(hMeta); m != "" {
		var meta recMeta
		if err := json.Unmarshal([]byte(m), &meta); err == nil {
			r.Key, r.Headers, r.Priority = meta.K, meta.H, meta.P
		}
	}
	if r.Data == nil {
		r.Data = []byte{}
	}
	p.rec = r
	return p, nil
}

// getMsg returns the first message of p's subject at or after seq.
func (e *Engine) getMsg(ctx context.Context, p *partition, seq uint64) (parsed, bool, error) {
	m, err := e.rec.GetMsg(ctx, max(seq, 1), jetstream.WithGetMsgSubject(p.subject))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return parsed{}, false, nil
	}
	if err != nil {
		return parsed{}, false, unavailable("get", err)
	}
	pm, err := parseMsg(p.t, p.index, m.Sequence, m.Header, m.Data)
	return pm, err == nil, err
}

// loadState reads the subject's last and first messages. Caller holds amu.
func (e *Engine) loadState(ctx context.Context, p *partition) error {
	last, err := e.rec.GetLastMsgForSubject(ctx, p.subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		p.known, p.lastSeq, p.lastMark, p.nextW, p.earliestW, p.cum, p.baseCum = true, 0, false, 0, 0, 0, 0
		p.firstTime, p.lastTime = time.Time{}, time.Time{}
		p.loaded.Store(true)
		e.updateView(p)
		return nil
	}
	if err != nil {
		return unavailable("load partition", err)
	}
	lp, err := parseMsg(p.t, p.index, last.Sequence, last.Header, last.Data)
	if err != nil {
		return err
	}
	p.lastSeq, p.lastMark, p.nextW, p.cum, p.lastTime = lp.seq, lp.mark, lp.off+1, lp.cum, lp.time
	p.earliestW, p.baseCum, p.firstTime = p.nextW, p.cum, time.Time{}
	if !lp.mark {
		first, ok, err := e.getMsg(ctx, p, 1)
		for err == nil && ok && first.mark {
			first, ok, err = e.getMsg(ctx, p, first.seq+1)
		}
		if err != nil {
			return err
		}
		if ok {
			p.earliestW, p.baseCum, p.firstTime = first.off, first.cum-recordBytes(first.rec), first.time
		}
	}
	p.known = true
	p.loaded.Store(true)
	e.updateView(p)
	if !lp.mark {
		// The newest record came with the load: keep it, so that a read of
		// the last record (a subscribe with "last") costs no round trip.
		p.smu.Lock()
		if lp.off >= p.earliest {
			p.cacheAdd(cached{rec: lp.rec, seq: lp.seq})
		}
		p.smu.Unlock()
	}
	return nil
}

// updateView publishes the writer's state to the shared view.
func (e *Engine) updateView(p *partition) {
	p.smu.Lock()
	p.next = max(p.next, p.nextW)
	p.seen = max(p.seen, p.lastSeq)
	p.earliest = max(p.earliest, p.earliestW)
	if len(p.cache) > 0 && p.cache[0].rec.Offset < p.earliest {
		i := min(int(p.earliest-p.cache[0].rec.Offset), len(p.cache))
		p.cache = slices.Delete(p.cache, 0, i)
	}
	p.smu.Unlock()
}

func header(off int64, at time.Time, cum int64) nats.Header {
	h := nats.Header{}
	h.Set(hOff, strconv.FormatInt(off, 10))
	h.Set(hTime, strconv.FormatInt(at.UnixNano(), 10))
	h.Set(hCum, strconv.FormatInt(cum, 10))
	return h
}

// trimAge removes records older than the topic's MaxAge at now, leaving a
// marker when none remain so the next offset survives. Caller holds amu and
// the state is known.
func (e *Engine) trimAge(ctx context.Context, p *partition, now time.Time) error {
	maxAge := p.t.cfg.MaxAge
	if maxAge <= 0 || p.earliestW >= p.nextW {
		return nil
	}
	cutoff := now.Add(-maxAge)
	if !p.firstTime.IsZero() && !p.firstTime.Before(cutoff) {
		return nil
	}
	for range 5 {
		m, ok, err := e.getMsg(ctx, p, 1)
		for err == nil && ok && (m.mark || m.time.Before(cutoff)) {
			m, ok, err = e.getMsg(ctx, p, m.seq+1)
		}
		if err != nil {
			return err
		}
		if ok { // m is the first record to keep
			if err := e.rec.Purge(ctx, jetstream.WithPurgeSubject(p.subject), jetstream.WithPurgeSequence(m.seq)); err != nil {
				return unavailable("trim", err)
			}
			p.earliestW, p.firstTime, p.baseCum = m.off, m.time, m.cum-recordBytes(m.rec)
			e.updateView(p)
			return nil
		}
		// Every record expired: store a marker holding the next offset.
		msg := &nats.Msg{Subject: p.subject, Header: header(p.nextW-1, now, p.cum)}
		msg.Header.Set(hMark, "1")
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(p.lastSeq, 10))
		ack, err := e.js.PublishMsg(ctx, msg)
		if isWrongLast(err) {
			if err := e.loadState(ctx, p); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return unavailable("trim", err)
		}
		if err := e.rec.Purge(ctx, jetstream.WithPurgeSubject(p.subject), jetstream.WithPurgeSequence(ack.Sequence)); err != nil {
			return unavailable("trim", err)
		}
		p.lastSeq, p.lastMark, p.earliestW, p.firstTime, p.baseCum = ack.Sequence, true, p.nextW, time.Time{}, p.cum
		e.updateView(p)
		return nil
	}
	return nil
}

// trimCount purges all but p's newest keep messages and learns the
// partition's earliest record from NATS: another node may have appended
// (and trimmed) between this node's last append and the purge, so the
// purge can leave a later earliest record than p's state implies. A
// failed purge is logged (the next trim tries again). Caller holds amu;
// the partition's last message is a record this node just appended.
func (e *Engine) trimCount(ctx context.Context, p *partition, keep int64) {
	if err := e.rec.Purge(ctx, jetstream.WithPurgeSubject(p.subject), jetstream.WithPurgeKeep(uint64(keep))); err != nil {
		e.log.Warn("jsengine: trim", "subject", p.subject, "err", err)
		return
	}
	p.earliestW, p.firstTime = max(p.earliestW, p.nextW-keep), time.Time{}
	first, ok, err := e.getMsg(ctx, p, 1)
	if err != nil || !ok || first.mark {
		return // at least what this node appended is known to be gone
	}
	p.earliestW, p.firstTime, p.baseCum = max(p.earliestW, first.off), first.time, first.cum-recordBytes(first.rec)
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
// fail.
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
	// Its groups' committed offsets go too.
	if lister, err := e.groupKV.ListKeysFiltered(ctx, fmt.Sprintf("c.*.%s.%d.*", enc(name), t.inc)); err == nil {
		for k := range lister.Keys() {
			_ = e.groupKV.Purge(ctx, k)
		}
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

// topicsMaxAge is how long Topics serves the partition states it loaded
// from NATS before loading them again (offsets are kept current from the
// tail meanwhile): readiness probes, replaying subscribes and the system
// topics ask often, and each load is a round trip per partition.
const topicsMaxAge = time.Second

// topicsCache is the last listing Topics loaded.
type topicsCache struct {
	at    time.Time // real time of the load
	gen   uint64    // Engine.topicsGen at the load
	ts    []*topic
	infos []engine.TopicInfo
}

// Topics returns every topic, sorted by name. Partition states are loaded
// from NATS at most once per topicsMaxAge (a topic created or deleted meanwhile
// reloads them at once); in between, earliest and next offsets come from
// what this node's tail and appends saw, and Bytes from the last load. It
// fails with an error wrapping engine.ErrUnavailable at once while NATS is
// unreachable, even when there are no topics, so it serves as a readiness
// check.
func (e *Engine) Topics(ctx context.Context) (_ []engine.TopicInfo, err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	if err := e.reachable(); err != nil {
		return nil, err
	}
	gen := e.topicsGen.Load()
	e.topicsMu.Lock()
	c := e.topicsC
	e.topicsMu.Unlock()
	if c != nil && c.gen == gen && time.Since(c.at) < topicsMaxAge {
		return c.current(), nil
	}
	e.tmu.RLock()
	ts := slices.Collect(maps.Values(e.topics))
	e.tmu.RUnlock()
	slices.SortFunc(ts, func(a, b *topic) int { return strings.Compare(a.name, b.name) })
	c = &topicsCache{at: time.Now(), gen: gen}
	for _, t := range ts {
		info, err := e.topicInfo(ctx, t)
		if err != nil {
			if errors.Is(err, engine.ErrUnavailable) || ctx.Err() != nil {
				return nil, err
			}
			continue // deleted meanwhile
		}
		c.ts, c.infos = append(c.ts, t), append(c.infos, info)
	}
	e.topicsMu.Lock()
	e.topicsC = c
	e.topicsMu.Unlock()
	return c.current(), nil
}

// current returns a copy of the listing with offsets brought up to what
// the node has seen since.
func (c *topicsCache) current() []engine.TopicInfo {
	out := make([]engine.TopicInfo, 0, len(c.infos))
	for i := range c.infos {
		if info, ok := c.fresh(i); ok {
			out = append(out, info)
		}
	}
	return out
}

// page returns the cached topics of a TopicsPage, brought up to date as
// by current: it finds the cursor by binary search and copies only the
// page.
func (c *topicsCache) page(after string, limit int) ([]engine.TopicInfo, bool) {
	limit = min(max(limit, 1), listing.MaxLimit)
	i, _ := slices.BinarySearchFunc(c.ts, after, func(t *topic, name string) int { return strings.Compare(t.name, name) })
	if i < len(c.ts) && c.ts[i].name == after {
		i++
	}
	var out []engine.TopicInfo
	for ; i < len(c.ts); i++ {
		info, ok := c.fresh(i)
		if !ok {
			continue
		}
		if len(out) == limit {
			return out, true
		}
		out = append(out, info)
	}
	return out, false
}

// fresh returns the i-th cached topic with offsets brought up to what the
// node has seen since, or false when it was deleted since.
func (c *topicsCache) fresh(i int) (engine.TopicInfo, bool) {
	info, t := c.infos[i], c.ts[i]
	if t.deleted.Load() {
		return engine.TopicInfo{}, false
	}
	info.Parts = slices.Clone(info.Parts)
	for j, p := range t.parts {
		earliest, next := p.view()
		pi := &info.Parts[j]
		pi.Next = max(pi.Next, next)
		pi.Earliest = min(max(pi.Earliest, earliest), pi.Next)
		pi.Dropped = pi.Earliest
	}
	return info, true
}

// TopicsPage returns at most limit topics named after after, sorted by
// name, and whether more follow (see engine.Engine). Every node knows
// every topic's configuration (the topic bucket's watcher keeps them in
// memory), so no NATS listing is needed: the page's topics are picked from
// that set, keeping only the page, and their partition states come from
// the last Topics load while it is fresh (as Topics serves them), else
// from NATS for the page's partitions only. Like Topics it fails at once
// while NATS is unreachable.
func (e *Engine) TopicsPage(ctx context.Context, after string, limit int) (_ []engine.TopicInfo, more bool, err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	if err := e.reachable(); err != nil {
		return nil, false, err
	}
	gen := e.topicsGen.Load()
	e.topicsMu.Lock()
	c := e.topicsC
	e.topicsMu.Unlock()
	if c != nil && c.gen == gen && time.Since(c.at) < topicsMaxAge {
		out, more := c.page(after, limit)
		return out, more, nil
	}
	p := listing.New[*topic](after, limit)
	e.tmu.RLock()
	for name, t := range e.topics {
		p.Add(name, t)
	}
	e.tmu.RUnlock()
	ts, more := p.Sorted()
	out := make([]engine.TopicInfo, 0, len(ts))
	for _, t := range ts {
		info, err := e.topicInfo(ctx, t)
		if err != nil {
			if errors.Is(err, engine.ErrUnavailable) || ctx.Err() != nil {
				return nil, false, err
			}
			continue // deleted meanwhile
		}
		out = append(out, info)
	}
	return out, more, nil
}

// errTopicGone: the topic was deleted between lookup and append.
var errTopicGone = fmt.Errorf("jsengine: topic deleted during append: %w", engine.ErrUnknownTopic)

// Append stores m and returns once this node's observers have seen it. An
// unknown topic is created with the defaults unless the engine is strict.
// With a MsgID, a repeat within the dedupe window (on the engine's clock)
// returns the first append's position with Duplicate set. Under the Block
// policy it waits (see engine.Block) and fails with an error wrapping
// engine.ErrBackpressure, ctx's error, or engine.ErrClosed.
func (e *Engine) Append(ctx context.Context, m engine.Message) (_ engine.Appended, err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	for range 3 {
		if e.closed.Load() {
			return engine.Appended{}, closedErr()
		}
		if err := e.reachable(); err != nil {
			return engine.Appended{}, err
		}
		var t *topic
		t, err = e.lookup(ctx, m.Topic)
		if errors.Is(err, engine.ErrUnknownTopic) && !e.strict {
			cfg := e.defaults
			cfg.Name = m.Topic
			t, _, err = e.create(ctx, cfg)
		}
		if err != nil {
			return engine.Appended{}, err
		}
		if t == nil {
			continue
		}
		var a engine.Appended
		var seq uint64
		if m.MsgID == "" {
			a, seq, err = e.appendTo(ctx, t, &m, "")
		} else {
			a, err = e.appendOnce(ctx, t, &m) // waits for the tail itself
		}
		if err == nil && seq != 0 {
			e.waitTail(ctx, seq)
		}
		if err != errTopicGone {
			return a, err
		}
	}
	return engine.Appended{}, err
}

// appendTo stores m in one of t's partitions: the offset is the subject's
// last offset plus one, published with the subject's last sequence as the
// expected one, so two nodes racing for an offset cannot both get it (the
// loser reloads and retries). msgID, when set, is the Nats-Msg-Id, which
// makes a retried publish of the same claim idempotent in the server.
//
// It returns the record's stream sequence, for the caller's waitTail
// (Append returns once the tail announced the record).
func (e *Engine) appendTo(ctx context.Context, t *topic, m *engine.Message, msgID string) (engine.Appended, uint64, error) {
	return e.appendToPart(ctx, t, m, msgID, t.partitioner.Partition(m.Key, len(t.parts)))
}

// metaOf is the Sy-Meta header of m, nil when it has none.
func metaOf(m *engine.Message) []byte {
	if m.Key == "" && len(m.Headers) == 0 && m.Priority == 0 {
		return nil
	}
	meta, _ := json.Marshal(recMeta{K: m.Key, H: m.Headers, P: m.Priority})
	return meta
}

// appendToPart is appendTo into partition index pi.
func (e *Engine) appendToPart(ctx context.Context, t *topic, m *engine.Message, msgID string, pi int) (engine.Appended, uint64, error) {
	p := t.parts[pi]
	meta := metaOf(m)
	size := recordBytes(&engine.Record{Key: m.Key, Headers: m.Headers, Data: m.Data})
	maxMsgs := t.cfg.MaxMessages
	var bw *lifecycle.Timeout

	p.amu.Lock()
	p.quiesce()
	earliestBefore := p.earliestW
	var res engine.Appended
	var seq uint64
	for attempt := 0; ; attempt++ {
		if t.deleted.Load() {
			p.amu.Unlock()
			bw.Stop()
			return engine.Appended{}, 0, errTopicGone
		}
		if e.closed.Load() {
			p.amu.Unlock()
			bw.Stop()
			return engine.Appended{}, 0, closedErr()
		}
		if err := e.reachable(); err != nil {
			p.amu.Unlock()
			bw.Stop()
			return engine.Appended{}, 0, err
		}
		if attempt > 100 {
			p.amu.Unlock()
			bw.Stop()
			return engine.Appended{}, 0, fmt.Errorf("jsengine: topic %q partition %d: too much contention: %w", t.name, p.index, engine.ErrUnavailable)
		}
		if !p.known {
			if err := e.loadState(ctx, p); err != nil {
				p.amu.Unlock()
				bw.Stop()
				return engine.Appended{}, 0, err
			}
		}
		now := e.clock.Now()
		if now.Before(p.lastTime) {
			now = p.lastTime // keep times ordered for Resolve's search
		}
		if err := e.trimAge(ctx, p, now); err != nil {
			p.amu.Unlock()
			bw.Stop()
			return engine.Appended{}, 0, err
		}
		if maxMsgs > 0 && p.nextW-p.earliestW >= maxMsgs && t.cfg.OnFull == engine.Block {
			// Check and start waiting under one smu hold, so a commit in
			// between cannot be missed.
			p.smu.Lock()
			needed := p.readers > 0 && p.floor <= p.earliestW
			space := p.space
			if needed {
				p.waiters++
			}
			p.smu.Unlock()
			if needed {
				if bw == nil {
					bw = e.newBlockWait(t.cfg.BlockTimeout)
				}
				if err := e.waitForSpace(ctx, t, p, bw, space); err != nil {
					bw.Stop()
					return engine.Appended{}, 0, err
				}
				p.known = false // others may have appended meanwhile
				continue
			}
		}
		off := p.nextW
		msg := &nats.Msg{Subject: p.subject, Data: m.Data, Header: header(off, now, p.cum+size)}
		if meta != nil {
			msg.Header.Set(hMeta, string(meta))
		}
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(p.lastSeq, 10))
		if msgID != "" {
			msg.Header.Set(jetstream.MsgIDHeader, msgID)
		}
		ack, err := e.js.PublishMsg(ctx, msg)
		if isWrongLast(err) {
			p.known = false
			if msgID != "" {
				// Another publish under this Nats-Msg-Id (an earlier try,
				// or another node's under the same claim) may have landed:
				// a standalone server checks the expected last sequence
				// before duplicates. Not this publish, which was refused:
				// a duplicate of it.
				if last, err := e.rec.GetLastMsgForSubject(ctx, p.subject); err == nil && last.Header.Get(jetstream.MsgIDHeader) == msgID {
					if pm, err := parseMsg(t, p.index, last.Sequence, last.Header, last.Data); err == nil {
						res, seq = engine.Appended{Partition: p.index, Offset: pm.off, Time: pm.time, Duplicate: true}, last.Sequence
						break
					}
				}
			}
			continue
		}
		if err != nil {
			p.amu.Unlock()
			bw.Stop()
			return engine.Appended{}, 0, unavailable("append", err)
		}
		if ack.Duplicate {
			// Stored before under this Nats-Msg-Id (perhaps by another
			// node, perhaps in another partition): report that record.
			p.known = false
			p.amu.Unlock()
			bw.Stop()
			a, err := e.storedAt(ctx, t, ack.Sequence)
			return a, ack.Sequence, err
		}
		prevMark := p.lastMark
		wasEmpty := p.earliestW >= p.nextW
		p.lastSeq, p.lastMark, p.nextW, p.cum, p.lastTime = ack.Sequence, false, off+1, p.cum+size, now
		if wasEmpty {
			p.earliestW, p.firstTime, p.baseCum = off, now, p.cum-size
		}
		switch {
		case prevMark:
			if err := e.rec.Purge(ctx, jetstream.WithPurgeSubject(p.subject), jetstream.WithPurgeSequence(ack.Sequence)); err != nil {
				e.log.Warn("jsengine: drop marker", "subject", p.subject, "err", err)
			}
		case maxMsgs > 0 && p.nextW-p.earliestW > maxMsgs &&
			p.nextW-p.earliestW+maxPipelined >= maxMsgs+trimSlack(t.cfg):
			if f := e.beforeTrim.Load(); f != nil {
				(*f)()
			}
			e.trimCount(ctx, p, maxMsgs)
		}
		e.updateView(p)
		res, seq = engine.Appended{Partition: p.index, Offset: off, Time: now}, ack.Sequence
		break
	}
	trimmed := p.earliestW != earliestBefore
	p.amu.Unlock()
	bw.Stop()
	if trimmed {
		e.pumpPartition(p)
	}
	return res, seq, nil
}

// waitTail waits until the tail has announced stream sequence seq, so that
// Append returns after this node's observers and groups have the record.
// It gives up (the record is stored either way) when ctx is done, the
// engine closes, or the tail falls tailWaitMax behind. Once a wait gave
// up, no wait starts until the tail has reached the sequence that wait was
// for: a stalled tail delays this node's appends by one tailWaitMax, not
// one each (the pipelined acknowledgements, answered one after another,
// would otherwise take one tailWaitMax per record).
func (e *Engine) waitTail(ctx context.Context, seq uint64) {
	var timeout <-chan time.Time
	for {
		e.tailMu.Lock()
		if e.tailSeq >= seq || (timeout == nil && e.tailSeq < e.tailGaveUp) {
			e.tailMu.Unlock()
			return
		}
		e.tailWait++
		ch := e.tailWake
		e.tailMu.Unlock()
		if timeout == nil {
			t := time.NewTimer(e.tailWaitMax)
			defer t.Stop()
			timeout = t.C
		}
		var stop, late bool
		select {
		case <-ch:
		case <-ctx.Done():
			stop = true
		case <-e.closeCh:
			stop = true
		case <-timeout:
			stop, late = true, true
		}
		e.tailMu.Lock()
		e.tailWait--
		if late {
			e.tailGaveUp = max(e.tailGaveUp, seq)
		}
		e.tailMu.Unlock()
		if late {
			e.tailGiveUps.Add(1)
		}
		if stop {
			return
		}
	}
}

func (e *Engine) newBlockWait(d time.Duration) *lifecycle.Timeout {
	return e.life.Timeout(e.clock, d)
}

// waitForSpace waits, with amu released, until space is closed (the
// partition's floor may have risen), the block timeout passes, ctx is done
// or the engine closes. Caller holds amu and has counted itself in
// p.waiters; amu is held again on a nil return, released otherwise.
func (e *Engine) waitForSpace(ctx context.Context, t *topic, p *partition, bw *lifecycle.Timeout, space chan struct{}) error {
	p.amu.Unlock()
	var err error
	select {
	case <-space:
	case <-bw.Done():
		err = fmt.Errorf("jsengine: topic %q partition %d full for %v: %w",
			t.name, p.index, t.cfg.BlockTimeout, engine.ErrBackpressure)
	case <-ctx.Done():
		err = ctx.Err()
	case <-e.closeCh:
		err = closedErr()
	}
	p.smu.Lock()
	p.waiters--
	p.smu.Unlock()
	if err == nil {
		p.amu.Lock()
	}
	return err
}

// Read returns up to limit records from offset from (clamped up to the
// earliest retained) and the offset after the last one returned. Recent
// records come from the tail's cache; older ones from NATS, one direct get
// per record after a binary search for the first.
func (e *Engine) Read(ctx context.Context, topicName string, partition int, from int64, limit int) (_ []*engine.Record, _ int64, err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	if err := e.reachable(); err != nil {
		return nil, 0, err
	}
	_, p, err := e.partitionOf(ctx, topicName, partition)
	if err != nil {
		return nil, 0, err
	}
	pi, lastSeq, err := e.snapshot(ctx, p)
	if err != nil {
		return nil, 0, err
	}
	from = min(max(from, pi.Earliest), pi.Next)
	n := int(min(int64(max(limit, 0)), pi.Next-from))
	if n == 0 {
		return []*engine.Record{}, from, nil
	}
	recs, _, err := e.fetch(ctx, p, from, n, lastSeq, 0)
	if err != nil {
		return nil, 0, err
	}
	if len(recs) > 0 {
		from = recs[0].Offset
	}
	return recs, from + int64(len(recs)), nil
}

// fetch returns up to n records of p from offset from, and the stream
// sequence after the last one returned. lastSeq bounds the subject's
// sequences (0: unknown); hint, when not 0, is the sequence of the record
// at from or of an earlier one, which spares the search.
func (e *Engine) fetch(ctx context.Context, p *partition, from int64, n int, lastSeq, hint uint64) ([]*engine.Record, uint64, error) {
	recs := make([]*engine.Record, 0, n)
	var seq, below uint64
	p.smu.Lock()
	if len(p.cache) > 0 {
		base := p.cache[0].rec.Offset
		if from >= base && from < base+int64(len(p.cache)) {
			for i := int(from - base); i < len(p.cache) && len(recs) < n; i++ {
				recs = append(recs, p.cache[i].rec)
				seq = p.cache[i].seq + 1
			}
		} else if from < base && p.cache[0].seq > 1 && (lastSeq == 0 || p.cache[0].seq <= lastSeq) {
			// Everything before the cache lies below its first sequence.
			below = p.cache[0].seq
			lastSeq = below - 1
		}
	}
	p.smu.Unlock()
	if len(recs) == 0 && hint > 0 {
		seq = hint
	} else if len(recs) == 0 {
		s, err := e.seekSeq(ctx, p, lastSeq, func(m parsed) bool { return m.off >= from })
		if err != nil {
			return nil, 0, err
		}
		if s == 0 {
			s = below // purged meanwhile: the cache's first record is next
		}
		seq = s
	}
	var got []cached // fetched from NATS
	for len(recs) < n && seq > 0 {
		m, ok, err := e.getMsg(ctx, p, seq)
		if err != nil {
			return nil, 0, err
		}
		if !ok {
			break
		}
		seq = m.seq + 1
		if m.mark || m.off < from {
			continue
		}
		recs = append(recs, m.rec)
		got = append(got, cached{rec: m.rec, seq: m.seq})
	}
	p.cachePrepend(got)
	return recs, seq, nil
}

// cachePrepend puts records fetched from NATS in front of p's cache when
// they end where it starts and there is room, so that reading the newest
// records again (the next subscribe with "last") costs no round trip. It
// never evicts a newer record.
func (p *partition) cachePrepend(got []cached) {
	if len(got) == 0 {
		return
	}
	p.smu.Lock()
	defer p.smu.Unlock()
	if len(p.cache) == 0 || len(p.cache) >= cacheSize {
		return
	}
	base := p.cache[0].rec.Offset
	i := 0
	for i < len(got) && got[i].rec.Offset < base {
		i++
	}
	// got[:i] must end just before the cache, be contiguous and retained.
	if i == 0 || got[i-1].rec.Offset != base-1 || got[0].rec.Offset+int64(i-1) != base-1 {
		return
	}
	start := max(0, i-(cacheSize-len(p.cache)))
	for start < i && got[start].rec.Offset < p.earliest {
		start++
	}
	if start == i {
		return
	}
	p.cache = slices.Insert(p.cache, 0, got[start:i]...)
}

// lastSeen bounds the stream sequences of p's records this node can know
// of: the highest it saw of the subject, or the tail's position (every
// record stored before the tail's start or announced since is below it).
func (e *Engine) lastSeen(p *partition) uint64 {
	p.smu.Lock()
	seen := p.seen
	p.smu.Unlock()
	e.tailMu.Lock()
	defer e.tailMu.Unlock()
	return max(seen, e.tailSeq)
}

// seekSeq returns the smallest sequence s at which the first message of p's
// subject at or after s satisfies pred (monotone along the subject), by
// binary search over [first, last]; 0 when none does.
func (e *Engine) seekSeq(ctx context.Context, p *partition, last uint64, pred func(parsed) bool) (uint64, error) {
	first, ok, err := e.getMsg(ctx, p, 1)
	if err != nil || !ok {
		return 0, err
	}
	if last == 0 {
		last = ^uint64(0) >> 1
	}
	lo, hi := first.seq, last+1
	for lo < hi {
		mid := lo + (hi-lo)/2
		m, ok, err := e.getMsg(ctx, p, mid)
		if err != nil {
			return 0, err
		}
		if !ok || pred(m) {
			hi = mid
		} else {
			lo = m.seq + 1
		}
	}
	if lo > last {
		return 0, nil
	}
	return lo, nil
}

// Resolve turns s into an offset of a partition: earliest retained, latest
// (the next offset), the first record at or after a time (the next offset
// when there is none), or an offset clamped to [earliest, next].
func (e *Engine) Resolve(ctx context.Context, topicName string, partition int, s engine.Start) (_ int64, err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	if err := e.reachable(); err != nil {
		return 0, err
	}
	_, p, err := e.partitionOf(ctx, topicName, partition)
	if err != nil {
		return 0, err
	}
	return e.resolve(ctx, p, s)
}

func (e *Engine) resolve(ctx context.Context, p *partition, s engine.Start) (int64, error) {
	pi, lastSeq, err := e.snapshot(ctx, p)
	if err != nil {
		return 0, err
	}
	switch s.Kind {
	case engine.StartLatest:
		return pi.Next, nil
	case engine.StartOffset:
		return min(max(s.Offset, pi.Earliest), pi.Next), nil
	case engine.StartTime:
		if pi.Earliest == pi.Next {
			return pi.Next, nil
		}
		seq, err := e.seekSeq(ctx, p, lastSeq, func(m parsed) bool { return m.mark || !m.time.Before(s.Time) })
		if err != nil || seq == 0 {
			return pi.Next, err
		}
		m, ok, err := e.getMsg(ctx, p, seq)
		if err != nil || !ok || m.mark {
			return pi.Next, err
		}
		return max(m.off, pi.Earliest), nil
	default:
		return pi.Earliest, nil
	}
}

// tailMsg handles one stored message from the live tail (the engine's
// ordered consumer over every record subject): it updates the partition's
// view and cache, calls observers and feeds the partition's groups. It
// runs on the tail goroutine (tail.go), and announces in tailBatch's run.
func (e *Engine) tailMsg(msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		return
	}
	seq := md.Sequence.Stream
	defer e.advanceTail(seq)
	e.tailMu.Lock()
	stale := seq <= e.tailSeq
	e.tailMu.Unlock()
	if stale {
		return
	}
	// <prefix>.rec.<topic tokens>.<inc>.<partition>
	subj := strings.TrimPrefix(msg.Subject(), e.prefix+".rec.")
	i := strings.LastIndexByte(subj, '.')
	if i < 0 {
		return
	}
	part, err := strconv.Atoi(subj[i+1:])
	if err != nil {
		return
	}
	subj = subj[:i]
	i = strings.LastIndexByte(subj, '.')
	if i < 0 {
		return
	}
	inc, err := strconv.ParseUint(subj[i+1:], 10, 64)
	if err != nil {
		return
	}
	name := subj[:i]
	t := e.local(name)
	if t == nil || t.inc < inc {
		e.tailBatch.End() // what is announced is not held for the bucket
		t = e.tailTopic(name, inc)
	}
	if t == nil || t.inc != inc || part >= len(t.parts) || t.deleted.Load() {
		return
	}
	p := t.parts[part]
	pm, err := parseMsg(t, part, seq, msg.Headers(), msg.Data())
	if err != nil {
		return
	}
	p.smu.Lock()
	p.next = max(p.next, pm.off+1)
	p.seen = max(p.seen, seq)
	p.tailed = max(p.tailed, pm.off+1)
	if pm.mark {
		p.earliest = max(p.earliest, pm.off+1)
		p.cache = p.cache[:0]
		p.smu.Unlock()
		return
	}
	p.cacheAdd(cached{rec: pm.rec, seq: seq})
	p.smu.Unlock()

	for _, o := range e.observers.List() {
		engine.Announce(e.tailCtx, o, pm.rec)
	}
	if p.npumped.Load() == 0 {
		// No cursor here would act on the record: a Join that makes one
		// pumps it itself, after the record is in the cache above.
		return
	}
	e.gmu.Lock()
	for _, gp := range p.pumped { // copied on write: pump may change it
		e.pumpAppended(gp)
	}
	e.gmu.Unlock()
}

// tailTopic returns the incarnation of name the bucket holds for a tail
// record of incarnation inc that this node does not know yet. It retries
// while the bucket cannot be reached, holding the tail back rather than
// dropping the record, until the engine closes.
func (e *Engine) tailTopic(name string, inc uint64) *topic {
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		t, err := e.refresh(ctx, name)
		cancel()
		if err == nil || errors.Is(err, engine.ErrUnknownTopic) {
			return t
		}
		e.log.Warn("jsengine: tail: topic of a new incarnation", "topic", name, "inc", inc, "err", err)
		select {
		case <-time.After(delay):
		case <-e.closeCh:
			return nil
		}
	}
}

func (e *Engine) advanceTail(seq uint64) {
	e.tailMu.Lock()
	if seq > e.tailSeq {
		e.tailSeq = seq
	}
	if e.tailWait > 0 {
		close(e.tailWake)
		e.tailWake = make(chan struct{})
	}
	e.tailMu.Unlock()
}

// cacheAdd appends c to p's cache of newest records, keeping it contiguous
// (a record past a gap starts it again) and at most cacheSize long. A
// record it holds already (cached by a load before the tail reached it) is
// left as it is. Caller holds smu.
func (p *partition) cacheAdd(c cached) {
	if n := len(p.cache); n > 0 {
		last := p.cache[n-1].rec.Offset
		if c.rec.Offset <= last {
			return
		}
		if c.rec.Offset != last+1 {
			p.cache = p.cache[:0]
		}
	}
	if len(p.cache) >= cacheSize {
		// Resliced, not shifted: the append below copies the cache to a
		// new array once its capacity is used up, so an add costs O(1)
		// amortized rather than a move of the whole cache.
		p.cache = p.cache[len(p.cache)-cacheSize+1:]
	}
	p.cache = append(p.cache, c)
}

// cachedAt returns the record at offset off from p's cache, or nil.
func (p *partition) cachedAt(off int64) *engine.Record {
	p.smu.Lock()
	defer p.smu.Unlock()
	return p.cachedLocked(off)
}

// cachedOrComing returns the record at off from the tail's cache or, when
// it is not there, whether the tail will bring it,
// both seen at one moment: the tail brings every record at or after the
// offset after the last one it announced, once it has announced one.
func (p *partition) cachedOrComing(off int64) (*engine.Record, bool) {
	p.smu.Lock()
	defer p.smu.Unlock()
	if r := p.cachedLocked(off); r != nil {
		return r, false
	}
	return nil, p.tailed > 0 && off >= p.tailed
}

// cachedLocked is cachedAt with p.smu held.
func (p *partition) cachedLocked(off int64) *engine.Record {
	if len(p.cache) == 0 {
		return nil
	}
	i := off - p.cache[0].rec.Offset
	if i < 0 || i >= int64(len(p.cache)) {
		return nil
	}
	return p.cache[i].rec
}

// view returns the partition's earliest and next offsets as this node
// last saw them.
func (p *partition) view() (earliest, next int64) {
	p.smu.Lock()
	defer p.smu.Unlock()
	return p.earliest, p.next
}
