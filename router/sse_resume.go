package router

// Resumable positions of Server-Sent Event streams.
//
// The id of a message event is "<stream>.<n>": the stream's key (random,
// chosen when the stream opens) and the number of the event within it,
// counting from 1 and growing by one per message event in the order they
// are written. Its size and the work of writing it do not depend on how
// many partitions the stream reads.
//
// The gateway keeps each stream's positions (per pattern, topic and
// partition: the last offset written, at most SSEOptions.MaxPositions of
// them) and, for its last sseUndoEvents message events, what each changed,
// so that it can tell the positions as they were after any of those
// events: a client's Last-Event-ID names the last event it received, which
// may be older than the last one written. A stream's state is kept while
// it is open and, once it ends, for SSEOptions.ResumeTTL within
// SSEOptions.ResumeBytes (oldest first out). A reconnect that names an
// event the gateway still knows resumes exactly after it (and its own ids
// keep counting from there); one naming a stream or event it no longer
// knows (expired, evicted, too far back, or another gateway process)
// resumes as a subscribe from another epoch does: from the earliest
// records, "recovered": false.
//
// The earlier self-contained ids (base64url of every position) are still
// accepted, within SSEOptions.MaxTokenBytes and MaxPositions and only for
// the requested patterns.
//
// Concurrency: sseState.mu guards a stream's state; it is taken by the
// queue's FramePrefix (under the session's queue lock, which may then take
// conn.mu) and by the transport's write, and by a reconnect copying the
// state; nothing is called with it held. sseResume.mu guards the index of
// states; a state's lock may be taken under it, never the other way round.

import (
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/session"
)

// SSEOptions bound what Server-Sent Event streams make the gateway hold for
// their resumption. The zero value of each field selects its default.
type SSEOptions struct {
	// MaxPositions bounds the positions (pattern, topic, partition) a
	// stream keeps for its resumption and that a Last-Event-ID of the
	// earlier self-contained form may name. Default 4096: a wildcard over
	// thousands of topics resumes exactly, while a stream holds at most
	// about 400 KiB of positions. Records of partitions past it are
	// delivered with ids as usual, and a resume replays those partitions
	// from their earliest records.
	MaxPositions int
	// MaxTokenBytes bounds a Last-Event-ID (header or last_event_id
	// parameter); a longer one is refused with 400. Default 64 KiB.
	MaxTokenBytes int
	// ResumeTTL is how long an ended stream's positions stay resumable.
	// Default 1 minute: an EventSource reconnects after a second.
	ResumeTTL time.Duration
	// ResumeBytes bounds the memory of the ended streams' positions kept
	// for resumption; past it the oldest are forgotten. Default 64 MiB.
	ResumeBytes int64
}

// Defaults for SSEOptions.
const (
	DefaultSSEMaxPositions  = 4096
	DefaultSSEMaxTokenBytes = 64 << 10
	DefaultSSEResumeTTL     = time.Minute
	DefaultSSEResumeBytes   = 64 << 20
)

func (o SSEOptions) withDefaults() SSEOptions {
	o.MaxPositions = positiveOr(o.MaxPositions, DefaultSSEMaxPositions)
	o.MaxTokenBytes = positiveOr(o.MaxTokenBytes, DefaultSSEMaxTokenBytes)
	o.ResumeTTL = positiveOr(o.ResumeTTL, DefaultSSEResumeTTL)
	o.ResumeBytes = positiveOr(o.ResumeBytes, DefaultSSEResumeBytes)
	return o
}

// sseUndoEvents is how many of its last message events a stream can resume
// after: about what a dropped connection's socket buffers hold of small
// events, at 16 bytes an event (256 KiB for a stream that wrote that many).
const sseUndoEvents = 1 << 14

// ssePosBytes is the memory one kept position costs beyond its topic's
// bytes (entry, map key and slot), for the ResumeBytes accounting.
const ssePosBytes = 96

// sseResume is the gateway's index of resumable stream states.
type sseResume struct {
	opts SSEOptions

	resumes   *prometheus.CounterVec // outcome: exact|unknown|refused
	untracked prometheus.Counter
	kept      prometheus.Gauge

	mu     sync.Mutex // guards following
	states map[string]*sseState
	ended  []*sseState // in the order they ended
	bytes  int64       // of ended
}

func newSSEResume(opts SSEOptions, reg prometheus.Registerer) *sseResume {
	const ns = "switchyard"
	r := &sseResume{
		opts: opts,
		resumes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "sse_resumes_total",
			Help: "Server-Sent Event streams opened with a Last-Event-ID, by outcome: exact (resumed after the named event), unknown (the gateway no longer knows it: resumed from the earliest records) or refused (400)."}, []string{"outcome"}),
		untracked: prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "sse_untracked_deliveries_total",
			Help: "Server-Sent Event deliveries of partitions past a stream's position bound (--sse-max-positions): a resume replays them from their earliest records."}),
		kept: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "sse_resume_bytes",
			Help: "Bytes of ended Server-Sent Event streams' positions kept for resumption (bound: --sse-resume-bytes)."}),
		states: make(map[string]*sseState),
	}
	for _, o := range []string{"exact", "unknown", "refused"} {
		r.resumes.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(r.resumes, r.untracked, r.kept)
		registerSSEOpen(r, reg) // sse_open.go
	}
	return r
}

// sseState is one stream's positions.
type sseState struct {
	key   string
	epoch string
	max   int

	mu       sync.Mutex // guards following
	patterns []string
	subPat   map[uint64]int32 // subscription ID → index in patterns
	slots    map[sseSlotKey]int32
	pos      []ssePos
	seq      uint64    // the last event's number
	base     uint64    // seq when the stream started (a resume's n)
	undo     []sseUndo // ring: the change of event n is at (n-base-1) % sseUndoEvents
	bytes    int64
	endedAt  time.Time
}

type sseSlotKey struct {
	pat       int32
	topic     string
	partition int
}

type ssePos struct {
	pat       int32
	topic     string
	partition int
	offset    int64 // -1: nothing written yet
}

// sseUndo is what event n changed: position slot had offset prev before.
type sseUndo struct {
	slot int32
	prev int64
}

func (r *sseResume) newState(key, epoch string, patterns []string) *sseState {
	st := &sseState{key: key, epoch: epoch, max: r.opts.MaxPositions, patterns: patterns,
		subPat: make(map[uint64]int32, len(patterns)), slots: make(map[sseSlotKey]int32)}
	r.mu.Lock()
	r.states[key] = st
	r.mu.Unlock()
	return st
}

// end keeps st for ResumeTTL within ResumeBytes.
func (r *sseResume) end(st *sseState, now time.Time) {
	st.mu.Lock()
	st.endedAt = now
	b := st.bytes + int64(cap(st.undo))*16
	st.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.bytes += b
	r.ended = append(r.ended, st)
	r.expire(now)
}

// expire forgets the ended states past their TTL or the byte bound.
// Caller holds r.mu.
func (r *sseResume) expire(now time.Time) {
	i := 0
	for ; i < len(r.ended); i++ {
		st := r.ended[i]
		if now.Sub(st.endedAt) < r.opts.ResumeTTL && r.bytes <= r.opts.ResumeBytes {
			break
		}
		st.mu.Lock()
		r.bytes -= st.bytes + int64(cap(st.undo))*16
		st.mu.Unlock()
		delete(r.states, st.key)
	}
	clear(r.ended[:i])
	r.ended = r.ended[i:]
	r.kept.Set(float64(r.bytes))
}

// lookup returns the state of key, if kept.
func (r *sseResume) lookup(key string, now time.Time) *sseState {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.expire(now)
	return r.states[key]
}

// prefix implements session.Options.FramePrefix: the line before a
// message frame names its position slot and offset, which write turns
// into the event's id.
func (st *sseState) prefix(cn *conn) func(dst []byte, it *session.Item) []byte {
	return func(dst []byte, it *session.Item) []byte {
		st.mu.Lock()
		slot := st.slot(cn, it.Stream)
		st.mu.Unlock()
		dst = append(dst, "\x00"...)
		dst = strconv.AppendInt(dst, int64(slot), 10)
		dst = append(dst, ' ')
		return strconv.AppendInt(dst, it.Offset, 10)
	}
}

// slot returns the position slot of s, adding it if there is room, or -1.
// Caller holds st.mu.
func (st *sseState) slot(cn *conn, s session.Stream) int32 {
	pat, ok := st.subPat[s.Sub]
	if !ok {
		pat = -1
		cn.mu.Lock()
		if sub := cn.byID[s.Sub]; sub != nil {
			for i, p := range st.patterns {
				if p == sub.pattern {
					pat = int32(i)
				}
			}
		}
		cn.mu.Unlock()
		st.subPat[s.Sub] = pat
	}
	if pat < 0 {
		return -1
	}
	k := sseSlotKey{pat, s.Topic, s.Partition}
	if i, ok := st.slots[k]; ok {
		return i
	}
	if len(st.pos) >= st.max {
		return -1
	}
	i := int32(len(st.pos))
	st.slots[k] = i
	st.pos = append(st.pos, ssePos{pat: pat, topic: s.Topic, partition: s.Partition, offset: -1})
	st.bytes += int64(ssePosBytes + len(s.Topic))
	return i
}

// advance records that the next event wrote offset on slot (-1: an
// untracked partition) and returns its number. Caller holds st.mu.
func (st *sseState) advance(slot int32, offset int64) uint64 {
	st.seq++
	u := sseUndo{slot: -1}
	if slot >= 0 && int(slot) < len(st.pos) {
		u = sseUndo{slot: slot, prev: st.pos[slot].offset}
		st.pos[slot].offset = offset
	}
	if len(st.undo) < sseUndoEvents {
		st.undo = append(st.undo, u)
	} else {
		st.undo[(st.seq-st.base-1)%sseUndoEvents] = u
	}
	return st.seq
}

// at returns the positions after event n, per pattern, and whether the
// state still knows them.
func (st *sseState) at(n uint64) (map[string][]ssePart, bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if n > st.seq || st.seq-n > uint64(len(st.undo)) {
		return nil, false
	}
	offs := make([]int64, len(st.pos))
	for i, p := range st.pos {
		offs[i] = p.offset
	}
	for e := st.seq; e > n; e-- {
		u := st.undo[(e-st.base-1)%sseUndoEvents]
		if u.slot >= 0 && int(u.slot) < len(offs) {
			offs[u.slot] = u.prev
		}
	}
	out := make(map[string][]ssePart)
	for i, p := range st.pos {
		if offs[i] < 0 {
			continue
		}
		pat := st.patterns[p.pat]
		out[pat] = append(out[pat], ssePart{p.topic, p.partition, offs[i]})
	}
	return out, true
}

// inherit makes st start from positions (per pattern) and event n: a
// resumed stream's ids keep counting, and its positions keep the
// partitions seen before the drop. Called before the stream starts.
func (st *sseState) inherit(positions map[string][]ssePart, n uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	st.seq, st.base = n, n
	for i, p := range st.patterns {
		for _, pt := range positions[p] {
			if len(st.pos) >= st.max {
				return
			}
			k := sseSlotKey{int32(i), pt.topic, pt.partition}
			if _, ok := st.slots[k]; ok {
				continue
			}
			st.slots[k] = int32(len(st.pos))
			st.pos = append(st.pos, ssePos{pat: int32(i), topic: pt.topic, partition: pt.partition, offset: pt.offset})
			st.bytes += int64(ssePosBytes + len(pt.topic))
		}
	}
}

// appendID appends the id of event n.
func (st *sseState) appendID(dst []byte, n uint64) []byte {
	dst = append(dst, st.key...)
	dst = append(dst, '.')
	return strconv.AppendUint(dst, n, 10)
}

// parseSSEID splits an id of the "<stream>.<n>" form; ok is false for
// anything else (such as an earlier self-contained token).
func parseSSEID(tok string) (key string, n uint64, ok bool) {
	for i := 0; i < len(tok); i++ {
		if tok[i] == '.' {
			n, err := strconv.ParseUint(tok[i+1:], 10, 64)
			if err != nil || i == 0 {
				return "", 0, false
			}
			return tok[:i], n, true
		}
	}
	return "", 0, false
}

// sseResumeFrom returns the subscribe "from" that resumes after parts in
// epoch: {"epoch": epoch, "positions": parts}, parsed.
func sseResumeFrom(epoch string, parts []ssePart) fromSpec {
	f := fromSpec{positions: true, epoch: epoch}
	for _, pt := range parts {
		f.pos = append(f.pos, engine.Position{Topic: pt.topic, Partition: pt.partition, Offset: pt.offset})
	}
	return f
}
