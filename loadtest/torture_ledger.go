package main

// The torture run's books: every publish the gateway acknowledged, per
// (topic, generation, partition) in offset order, and what each subscriber
// saw of it. A topic's generation counts its deletions: the run deletes a
// topic only while no publish to it is in flight (tortureTopic.gate), and
// every payload names the generation it was published to, so records of a
// deleted topic and of its successor are never confused.
//
// The checks (invariants 1 and 2 of torture.go) read the books:
//
//   - on every delivery: a subscriber's offsets per (topic, generation,
//     partition) rise by one, or jump over a gap it was told about;
//     anything else is a duplicate, a reordering or a silent skip;
//   - every checkInterval: a reading subscriber has received (or been told
//     of a gap over) every record acknowledged more than --stall ago that
//     was published after it subscribed, unless the machine was overloaded
//     meanwhile (overloadWatch). A resumed subscription is first replayed
//     what it missed while away; the records published after it
//     resubscribed queue behind that replay, so their clock starts when
//     the replay is done (sview.caughtUp), and while it runs the bound is
//     on the replay's progress: no reading subscriber owed records goes
//     --stall without receiving one of a partition its replay still owes;
//   - at the end: every live subscriber has received every record its
//     pattern matches that was published after it first subscribed, in a
//     generation of the topic that was not deleted.

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// entry is one acknowledged record.
type entry struct {
	off         int64
	sent, acked int64 // unix nanoseconds
}

// partLog is the acknowledged records of one (topic, generation,
// partition), in offset order. It is safe for concurrent use.
type partLog struct {
	key     pkey
	mu      sync.Mutex // guards following
	entries []entry
	deleted int64 // unix nanoseconds of the generation's deletion; 0: live
}

type pkey struct {
	topic string
	gen   int64
	part  int
}

// add records an acknowledged record; a duplicate position (a msg_id
// repeat) is kept once.
func (l *partLog) add(e entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.entries)
	i := n
	for i > 0 && l.entries[i-1].off >= e.off { // mostly appends
		i--
	}
	if i < n && l.entries[i].off == e.off {
		return
	}
	l.entries = append(l.entries, entry{})
	copy(l.entries[i+1:], l.entries[i:n])
	l.entries[i] = e
}

// tortureTopic is one topic of the run.
type tortureTopic struct {
	name  string
	parts int
	// gate is held shared by every publish to the topic from its send to
	// its reply, and exclusively while the topic is deleted and created
	// again.
	gate sync.RWMutex
	gen  atomic.Int64
	// deletable: the run deletes and creates the topic again.
	deletable bool
}

// ledger is the books. It is safe for concurrent use.
type ledger struct {
	topics map[string]*tortureTopic // fixed before the load starts

	mu   sync.Mutex // guards following
	logs map[pkey]*partLog
	subs []*sview

	acked     atomic.Int64 // acknowledged publishes (repeats included)
	delivered atomic.Int64 // deliveries checked
	gapped    atomic.Int64 // records reported in gaps
	// unrecovered counts subscribes answered "recovered": false.
	unrecovered atomic.Int64
	excusedN    atomic.Int64 // records excused by sview.excused at the end
	v1          violations   // invariant 1
	v2          violations   // invariant 2
	over        *overloadWatch
	stall       time.Duration
	worstWait   atomic.Int64 // nanoseconds, over stall-checked records
	// worstCatchUp is the longest replay of a resumed subscription, from
	// its confirmation to the last record it had missed (nanoseconds).
	worstCatchUp atomic.Int64
}

func newLedger(topics []*tortureTopic, stall time.Duration, over *overloadWatch) *ledger {
	l := &ledger{topics: map[string]*tortureTopic{}, logs: map[pkey]*partLog{}, stall: stall, over: over}
	for _, t := range topics {
		l.topics[t.name] = t
	}
	return l
}

// log returns the partLog of k, creating it.
func (l *ledger) log(k pkey) *partLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	pl := l.logs[k]
	if pl == nil {
		pl = &partLog{key: k}
		l.logs[k] = pl
	}
	return pl
}

// published records an acknowledged publish.
func (l *ledger) published(topic string, gen int64, part int, off int64, sent time.Time) {
	l.acked.Add(1)
	l.log(pkey{topic, gen, part}).add(entry{off: off, sent: sent.UnixNano(), acked: time.Now().UnixNano()})
}

// deleted marks a generation of topic as deleted.
func (l *ledger) deleted(topic string, gen int64) {
	now := time.Now().UnixNano()
	l.mu.Lock()
	subs := append([]*sview(nil), l.subs...)
	l.mu.Unlock()
	// Not under l.mu: a delivery takes v.mu, then l.mu (isDeleted).
	for _, v := range subs {
		v.deletedWhile(topic, gen)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, pl := range l.logs {
		if k.topic == topic && k.gen == gen {
			pl.mu.Lock()
			pl.deleted = now
			pl.mu.Unlock()
		}
	}
}

// snapshot returns the partLogs whose topic pattern matches.
func (l *ledger) matching(pattern string) []*partLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []*partLog
	for k, pl := range l.logs {
		if patternMatches(pattern, k.topic) {
			out = append(out, pl)
		}
	}
	return out
}

// violations counts failures of one invariant and keeps the first few.
type violations struct {
	mu    sync.Mutex
	n     int64
	first []string
}

func (v *violations) add(format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.n++
	if len(v.first) < 5 {
		v.first = append(v.first, time.Now().UTC().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
	}
}

func (v *violations) count() int64 {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.n
}

func (v *violations) examples() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.first...)
}

// isDeleted reports whether the generation of k has been deleted.
func (l *ledger) isDeleted(k pkey) bool {
	l.mu.Lock()
	pl := l.logs[k]
	l.mu.Unlock()
	if pl == nil {
		return false
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.deleted != 0
}

// patternMatches reports whether a subscription pattern matches topic.
func patternMatches(pattern, topic string) bool {
	ps, ts := strings.Split(pattern, "."), strings.Split(topic, ".")
	for i, p := range ps {
		if p == "#" {
			return len(ts) > i
		}
		if i >= len(ts) || (p != "*" && p != ts[i]) {
			return false
		}
	}
	return len(ps) == len(ts)
}

// sview is what one subscriber (across its reconnections) has seen. It is
// safe for concurrent use.
type sview struct {
	name, pattern string
	l             *ledger

	mu sync.Mutex // guards following
	// reading: the subscriber reads at full speed, so the stall bound
	// applies to it.
	reading bool
	live    bool      // subscribed now
	since   time.Time // the current subscription's confirmation
	first   time.Time // the first confirmation; zero before it
	base    map[pkey]int64
	pos     map[pkey]*spos
	// prev holds what was received before a subscribe answered
	// "recovered": false (an SSE stream resumed on a gateway process that
	// no longer knows its id): the stream starts again from the earliest
	// records, so offsets start again below what was seen.
	prev    map[pkey][]spos
	replays int // the subscribes answered "recovered": false
	// blind holds, per topic deleted and created again, what the
	// subscriber had received of the deleted generation and on which
	// connection (see deletedWhile).
	blind   map[string]blindSpot
	curGen  map[string]int64 // the newest generation seen per topic
	stalled map[pkey]int64   // offsets already reported as stalled
	recent  map[tpart]*[historyLen]event
	loose   map[tpart][][2]int64 // gaps of a deleted topic that continue no generation seen
	guess   map[tpart]guessedGap // the last gap, when another generation could have had it
	conns   int                  // connections so far (the confirmations)
	// owe holds, while the current subscription's replay runs, per
	// partition the last offset acknowledged before it was confirmed that
	// the subscriber had not received then; caughtUp is when the last of
	// them arrived (zero while any is owed). lastRecv is the arrival of
	// the last frame of a partition still owed, the replay's progress: the
	// live records of a partition whose replay is done do not excuse
	// another partition whose replay froze.
	owe      map[pkey]int64
	caughtUp time.Time
	lastRecv time.Time
}

// spos is a subscriber's range of one (topic, generation, partition).
type spos struct{ first, hw int64 }

// guessedGap is a gap [from, to) given to generation gen of its topic
// while generation other also ended at from-1.
type guessedGap struct{ gen, other, from, to int64 }

func (l *ledger) newView(name, pattern string, reading bool) *sview {
	v := &sview{name: name, pattern: pattern, l: l, reading: reading, base: map[pkey]int64{},
		pos: map[pkey]*spos{}, prev: map[pkey][]spos{}, blind: map[string]blindSpot{}, curGen: map[string]int64{}, stalled: map[pkey]int64{},
		recent: map[tpart]*[historyLen]event{}, loose: map[tpart][][2]int64{},
		guess: map[tpart]guessedGap{}, owe: map[pkey]int64{}}
	l.mu.Lock()
	l.subs = append(l.subs, v)
	l.mu.Unlock()
	return v
}

// confirmed marks the subscription confirmed at now (sent before the reply
// is read: a publish sent after it must arrive). The first confirmation
// fixes what the subscriber is owed: records acknowledged after it.
func (v *sview) confirmed(at time.Time) {
	logs := v.l.matching(v.pattern)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.live, v.since = true, at
	v.conns++
	clear(v.owe)
	v.caughtUp = time.Time{}
	if v.first.IsZero() {
		v.first = at
		for _, pl := range logs {
			pl.mu.Lock()
			if n := len(pl.entries); n > 0 {
				v.base[pl.key] = pl.entries[n-1].off
			}
			pl.mu.Unlock()
		}
	}
	// What the replay owes: per partition, the newest record acknowledged
	// before the confirmation that the subscriber has not received.
	for _, pl := range logs {
		pl.mu.Lock()
		i := sort.Search(len(pl.entries), func(i int) bool { return pl.entries[i].sent > at.UnixNano() })
		if pl.deleted == 0 && i > 0 {
			if e := pl.entries[i-1]; v.owed(pl, e, false) {
				v.owe[pl.key] = e.off
			}
		}
		pl.mu.Unlock()
	}
	v.settleCatchUp(at)
}

// unrecovered notes a subscribe answered "recovered": false: the gateway
// replays from the earliest records, as it promises for a position it no
// longer knows. What was received is kept aside (prev) and the offsets
// are checked afresh from the replay's first record.
func (v *sview) unrecovered() {
	v.l.unrecovered.Add(1)
	v.mu.Lock()
	defer v.mu.Unlock()
	v.replays++
	for k, p := range v.pos {
		v.prev[k] = append(v.prev[k], *p)
		delete(v.pos, k)
	}
	clear(v.guess)
}

// blindSpot is what a subscriber had received of a topic's deleted
// generation gen-1 when it was deleted, on connection conn.
type blindSpot struct {
	gen  int64         // the generation created after the delete
	conn int           // the subscriber's connection at the delete
	hw   map[int]int64 // per partition, the last offset received
}

// deletedWhile notes that generation gen of topic was deleted (and
// gen+1 is being created). If v reconnects after this, its resume may
// carry positions of generation gen, which name no incarnation: the
// gateway then resumes generation gen+1 after them, and its records up
// to them are skipped without a word (by design: PROTOCOL.md's positions
// are per topic name). Those are excused (excused). A subscriber that
// stays connected through the delete is told topic_deleted and owes
// every record of the new generation from offset 0.
func (v *sview) deletedWhile(topic string, gen int64) {
	if !patternMatches(v.pattern, topic) {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	b := blindSpot{gen: gen + 1, conn: v.conns, hw: map[int]int64{}}
	for k, p := range v.pos {
		if k.topic == topic && k.gen == gen {
			b.hw[k.part] = p.hw
		}
	}
	if old, ok := v.blind[topic]; ok && old.gen == gen {
		// Deleted again before a resume: the positions of the older
		// generation may still be the ones the subscriber holds.
		for part, hw := range old.hw {
			b.hw[part] = max(b.hw[part], hw)
		}
		b.conn = old.conn
	}
	v.blind[topic] = b
}

// excused reports whether v need not receive offset off of k: k is the
// generation after a delete v was away for (it reconnected since), and
// off is at or below what v had received of the deleted one. v.mu is
// held.
func (v *sview) excused(k pkey, off int64) bool {
	b, ok := v.blind[k.topic]
	if !ok || b.gen != k.gen || v.conns <= b.conn {
		return false
	}
	hw, ok := b.hw[k.part]
	return ok && off <= hw
}

// excusedCount counts the records excused over every subscriber.
func (l *ledger) excusedCount() int64 { return l.excusedN.Load() }

// catchingUp reports whether v is still being replayed, after a
// "recovered": false, the records of k it had received before: the stall
// bound does not apply until the replay is past them. v.mu is held.
func (v *sview) catchingUp(k pkey) bool {
	prev := v.prev[k]
	if len(prev) == 0 {
		return false
	}
	top := int64(-1)
	for _, q := range prev {
		top = max(top, q.hw)
	}
	p := v.pos[k]
	return p == nil || p.hw < top
}

// lost marks the subscriber disconnected.
func (v *sview) lost() {
	v.mu.Lock()
	v.live = false
	v.mu.Unlock()
}

// setReading says whether the stall bound applies.
func (v *sview) setReading(r bool) {
	v.mu.Lock()
	v.reading = r
	v.mu.Unlock()
}

// message checks one delivery; appended is the record's append time (zero:
// unknown).
func (v *sview) message(topic string, gen int64, part int, off int64, appended time.Time) {
	v.messageAt(topic, gen, part, off, appended, time.Now())
}

// messageAt is message received at now.
func (v *sview) messageAt(topic string, gen int64, part int, off int64, appended, now time.Time) {
	v.l.delivered.Add(1)
	k := pkey{topic, gen, part}
	v.mu.Lock()
	defer v.mu.Unlock()
	defer func() { // the replay's progress, under v.mu
		if v.replaying(topic, part) {
			v.lastRecv = now
			v.settleCatchUp(now)
		}
	}()
	v.note(topic, part, event{kind: 'm', conn: v.conns, gen: gen, a: off})
	if v.live && v.reading && appended.After(v.since) && !v.catchingUp(k) {
		// A record appended while the subscription was live reaches a
		// reading subscriber within the stall bound.
		wait := now.Sub(v.clockStart(appended))
		if !v.l.over.during(appended.UnixNano(), now.UnixNano()) {
			if int64(wait) > v.l.worstWait.Load() {
				v.l.worstWait.Store(int64(wait))
			}
			if wait > v.l.stall {
				v.l.v2.add("%s (%s): %s/%d offset %d received %v after it was appended",
					v.name, v.pattern, topic, part, off, wait.Round(time.Millisecond))
			}
		}
	}
	if gen > v.curGen[topic] {
		v.curGen[topic] = gen
	}
	v.checkGuess(topic, part, gen, off)
	p := v.pos[k]
	switch {
	case p == nil:
		v.pos[k] = &spos{first: off, hw: off}
	case off <= p.hw:
		v.l.v1.add("%s (%s): %s/%d gen %d: offset %d after %d (duplicate or out of order); %s", v.name, v.pattern, topic, part, gen, off, p.hw, v.history(topic, part))
	case off > p.hw+1:
		// Records of a generation deleted since need not arrive.
		if !v.coveredLoose(topic, part, p.hw+1, off) && !v.l.isDeleted(k) {
			v.l.v1.add("%s (%s): %s/%d gen %d: offsets %d-%d skipped without a gap; %s", v.name, v.pattern, topic, part, gen, p.hw+1, off-1, v.history(topic, part))
		}
		p.hw = off
	default:
		p.hw = off
	}
}

// gap records a gap [from, to) of topic's newest generation seen.
func (v *sview) gap(topic string, part int, from, to int64) {
	if to <= from {
		return
	}
	v.l.gapped.Add(to - from)
	v.mu.Lock()
	defer v.mu.Unlock()
	defer func() { // the replay's progress, under v.mu
		now := time.Now()
		if v.replaying(topic, part) {
			v.lastRecv = now
		}
		v.settleCatchUp(now)
	}()
	// A gap names no generation: it belongs to the generation whose
	// offsets it continues. A topic never deleted has one generation; for
	// one that was deleted and created again, a gap that continues none is
	// kept aside and may account for a jump of any generation
	// (coveredLoose). Older generations may end where the current one is;
	// the gap goes to the newest generation it continues. That is never a
	// false accusation: an older one was deleted (and marked so in the
	// books) before a newer one had a record, so its jumps are excused.
	// A message of that generation at from, next, shows the gap was the
	// other's (checkGuess).
	tp := tpart{topic, part}
	delete(v.guess, tp)
	gen, found, other := int64(0), false, int64(-1)
	for k, p := range v.pos {
		if k.topic == topic && k.part == part && p.hw+1 == from {
			switch {
			case !found:
				gen, found = k.gen, true
			case k.gen > gen:
				gen, other = k.gen, max(other, gen)
			default:
				other = max(other, k.gen)
			}
		}
	}
	if other >= 0 {
		v.guess[tp] = guessedGap{gen: gen, other: other, from: from, to: to}
	}
	if !found && v.l.topics[topic].deletable {
		v.note(topic, part, event{kind: 'g', conn: v.conns, gen: -1, a: from, b: to})
		v.loose[tp] = append(v.loose[tp], [2]int64{from, to})
		return
	}
	v.note(topic, part, event{kind: 'g', conn: v.conns, gen: gen, a: from, b: to})
	k := pkey{topic, gen, part}
	p := v.pos[k]
	switch {
	case p == nil:
		v.pos[k] = &spos{first: from, hw: to - 1}
	case from > p.hw+1 && !v.l.isDeleted(k):
		v.l.v1.add("%s (%s): %s/%d gen %d: offsets %d-%d skipped before gap %d-%d; %s", v.name, v.pattern, topic, part, gen, p.hw+1, from-1, from, to-1, v.history(topic, part))
		p.hw = to - 1
	case from > p.hw+1:
		p.hw = to - 1
	case to-1 > p.hw:
		p.hw = to - 1
	}
}

// checkGuess moves the gap guessed for (topic, part) to the other
// generation when the guessed one's next message, gen's off, is the gap's
// first offset: the gateway writes a gap before the next message of its
// partition after the drop, so the gap was not the guessed generation's.
// v.mu is held.
func (v *sview) checkGuess(topic string, part int, gen, off int64) {
	tp := tpart{topic, part}
	g, ok := v.guess[tp]
	if !ok {
		return
	}
	delete(v.guess, tp)
	p, o := v.pos[pkey{topic, g.gen, part}], v.pos[pkey{topic, g.other, part}]
	if gen != g.gen || off != g.from || p == nil || p.hw != g.to-1 || o == nil || o.hw != g.from-1 {
		return
	}
	p.hw, o.hw = g.from-1, g.to-1
	if h := v.recent[tp]; h != nil {
		for i := len(h) - 1; i >= 0; i-- {
			if e := &h[i]; e.kind == 'g' && e.a == g.from && e.b == g.to {
				e.gen = g.other
				break
			}
		}
	}
}

// owed reports whether e of pl is owed to v and not yet received. For
// stall checks only records published after the current subscription
// count.
func (v *sview) owed(pl *partLog, e entry, stall bool) bool {
	if v.first.IsZero() || e.sent <= v.first.UnixNano() {
		return false
	}
	if b, ok := v.base[pl.key]; ok && e.off <= b {
		return false
	}
	if stall && e.sent <= v.since.UnixNano() {
		return false
	}
	if v.excused(pl.key, e.off) {
		return false
	}
	for _, q := range v.prev[pl.key] {
		if q.first <= e.off && e.off <= q.hw {
			return false
		}
	}
	p := v.pos[pl.key]
	return p == nil || e.off < p.first || e.off > p.hw
}

// missing counts the records owed to v that it has not received, in live
// generations; with report it reports them as violations.
func (v *sview) missing(report bool) int64 {
	logs := v.l.matching(v.pattern)
	v.mu.Lock()
	defer v.mu.Unlock()
	var n int64
	for _, pl := range logs {
		pl.mu.Lock()
		if pl.deleted == 0 {
			var m int64
			var firstOff int64 = -1
			for _, e := range pl.entries {
				if report && v.excused(pl.key, e.off) && e.sent > v.first.UnixNano() {
					if p := v.pos[pl.key]; p == nil || e.off < p.first || e.off > p.hw {
						v.l.excusedN.Add(1)
					}
				}
				if v.owed(pl, e, false) && !v.coveredLoose(pl.key.topic, pl.key.part, e.off, e.off+1) {
					if m == 0 {
						firstOff = e.off
					}
					m++
				}
			}
			if m > 0 && report {
				got := "none of its records"
				if p := v.pos[pl.key]; p != nil {
					got = fmt.Sprintf("offsets %d-%d", p.first, p.hw)
				}
				v.l.v1.add("%s (%s): %d acknowledged records of %s/%d gen %d never arrived (first: offset %d; received %s; on connection %d; %s)",
					v.name, v.pattern, m, pl.key.topic, pl.key.part, pl.key.gen, firstOff, got, v.conns, v.history(pl.key.topic, pl.key.part))
			}
			n += m
		}
		pl.mu.Unlock()
	}
	return n
}

// historyLen is how many frames of one (topic, partition) a subscriber
// remembers, to show with a violation.
const historyLen = 40

type tpart struct {
	topic string
	part  int
}

// event is a frame a subscriber received: a message (gen, offset a) or a
// gap [a, b) (of generation gen as attributed, -1: kept aside), on its
// conn-th connection.
type event struct {
	kind      byte
	conn      int
	gen, a, b int64
}

// note remembers e of (topic, part); v.mu is held.
func (v *sview) note(topic string, part int, e event) {
	k := tpart{topic, part}
	h := v.recent[k]
	if h == nil {
		h = new([historyLen]event)
		v.recent[k] = h
	}
	copy(h[:], h[1:])
	h[historyLen-1] = e
}

// history describes the frames of (topic, part) v received last, oldest
// first; v.mu is held.
func (v *sview) history(topic string, part int) string {
	h := v.recent[tpart{topic, part}]
	if h == nil {
		return "no frames before"
	}
	var sb strings.Builder
	sb.WriteString("frames before (connection: frame):")
	for _, e := range h {
		switch e.kind {
		case 'm':
			fmt.Fprintf(&sb, " %d:g%d/%d", e.conn, e.gen, e.a)
		case 'g':
			fmt.Fprintf(&sb, " %d:gap%d-%d", e.conn, e.a, e.b-1)
			if e.gen >= 0 {
				fmt.Fprintf(&sb, "(g%d)", e.gen)
			}
		case 'd':
			fmt.Fprintf(&sb, " %d:deleted", e.conn)
		}
	}
	return sb.String()
}

// topicDeleted notes a topic_deleted frame.
func (v *sview) topicDeleted(topic string) {
	v.mu.Lock()
	defer v.mu.Unlock()
	for k := range v.recent {
		if k.topic == topic {
			v.note(topic, k.part, event{kind: 'd', conn: v.conns})
		}
	}
}

// coveredLoose reports whether gaps kept aside (see gap) cover [from, to)
// of (topic, part); v.mu is held.
func (v *sview) coveredLoose(topic string, part int, from, to int64) bool {
	for from < to {
		next := from
		for _, g := range v.loose[tpart{topic, part}] {
			if g[0] <= from && from < g[1] {
				next = g[1]
				break
			}
		}
		if next == from {
			return false
		}
		from = next
	}
	return true
}
