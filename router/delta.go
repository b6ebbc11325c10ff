package router

// Delta-compressed streams. A plain subscription that asks for
// "delta":"fossil" receives, after one full message of a (topic,
// partition), messages whose data is the Fossil delta of the record's
// payload against the previous payload of that partition it received
// (internal/wire, delta.go, has the frame).
//
// The delta is computed once per record, and its frame once per record,
// pattern and envelope, never per session: the router keeps, per (topic,
// partition) that delta subscribers receive, the last record the live
// fan-out passed them (the base, deltaBases); the delta of a new record is
// against that base, and every delta subscriber whose last record of the
// partition is the base shares the frame. A subscription keeps only the
// offset of the last record queued to it per partition (deltaSub); one
// that missed the base (a filter skipped it, a catch-up sent it, the queue
// dropped something, the partition is past its bound) gets the full
// message, which becomes its base. A queued delta whose predecessor the
// queue dropped afterwards is written as the full message instead: its Ref
// (deltaRef) gives the queue the full frame (session.Fallback).
//
// Bounds: Bounds.MaxDeltaPartitions per subscription (past it a partition
// is sent full), Bounds.MaxDeltaBases and Bounds.MaxDeltaBaseBytes for the
// bases of the whole router (past them the bases of other partitions are
// evicted, whose next messages are full; a record larger than the byte
// bound is no base). Metrics: switchyard_delta_deliveries_total{kind},
// switchyard_delta_untracked_total, switchyard_delta_bases,
// switchyard_delta_base_bytes, switchyard_delta_bases_refused_total.
//
// Lock order (router.go): deltaSub.mu and deltaBases.mu are leaves.
// deltaSub.mu is never held while calling the session (a Send may drop,
// and OnDrop only bumps deltaSub.gen).
//
// A drop between a subscription's choice of a delta and its push (maybe
// of the delta's base, whose gap the writer may have sent already) makes
// the queue write the full frame: the item carries the session's drop
// count read before the choice (Item.Dropped), and the queue raises that
// count only after OnDrop bumped deltaSub.gen.

import (
	"sync"
	"sync/atomic"

	"github.com/centrifugal/fdelta"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/session"
)

// Defaults of the delta bounds (Bounds).
const (
	// DefaultMaxDeltaPartitions: a dashboard subscription follows a few
	// partitions; a wildcard over thousands gets deltas on the first 1024.
	DefaultMaxDeltaPartitions = 1024
	// DefaultMaxDeltaBases bounds the partitions with a base.
	DefaultMaxDeltaBases = 65536
	// DefaultMaxDeltaBaseBytes bounds the payload bytes the bases hold
	// (records the log may have trimmed already).
	DefaultMaxDeltaBaseBytes = 64 << 20
)

// deltaSub is the delta state of one subscription.
type deltaSub struct {
	// gen counts drops of the subscription's messages (conn.onDrop); a
	// change makes every partition start again with a full message.
	gen atomic.Uint64

	mu   sync.Mutex        // guards the fields below
	seen uint64            // gen when last was last cleared
	last map[partKey]int64 // offset of the last record queued, per partition
}

// lastOffset returns the offset of the last record queued on k, if known.
func (ds *deltaSub) lastOffset(k partKey) (int64, bool) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if g := ds.gen.Load(); g != ds.seen {
		clear(ds.last)
		ds.seen = g
	}
	off, ok := ds.last[k]
	return off, ok
}

// forgetTopic forgets the partitions of a deleted topic.
func (ds *deltaSub) forgetTopic(topic string) {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	for k := range ds.last {
		if k.topic == topic {
			delete(ds.last, k)
		}
	}
}

// queued records the outcome of offering rec: base says the client will
// hold its payload as a base (queued, JSON). It reports false when the
// partition is past the bound.
func (ds *deltaSub) queued(k partKey, off int64, base bool, max int) bool {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	switch {
	case ds.gen.Load() != ds.seen:
		// Something was dropped meanwhile, maybe this very message.
		clear(ds.last)
		ds.seen = ds.gen.Load()
	case !base:
		delete(ds.last, k)
	default:
		if _, ok := ds.last[k]; !ok && len(ds.last) >= max {
			return false
		}
		ds.last[k] = off
	}
	return true
}

// deltaRef is the Ref of a queued delta message: the record, and the full
// frame the queue writes instead when it dropped the delta's base.
type deltaRef struct {
	rec  *engine.Record
	full []byte
}

// FallbackFrame implements session.Fallback.
func (r *deltaRef) FallbackFrame() []byte { return r.full }

var _ session.Fallback = (*deltaRef)(nil)

// refRecord returns the record a plain message's Ref carries.
func refRecord(ref any) (*engine.Record, bool) {
	switch r := ref.(type) {
	case *engine.Record:
		return r, true
	case *deltaRef:
		return r.rec, true
	}
	return nil, false
}

// deltaBases holds the base record of every partition delta subscribers
// receive. Safe for concurrent use; the fan-out of one partition is
// serial, so an entry's record is only swapped by one goroutine at a time.
type deltaBases struct {
	maxCount int
	maxBytes int64
	bytes    atomic.Int64
	refused  prometheus.Counter

	mu sync.RWMutex // guards m
	m  map[partKey]*deltaBase
}

type deltaBase struct{ rec atomic.Pointer[engine.Record] }

func (b *deltaBases) get(k partKey) *deltaBase {
	b.mu.RLock()
	e := b.m[k]
	b.mu.RUnlock()
	return e
}

// set makes rec the base of its partition. Past the bounds it evicts
// other partitions' bases (their next message is full) rather than refuse
// the live one: a base nobody follows any more would otherwise hold the
// bound for good. A record larger than the byte bound is no base.
func (b *deltaBases) set(rec *engine.Record) {
	k := partKey{rec.Topic, rec.Partition}
	n := int64(len(rec.Data))
	// The common case, under the read lock: the partition has an entry and
	// the bytes fit. Only this partition's fan-out stores into its entry;
	// eviction takes the write lock.
	b.mu.RLock()
	if e := b.m[k]; e != nil {
		var was int64
		if old := e.rec.Load(); old != nil {
			was = int64(len(old.Data))
		}
		if b.bytes.Load()-was+n <= b.maxBytes {
			e.rec.Store(rec)
			b.bytes.Add(n - was)
			b.mu.RUnlock()
			return
		}
	}
	b.mu.RUnlock()

	b.mu.Lock()
	defer b.mu.Unlock()
	e := b.m[k]
	if n > b.maxBytes {
		if e != nil {
			b.evictLocked(k, e)
		}
		b.refused.Inc()
		return
	}
	if e == nil {
		for len(b.m) >= b.maxCount && b.evictOtherLocked(k) {
		}
		if len(b.m) >= b.maxCount {
			b.refused.Inc()
			return
		}
		e = &deltaBase{}
		b.m[k] = e
	}
	var was int64
	if old := e.rec.Load(); old != nil {
		was = int64(len(old.Data))
	}
	for b.bytes.Load()-was+n > b.maxBytes && b.evictOtherLocked(k) {
	}
	if b.bytes.Load()-was+n > b.maxBytes {
		b.evictLocked(k, e)
		b.refused.Inc()
		return
	}
	e.rec.Store(rec)
	b.bytes.Add(n - was)
}

// evictOtherLocked evicts the base of one partition other than k (any:
// the map's order), reporting false when there is none. b.mu is held.
func (b *deltaBases) evictOtherLocked(k partKey) bool {
	for o, e := range b.m {
		if o != k {
			b.evictLocked(o, e)
			return true
		}
	}
	return false
}

// evictLocked forgets the base of k. b.mu is held.
func (b *deltaBases) evictLocked(k partKey, e *deltaBase) {
	if old := e.rec.Swap(nil); old != nil {
		b.bytes.Add(-int64(len(old.Data)))
	}
	delete(b.m, k)
}

// forgetTopic drops the bases of a deleted topic.
func (b *deltaBases) forgetTopic(topic string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for k, e := range b.m {
		if k.topic == topic {
			b.evictLocked(k, e)
		}
	}
}

func (b *deltaBases) count() int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return len(b.m)
}

// deltaMetrics are the delta stream's metrics.
type deltaMetrics struct {
	delta, full prometheus.Counter
	untracked   prometheus.Counter
}

// initDeltas sets up the bases and their metrics.
func (rt *Router) initDeltas(reg prometheus.Registerer) {
	const ns = "switchyard"
	b := rt.opts.Bounds
	rt.deltas = &deltaBases{maxCount: b.MaxDeltaBases, maxBytes: int64(b.MaxDeltaBaseBytes), m: map[partKey]*deltaBase{},
		refused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "delta_bases_refused_total",
			Help: "Records of delta streams not kept as a base because the bases were at --delta-max-bases or --delta-max-base-bytes (the next message is full)."})}
	deliveries := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "delta_deliveries_total",
		Help: "Messages queued to delta subscriptions, by kind (delta, or full)."}, []string{"kind"})
	rt.dm = deltaMetrics{
		delta: deliveries.WithLabelValues("delta"),
		full:  deliveries.WithLabelValues("full"),
		untracked: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "delta_untracked_total",
			Help: "Messages sent full because their subscription tracked --delta-max-partitions partitions already."}),
	}
	reg.MustRegister(deliveries, rt.dm.untracked, rt.deltas.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "delta_bases",
			Help: "Partitions holding a base record for delta subscriptions."}, func() float64 { return float64(rt.deltas.count()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: ns, Name: "delta_base_bytes",
			Help: "Payload bytes of the base records of delta subscriptions."}, func() float64 { return float64(rt.deltas.bytes.Load()) }))
}

// deltaCtx is the delta work of one record's fan-out: the delta, computed
// at most once, and the frames of the pattern being matched.
type deltaCtx struct {
	loaded  bool
	touched bool // a delta subscriber was offered the record
	// Counts for the metrics, added once per fan-out (done).
	nDelta, nFull, nUntracked int
	base                      *engine.Record // the partition's base, if a delta was made
	delta                     []byte         // nil: no delta (no base, binary, not smaller)
	body                      []byte
	lean                      int
	// The current pattern's frames and refs, by envelope (0 full, 1 lean).
	frames [2][]byte
	refs   [2]*deltaRef
}

// pattern starts the frames of a new pattern.
func (dc *deltaCtx) pattern() {
	dc.frames = [2][]byte{}
	dc.refs = [2]*deltaRef{}
}

// load computes rec's delta against its partition's base, once.
func (dc *deltaCtx) load(rt *Router, rec *engine.Record) {
	if dc.loaded {
		return
	}
	dc.loaded = true
	if wire.IsBinary(rec.Headers) {
		return
	}
	e := rt.deltas.get(partKey{rec.Topic, rec.Partition})
	if e == nil {
		return
	}
	base := e.rec.Load()
	if base == nil || base.Offset >= rec.Offset || wire.IsBinary(base.Headers) {
		return
	}
	d := fdelta.AppendCreate(make([]byte, 0, 64+len(rec.Data)/8), base.Data, rec.Data)
	if len(d) >= len(rec.Data) {
		return // a change of most of the payload: the full message is smaller
	}
	dc.base, dc.delta = base, d
	dc.body, dc.lean = wire.RecordDeltaBody(make([]byte, 0, 128+len(d)), rec, d)
}

// done makes rec the base of its partition when a delta subscriber was
// offered it.
func (dc *deltaCtx) done(rt *Router, rec *engine.Record) {
	if !dc.touched {
		return
	}
	rt.deltas.set(rec)
	if dc.nDelta > 0 {
		rt.dm.delta.Add(float64(dc.nDelta))
	}
	if dc.nFull > 0 {
		rt.dm.full.Add(float64(dc.nFull))
	}
	if dc.nUntracked > 0 {
		rt.dm.untracked.Add(float64(dc.nUntracked))
	}
}

// liveDelta offers rec to a delta subscription s of pattern from the live
// tail: the delta frame when the last record s was queued on the partition
// is the base, else full (the frame of s's envelope). It reports whether
// it queued the message.
func (rt *Router) liveDelta(dc *deltaCtx, s *subscription, pattern string, rec *engine.Record, full []byte, d *session.Deferral) bool {
	dc.touched = true
	k := partKey{rec.Topic, rec.Partition}
	// Read before the choice: a drop after it (maybe of the base, its gap
	// written before the push) makes the queue write the full frame.
	dropped := s.c.sess.Dropped()
	last, ok := s.delta.lastOffset(k)
	frame, ref := full, any(rec)
	if ok {
		dc.load(rt, rec)
		if dc.delta != nil && dc.base.Offset == last {
			env := 0
			if s.c.lean {
				env = 1
			}
			if dc.frames[env] == nil {
				if env == 1 {
					dc.frames[env] = encodeLeanMessage(pattern, rec.Topic, dc.body[:dc.lean])
				} else {
					dc.frames[env] = encodeMessage(pattern, dc.body)
				}
				dc.refs[env] = &deltaRef{rec: rec, full: full}
			}
			frame, ref = dc.frames[env], dc.refs[env]
		}
	}
	q := s.liveRef(rec, frame, ref, dropped, d)
	if q {
		if _, isDelta := ref.(*deltaRef); isDelta {
			dc.nDelta++
		} else {
			dc.nFull++
		}
	}
	base := q && !wire.IsBinary(rec.Headers)
	if !s.delta.queued(k, rec.Offset, base, rt.opts.Bounds.MaxDeltaPartitions) {
		dc.nUntracked++
	}
	return q
}

// parseDelta parses a subscribe's "delta" (nil: none).
func parseDelta(delta *string, group string) (bool, *protoError) {
	switch {
	case delta == nil:
		return false, nil
	case group != "":
		return false, perr(codeBadRequest, "delta applies to plain subscriptions only")
	case *delta == wire.DeltaFossil:
		return true, nil
	}
	return false, perr(codeBadRequest, `delta must be "fossil"`)
}
