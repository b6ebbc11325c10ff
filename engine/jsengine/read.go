package jsengine

// Reading. Read and group catch-up use direct gets of the record stream
// (with Options.Replicas above 1, gets from the stream's leader instead:
// see replicas.go) filtered by the partition's subject (one round trip
// per record), after a binary search over stream sequences for the first
// wanted offset (offsets grow with sequences within a subject). The
// search is bounded above by the highest sequence known: the subject's
// last as just loaded (Read) or the highest this node saw of the subject
// or of the stream (catch-up), so it takes about log2 of the sequences in
// between (a dozen round trips over thousands of records, not 63 over all
// of uint64). Reading a long backlog is therefore slower than a
// consumer-based scan would be; it keeps Read stateless on the server.
//
// A load of a partition's state (Topics, Topic, Read) keeps the newest
// record it fetched in the partition's cache (partcache.go), and records
// Read fetches that end where the cache starts are put in front of it, so
// reading a partition's last records again costs no fetch; a search
// before the cache is bounded by the cache's first sequence.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

// Record headers. Payload bytes are the NATS message data.
const (
	hOff  = "Sy-Off"  // the record's offset (a marker's: the last offset used)
	hTime = "Sy-Time" // append time from the engine's clock, Unix nanoseconds
	hCum  = "Sy-Cum"  // retained-size bookkeeping: bytes appended to the partition so far
	hMeta = "Sy-Meta" // JSON {k, h, p}: key, headers, priority (absent when all empty)
	hMark = "Sy-Mark" // "1" on a trim marker, which holds a partition's next offset
)

type recMeta struct {
	K string            `json:"k,omitempty"`
	H map[string]string `json:"h,omitempty"`
	P uint8             `json:"p,omitempty"`
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
		if meta, ok := decodeMeta(m); ok { // metacodec.go
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
	ctx, cancel := roundTrip(ctx)
	m, err := e.rec.GetMsg(ctx, max(seq, 1), jetstream.WithGetMsgSubject(p.subject))
	cancel()
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
	rctx, cancel := roundTrip(ctx)
	last, err := e.rec.GetLastMsgForSubject(rctx, p.subject)
	cancel()
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
