package jsengine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/groupstate"
	"github.com/switchyard/switchyard/trie"
)

// groupDef is a group's fixed definition in the group bucket.
type groupDef struct {
	Pattern string            `json:"pattern"`
	Filter  map[string]string `json:"filter,omitempty"`
	From    engine.Start      `json:"from"`
	// MaxInFlight is the group's window per partition; 0 in definitions
	// stored before it existed: the policy's default.
	MaxInFlight int `json:"max_in_flight,omitempty"`
}

// commitVal is a group's position on one partition in the group bucket.
// Holder is the node delivering the partition ("" when none); By is the
// node that wrote the value. Leases are the delivery attempts started on
// the records not yet done, written before each attempt reaches a member,
// so a node that takes the partition over continues their counts. Redo
// lists the redriven records below Off still to be delivered again (the
// holder's), Asked the redrives asked for by any node and not yet taken
// up by a holder (see redrive.go).
type commitVal struct {
	Off     int64   `json:"off"`
	Skipped int64   `json:"skipped,omitempty"`
	Holder  string  `json:"holder,omitempty"`
	By      string  `json:"by,omitempty"`
	Leases  []lease `json:"leases,omitempty"`
	Redo    []int64 `json:"redo,omitempty"`
	Asked   []ask   `json:"asked,omitempty"`
}

// lease is one record's delivery attempts started so far.
type lease struct {
	Off      int64 `json:"o"`
	Attempts int   `json:"a"`
}

func (v commitVal) marshal() []byte {
	b, _ := json.Marshal(v)
	return b
}

func (v commitVal) equal(w commitVal) bool {
	return v.Off == w.Off && v.Skipped == w.Skipped && v.Holder == w.Holder && v.By == w.By && slices.Equal(v.Leases, w.Leases) &&
		slices.Equal(v.Redo, w.Redo) && slices.Equal(v.Asked, w.Asked)
}

// attempts returns the attempts the value records for offset off.
func (v commitVal) attempts(off int64) int {
	for _, l := range v.Leases {
		if l.Off == off {
			return l.Attempts
		}
	}
	return 0
}

func defKey(g string) string       { return "d." + enc(g) }
func memberKey(g, m string) string { return "m." + enc(g) + "." + enc(m) }
func commitKey(g string, t *topic, p int) string {
	return fmt.Sprintf("c.%s.%s.%d.%d", enc(g), enc(t.name), t.inc, p)
}

// group is a consumer group as this node sees it. Every field, and
// everything reachable from it, is guarded by Engine.gmu.
type group struct {
	name  string
	def   groupDef
	local map[string]*groupstate.Member // members connected to this node
	parts map[partKey]*gpart
	order []*gpart // parts sorted by (topic, partition); rebuilt by rebalance

	idle    engine.Timer // idle expiry, armed while no node has a member
	idleGen uint64       // bumped whenever idle is disarmed
}

func (g *group) matches(topic string) bool { return trie.Matches(g.def.Pattern, topic) }

type partKey struct {
	topic     string
	partition int
}

// gpart is a group's cursor on one partition. Every node has one for each
// partition a group reads; only the node holding it (holding) delivers.
type gpart struct {
	g       *group
	t       *topic
	p       *partition
	key     string
	start   engine.Start       // where a cursor with no stored position starts
	owner   string             // assigned member ID, "" when the group has none
	member  *groupstate.Member // the owner when it is on this node
	removed bool
	pumped  bool // listed in p.pumped
	// parked: parkAfter tail records in a row found the cursor, held here,
	// unable to take one (its window or its member's full, or draining),
	// so records no longer pump it; the ack, nack, timeout, claim or
	// rebalance that gives it room takes it back (pump). room is what the
	// last pump found; useless counts those records.
	parked  bool
	room    bool
	useless uint8
	reading bool // listed in p.reading

	stored    commitVal // last value seen in the bucket
	storedRev uint64
	loaded    bool
	acquiring bool // a claim is queued for the committer

	holding  bool             // this node delivers the partition
	ahead    []*engine.Record // records fetched from NATS past the cache
	aheadEnd int64            // the offset after ahead's last record
	aheadSeq uint64           // the stream sequence after it
	fetching bool             // a fetchAhead is running
	lost     bool             // held since a claim from a holder that died
	handback []lease          // leases written with a release
	redrives                  // redriven records waiting to be delivered again

	groupstate.Window // this node's window while holding
}

// leases returns the attempts started on gp's records not yet done; with
// ahead, a Ready record counts the attempt it is about to get. Caller
// holds gmu.
func (gp *gpart) leases(ahead bool) []lease {
	var out []lease
	for f := range gp.All {
		a := f.Attempt
		if ahead && f.State == groupstate.Ready {
			a++
		}
		if f.State != groupstate.Done && a > 0 {
			out = append(out, lease{f.Rec.Offset, a})
		}
	}
	return out
}

// dropWindow forgets every flight, stopping its timers, and the records
// fetched for them.
func (gp *gpart) dropWindow() {
	gp.Drop()
	gp.ahead = nil
	gp.redrives.drop()
}

// position is where the group stands: this node's cursor while it holds
// the partition, else the bucket's.
func (gp *gpart) position() int64 {
	if gp.holding {
		return gp.Committed
	}
	if gp.loaded {
		return gp.stored.Off
	}
	e, _ := gp.p.view()
	return e
}

// ensureGroup returns the local group, creating it from def. Caller holds gmu.
func (e *Engine) ensureGroup(name string, def groupDef) *group {
	if g := e.groups[name]; g != nil {
		return g
	}
	g := &group{name: name, def: def, local: make(map[string]*groupstate.Member), parts: make(map[partKey]*gpart)}
	e.groups[name] = g
	e.tmu.RLock()
	ts := slices.Collect(maps.Values(e.topics))
	e.tmu.RUnlock()
	for _, t := range ts {
		if g.matches(t.name) {
			e.addTopicToGroup(g, t)
		}
	}
	e.rebalance(g)
	return g
}

// addTopicToGroup gives g a cursor on every partition of t. A cursor with
// no stored position starts at the earliest record (or by time for a time
// start): the node that creates a group stores positions for the topics
// that exist then, so later topics are read from their beginning.
func (e *Engine) addTopicToGroup(g *group, t *topic) {
	if t.deleted.Load() {
		return
	}
	start := engine.Start{Kind: engine.StartEarliest}
	if g.def.From.Kind == engine.StartTime {
		start = g.def.From
	}
	for _, p := range t.parts {
		key := partKey{t.name, p.index}
		if old := g.parts[key]; old != nil {
			if old.t == t {
				continue
			}
			e.removeTopicFromGroup(g, old.t)
		}
		gp := &gpart{g: g, t: t, p: p, key: commitKey(g.name, t, p.index), start: start}
		g.parts[key] = gp
		p.gparts = append(p.gparts, gp)
		e.track(gp)
		e.updateFloor(p)
	}
}

func (e *Engine) removeTopicFromGroup(g *group, t *topic) bool {
	removed := false
	for _, p := range t.parts {
		key := partKey{t.name, p.index}
		gp := g.parts[key]
		if gp == nil || gp.t != t {
			continue
		}
		gp.dropWindow()
		gp.removed = true
		gp.holding = false
		delete(g.parts, key)
		delete(e.dirty, gp)
		p.gparts = slices.DeleteFunc(p.gparts, func(x *gpart) bool { return x == gp })
		e.track(gp)
		e.updateFloor(p)
		removed = true
	}
	return removed
}

// track lists gp in its partition's pumped and reading cursors, or takes
// it off, as its state now says. Both lists are copied on write, so a
// loop over one stays valid while pump changes it. Caller holds gmu.
func (e *Engine) track(gp *gpart) {
	p := gp.p
	if want := !gp.removed && (gp.member != nil || gp.holding) && !gp.parked; want != gp.pumped {
		gp.pumped = want
		p.pumped = relist(p.pumped, gp, want)
		p.npumped.Store(int32(len(p.pumped)))
	}
	if want := !gp.removed && !e.idleGroup(gp.g); want != gp.reading {
		gp.reading = want
		p.reading = relist(p.reading, gp, want)
	}
}

// relist returns a copy of list with gp added (on) or removed.
func relist(list []*gpart, gp *gpart, on bool) []*gpart {
	if on {
		return append(slices.Clip(list), gp)
	}
	return slices.DeleteFunc(slices.Clone(list), func(x *gpart) bool { return x == gp })
}

// updateFloor publishes the lowest position of p's groups with a member
// (a group with none holds nothing back) to the block policy, waking
// blocked appenders when there may be room. Caller holds gmu.
func (e *Engine) updateFloor(p *partition) {
	floor := int64(math.MaxInt64)
	readers := len(p.reading)
	for _, gp := range p.reading {
		floor = min(floor, gp.position())
	}
	p.smu.Lock()
	wake := readers < p.readers || floor > p.floor
	p.readers, p.floor = readers, floor
	if wake && p.waiters > 0 {
		close(p.space)
		p.space = make(chan struct{})
	}
	p.smu.Unlock()
}

// rebalance assigns g's partitions, sorted by (topic, partition),
// round-robin over the registered members sorted by ID: every node computes
// the same assignment from the same registry, and delivers only what falls
// to its own members. Caller holds gmu.
func (e *Engine) rebalance(g *group) {
	g.order = slices.AppendSeq(g.order[:0], maps.Values(g.parts))
	slices.SortFunc(g.order, func(a, b *gpart) int {
		return cmp.Or(strings.Compare(a.t.name, b.t.name), cmp.Compare(a.p.index, b.p.index))
	})
	ids := slices.Sorted(maps.Keys(e.reg[g.name]))
	for i, gp := range g.order {
		gp.owner, gp.member = "", nil
		if len(ids) > 0 {
			gp.owner = ids[i%len(ids)]
			gp.member = g.local[gp.owner]
		}
	}
	for _, gp := range g.order {
		e.track(gp)
		e.updateFloor(gp.p)
		e.pump(gp)
	}
	e.armIdle(g)
}

func (e *Engine) markDirty(gp *gpart) {
	e.dirty[gp] = struct{}{}
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// fetchBatch is how many records a group cursor fetches from NATS at once
// when it reads past the tail's cache.
const fetchBatch = 64

// recordAt returns the record at off for gp from the tail's cache or the
// records fetched ahead; nil while they are being fetched from NATS, which
// happens without gmu (see fetchAhead). Caller holds gmu.
func (e *Engine) recordAt(gp *gpart, off int64) *engine.Record {
	// One look under the partition's lock: the tail may announce the
	// record at any moment, and a record neither cached nor coming (seen
	// in two looks, on either side of that moment) would be fetched.
	r, coming := gp.p.cachedOrComing(off)
	if r != nil {
		return r
	}
	if n := len(gp.ahead); n > 0 && off >= gp.ahead[0].Offset && off < gp.ahead[0].Offset+int64(n) {
		return gp.ahead[off-gp.ahead[0].Offset]
	}
	if coming {
		// Appended (by this node: the offset is known) and not yet
		// announced: the tail brings it and pumps gp, without a fetch.
		return nil
	}
	if !gp.fetching && e.reachable() == nil {
		e.fetchAhead(gp, off)
	}
	return nil // the fetch pumps gp when done; the tail once NATS is back
}

// fetchAhead reads up to fetchBatch records of gp's partition from off in
// a goroutine of its own, holding no lock across the round trips, so a
// slow NATS delays only this cursor; then it pumps gp. The search for off
// is bounded by the highest sequence known, and skipped when off follows
// the previous fetch. Caller holds gmu.
func (e *Engine) fetchAhead(gp *gpart, off int64) {
	if !e.life.Enter() {
		return
	}
	gp.fetching = true
	e.groupFetches.Add(1)
	var hint uint64
	if gp.aheadEnd == off {
		hint = gp.aheadSeq
	}
	p := gp.p
	go func() { // exits after one fetch, bounded by its 5 s timeout
		defer e.life.Exit()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ctx, done := e.onConn(ctx)
		recs, next, err := e.fetch(ctx, p, off, fetchBatch, e.lastSeen(p), hint)
		done(nil)
		cancel()
		e.gmu.Lock()
		defer e.gmu.Unlock()
		gp.fetching = false
		switch {
		case err != nil:
			e.log.Debug("jsengine: group fetch", "subject", p.subject, "err", err)
			e.afterReal(200*time.Millisecond, func() {
				e.gmu.Lock()
				defer e.gmu.Unlock()
				e.pump(gp)
			})
			return
		case len(recs) == 0:
			return
		case recs[0].Offset != off: // trimmed by retention (perhaps on another node)
			p.smu.Lock()
			p.earliest = max(p.earliest, recs[0].Offset)
			p.smu.Unlock()
		default:
			gp.ahead, gp.aheadEnd, gp.aheadSeq = recs, off+int64(len(recs)), next
		}
		e.pump(gp)
	}()
}

// pump brings gp up to date: a node whose member owns the partition claims
// it; the holder fast-forwards past trimmed records (telling the member),
// delivers up to MaxInFlight outstanding, advances the committed offset and
// releases the partition once it no longer owns it and nothing is in
// flight. Caller holds gmu.
func (e *Engine) pump(gp *gpart) {
	defer e.track(gp) // holding, the member or parked may have changed
	gp.room = false
	if gp.removed || e.closed.Load() {
		return
	}
	if !gp.holding {
		gp.parked = false // records retry the claim
		if gp.member != nil && !gp.acquiring {
			gp.acquiring = true
			e.markDirty(gp)
		}
		return
	}
	g := gp.g
	before := gp.Committed
	earliest, next := gp.p.view()
	skipFrom, skipTo := gp.SkipTo(earliest)
	if skipTo > skipFrom && len(gp.Flights) == 0 {
		gp.ahead = nil // the whole window was dropped: so are its fetched records
	}
	e.resolveRedo(gp)
	m := gp.member
	outstanding, inFlight, draining := gp.Load(m)
	if m != nil && !draining {
		n := len(gp.Flights)
		outstanding = gp.Fill(outstanding, e.window(g.def), next, g.def.Filter,
			func(off int64) *engine.Record { return e.recordAt(gp, off) })
		for _, f := range gp.Flights[n:] {
			e.resumeAttempts(gp, f)
		}
	}
	if skipTo > skipFrom && m != nil {
		m.Consumer.Skipped(g.name, gp.t.name, gp.p.index, skipFrom, skipTo)
	}
	if m != nil && !draining {
		// Each attempt is written to the bucket before it reaches the
		// member: the committer writes it, then pumps again.
		unwritten := false
		for f := range gp.All {
			if f.State != groupstate.Ready {
				continue
			}
			if gp.stored.attempts(f.Rec.Offset) <= f.Attempt {
				unwritten = true
				continue
			}
			if !m.Room() {
				m.Starved = true // as DeliverReady: pumped again once m settles one
				break
			}
			e.flights.Deliver(gp, f, m)
		}
		if unwritten {
			e.markDirty(gp)
		}
	}
	redo := len(gp.Redo)
	gp.Advance()
	if gp.Committed != before {
		e.updateFloor(gp.p)
		e.markDirty(gp)
	} else if len(gp.Redo) != redo {
		e.markDirty(gp) // a redelivery settled: off the bucket's Redo
	}
	if trimmed, _ := gp.p.view(); gp.Committed < trimmed {
		defer e.pump(gp) // recordAt found records trimmed meanwhile
	}
	if gp.room = m != nil && !draining && outstanding < e.window(g.def) && m.Room(); gp.room {
		gp.useless, gp.parked = 0, false
	}
	if m != nil && m.Settled() {
		e.pumpMember(g, m, gp)
	}
	if m == nil && inFlight == 0 {
		// Owned elsewhere (or by nobody): hand the partition back.
		gp.handback = gp.leases(false)
		gp.handbackRedo = gp.redoOffsets()
		gp.dropWindow()
		gp.holding = false
		e.markDirty(gp)
		e.updateFloor(gp.p)
	}
}

// parkAfter is how many tail records in a row must find a cursor unable to
// take one before records stop pumping it. A member that keeps up takes
// each record, so it is never parked; one whose window stays full (it acks
// slower than records arrive, or not at all, like an abandoned pull
// member) costs a record nothing once parked: its acks, nacks and timeouts
// pump it as before. A parked cursor whose leased records retention trims
// learns of the gap at its next ack or timeout.
const parkAfter = 8

// pumpAppended pumps gp for a tail record and parks it once parkAfter
// records in a row found it, held by this node, unable to take one (a
// cursor waiting for its claim is never parked: records retry the claim).
// Caller holds gmu.
func (e *Engine) pumpAppended(gp *gpart) {
	e.pump(gp)
	if gp.room || !gp.holding {
		gp.useless = 0
		return
	}
	if gp.useless < parkAfter {
		gp.useless++
	}
	if gp.useless >= parkAfter && !gp.parked {
		gp.parked = true
		e.track(gp)
	}
}

// resumeAttempts gives a new flight the attempts the bucket records for
// it: delivered by another node, they continue from there. When that node
// died holding it and its attempts are used up, it goes to the dead
// letters (its last lease ended unsettled, as by an ack timeout); after a
// release, a graceful hand-back, it is delivered again. Caller holds gmu.
func (e *Engine) resumeAttempts(gp *gpart, f *groupstate.Flight) {
	if f.State != groupstate.Ready || f.Attempt != 0 {
		return
	}
	if f.Attempt = gp.stored.attempts(f.Rec.Offset); gp.lost && f.Attempt >= e.policy.MaxAttempts {
		e.flights.Fail(gp, f, "holder lost", false)
	}
}

// newMachine returns the group state machine wired to e. Timer callbacks
// take gmu and do nothing once gp is removed or e is closed.
func (e *Engine) newMachine() groupstate.Machine[*gpart] {
	return groupstate.Machine[*gpart]{
		Policy:     e.policy,
		Clock:      e.clock,
		NewID:      e.newID,
		Group:      func(gp *gpart) string { return gp.g.name },
		Mu:         &e.gmu,
		AfterFunc:  e.afterFunc,
		Active:     func(gp *gpart) bool { return !gp.removed && !e.closed.Load() },
		Pump:       e.pump,
		DeadLetter: e.deadLetter,
	}
}

// deadLetter queues a record that ran out of attempts for the letter
// writer, which stores it without gmu and then settles the flight; while
// NATS is unreachable it refuses at once and the group machine tries again
// after the backoff. Until the letter is stored the record stays owed.
// Caller holds gmu.
func (e *Engine) deadLetter(dl *engine.DeadLetter, settle func(error)) error {
	if err := e.reachable(); err != nil {
		return err
	}
	e.lmu.Lock()
	e.letterQ = append(e.letterQ, letterJob{dl, settle})
	e.lmu.Unlock()
	select {
	case e.letterKick <- struct{}{}:
	default:
	}
	return groupstate.ErrPending
}

// applyStored takes in a position written to the bucket. A value another
// node wrote while this node holds the partition is either a Seek (holder
// still this node: adopt the offset) or a takeover (drop the window).
// Caller holds gmu.
func (e *Engine) applyStored(gp *gpart, v commitVal, rev uint64) {
	if rev <= gp.storedRev {
		return
	}
	gp.stored, gp.storedRev, gp.loaded = v, rev, true
	if v.By != e.node && gp.holding && v.Holder == e.node && len(v.Asked) > 0 {
		// A redrive asked for by another node: take it up, keep the window.
		e.takeAsks(gp, v.Asked)
	} else if v.By != e.node && gp.holding {
		gp.dropWindow()
		if v.Holder == e.node {
			gp.Committed, gp.Next, gp.Skipped = v.Off, v.Off, v.Skipped
		} else {
			gp.holding = false
		}
	}
	e.updateFloor(gp.p)
	e.pump(gp)
}

// committer writes positions, claims and releases to the group bucket, so
// that no bucket round trip happens under gmu. It exits when the engine
// closes.
func (e *Engine) committer() {
	defer e.wg.Done()
	for {
		select {
		case <-e.closeCh:
			return
		case <-e.kick:
		}
		e.gmu.Lock()
		gps := slices.Collect(maps.Keys(e.dirty))
		clear(e.dirty)
		e.gmu.Unlock()
		// Positions are separate keys: write up to syncParallel at once,
		// so a round of writes takes one round trip rather than one per
		// partition. A cursor is in a round at most once, and the next
		// round starts when this one is done.
		var wg sync.WaitGroup
		sem := make(chan struct{}, syncParallel)
		for _, gp := range gps {
			if e.closed.Load() {
				break
			}
			sem <- struct{}{}
			wg.Add(1)
			go func() { // one position write (with its retries), bounded by 5 s
				defer wg.Done()
				defer func() { <-sem }()
				e.sync(gp)
			}()
		}
		wg.Wait()
		if e.closed.Load() {
			return
		}
	}
}

// syncParallel bounds the position writes the committer has in flight.
const syncParallel = 16

// sync writes gp's wanted state with a compare-and-set on the last
// revision seen; a conflict reloads the value and tries again.
func (e *Engine) sync(gp *gpart) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 10 {
		e.gmu.Lock()
		if gp.removed {
			e.gmu.Unlock()
			return
		}
		var want commitVal
		rev, loaded := gp.storedRev, gp.loaded
		claim := false
		lost := false // claiming from a holder that died without releasing
		switch {
		case gp.holding:
			want = commitVal{Off: gp.Committed, Skipped: gp.Skipped, Holder: e.node, By: e.node, Leases: gp.leases(gp.member != nil), Redo: gp.redoOffsets()}
		case gp.acquiring:
			if gp.member == nil {
				gp.acquiring = false
				e.gmu.Unlock()
				return
			}
			if loaded && gp.stored.Holder != "" && gp.stored.Holder != e.node && e.nodes[gp.stored.Holder] {
				gp.acquiring = false // wait for the holder to release or die
				e.gmu.Unlock()
				return
			}
			claim = true
			lost = loaded && gp.stored.Holder != "" && gp.stored.Holder != e.node
			want = commitVal{Off: gp.stored.Off, Skipped: gp.stored.Skipped, Holder: e.node, By: e.node, Leases: gp.stored.Leases,
				Redo: gp.stored.redoWithAsked()}
		default:
			if !loaded || gp.stored.Holder != e.node {
				e.gmu.Unlock()
				return // nothing of ours to release
			}
			want = commitVal{Off: gp.Committed, Skipped: gp.Skipped, By: e.node, Leases: gp.handback,
				Redo: gp.handbackRedo, Asked: gp.untaken(gp.stored.Asked)}
		}
		if loaded && !claim && gp.stored.equal(want) {
			e.gmu.Unlock()
			return
		}
		start := gp.start
		e.gmu.Unlock()

		var newRev uint64
		var err error
		if !loaded {
			var ent jetstream.KeyValueEntry
			ent, err = e.groupKV.Get(ctx, gp.key)
			if err == nil {
				e.groupEntry(gp, ent)
				continue
			}
			if !errors.Is(err, jetstream.ErrKeyNotFound) {
				e.log.Warn("jsengine: load position", "key", gp.key, "err", err)
				e.retryLater(gp)
				return
			}
			if !claim {
				continue
			}
			var off int64
			if off, err = e.resolve(ctx, gp.p, start); err != nil {
				e.retryLater(gp)
				return
			}
			want.Off = off
			newRev, err = e.groupKV.Create(ctx, gp.key, want.marshal())
		} else {
			newRev, err = e.groupKV.Update(ctx, gp.key, want.marshal(), rev)
		}
		if isWrongLast(err) {
			if ent, err := e.groupKV.Get(ctx, gp.key); err == nil {
				e.groupEntry(gp, ent)
			} else {
				e.gmu.Lock()
				gp.loaded, gp.storedRev = false, 0
				e.gmu.Unlock()
			}
			continue
		}
		if err != nil {
			e.log.Warn("jsengine: write position", "key", gp.key, "err", err)
			e.retryLater(gp)
			return
		}
		e.gmu.Lock()
		if newRev > gp.storedRev {
			gp.stored, gp.storedRev, gp.loaded = want, newRev, true
			if len(want.Asked) == 0 {
				gp.taken = nil // every redrive taken up is off the bucket now
			}
		}
		if !claim && gp.holding && !gp.removed {
			e.pump(gp) // attempts just written may be delivered now
		}
		if claim && !gp.removed {
			gp.acquiring = false
			if !gp.holding {
				gp.Committed, gp.Next, gp.Skipped = want.Off, want.Off, want.Skipped
				gp.Flights, gp.Redo, gp.ahead = nil, nil, nil
				gp.redrives.drop()
				gp.restore(want.Redo)
				gp.lost = lost
				if gp.member != nil {
					gp.holding = true
					e.updateFloor(gp.p)
				} else {
					e.markDirty(gp) // the owner moved on meanwhile: release
				}
			}
			e.pump(gp)
		}
		e.gmu.Unlock()
		return
	}
	e.retryLater(gp)
}

func (e *Engine) retryLater(gp *gpart) {
	e.afterReal(200*time.Millisecond, func() {
		e.gmu.Lock()
		if !gp.removed {
			e.markDirty(gp)
		}
		e.gmu.Unlock()
	})
}

// afterReal runs f after d of real time unless the engine closes first.
func (e *Engine) afterReal(d time.Duration, f func()) {
	if !e.life.Enter() {
		return
	}
	go func() { // exits after d or when the engine closes
		defer e.life.Exit()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
			f()
		case <-e.closeCh:
		}
	}()
}

func (e *Engine) groupEntry(gp *gpart, ent jetstream.KeyValueEntry) {
	var v commitVal
	if json.Unmarshal(ent.Value(), &v) != nil {
		return
	}
	e.gmu.Lock()
	e.applyStored(gp, v, ent.Revision())
	e.gmu.Unlock()
}

// groupEvent applies a change of the group bucket, from any node.
func (e *Engine) groupEvent(ent jetstream.KeyValueEntry, initial bool) {
	if f := e.beforeGroupEvent.Load(); f != nil {
		(*f)(ent.Key())
	}
	if ent.Operation() != jetstream.KeyValuePut {
		e.groupGone(ent.Key())
		return
	}
	parts := strings.Split(ent.Key(), ".")
	switch {
	case parts[0] == "d" && len(parts) == 2:
		var def groupDef
		if json.Unmarshal(ent.Value(), &def) != nil {
			return
		}
		e.gmu.Lock()
		e.ensureGroup(dec(parts[1]), def)
		e.gmu.Unlock()
	case parts[0] == "c" && len(parts) == 5:
		var v commitVal
		if json.Unmarshal(ent.Value(), &v) != nil {
			return
		}
		inc, _ := strconv.ParseUint(parts[3], 10, 64)
		p, _ := strconv.Atoi(parts[4])
		e.gmu.Lock()
		defer e.gmu.Unlock()
		g := e.groups[dec(parts[1])]
		if g == nil {
			return
		}
		gp := g.parts[partKey{dec(parts[2]), p}]
		if gp == nil || gp.t.inc != inc {
			return
		}
		e.applyStored(gp, v, ent.Revision())
	}
}

// liveEvent applies a change of the live bucket: nodes and members coming
// and going (by Close, Leave or an expired heartbeat).
func (e *Engine) liveEvent(ent jetstream.KeyValueEntry, initial bool) {
	var val []byte
	put := ent.Operation() == jetstream.KeyValuePut
	if put {
		val = ent.Value()
	}
	e.gmu.Lock()
	defer e.gmu.Unlock()
	e.liveChange(ent.Key(), put, val)
}

// reconcileLive lists the live bucket and treats keys that are gone as
// deleted: on servers without limit markers, expiry is silent.
func (e *Engine) reconcileLive(ctx context.Context) {
	lister, err := e.liveKV.ListKeys(ctx)
	if err != nil {
		return
	}
	present := make(map[string]bool)
	for k := range lister.Keys() {
		present[k] = true
	}
	e.gmu.Lock()
	defer e.gmu.Unlock()
	for node := range e.nodes {
		if k := "n." + node; node != e.node && !present[k] {
			e.liveChange(k, false, nil)
		}
	}
	for g, reg := range e.reg {
		for id := range reg {
			if k := memberKey(g, id); !present[k] {
				e.liveChange(k, false, nil)
			}
		}
	}
}

// liveChange applies a put or delete of a live bucket key. Caller holds gmu.
func (e *Engine) liveChange(key string, put bool, val []byte) {
	parts := strings.Split(key, ".")
	switch {
	case parts[0] == "n" && len(parts) == 2:
		node := parts[1]
		if put {
			e.nodes[node] = true
			return
		}
		if node == e.node {
			return
		}
		delete(e.nodes, node)
		// Partitions it held can be claimed now.
		for _, g := range e.groups {
			for _, gp := range g.order {
				if gp.loaded && gp.stored.Holder == node {
					e.pump(gp)
				}
			}
		}
	case parts[0] == "m" && len(parts) == 3:
		gname, id := dec(parts[1]), dec(parts[2])
		reg := e.reg[gname]
		if put {
			node := string(val)
			if g := e.groups[gname]; node == e.node && (g == nil || g.local[id] == nil) {
				return // a late echo of a member of ours that has left since
			}
			if reg == nil {
				reg = make(map[string]string)
				e.reg[gname] = reg
			}
			if reg[id] == node {
				return
			}
			reg[id] = node
		} else {
			if _, ok := reg[id]; !ok {
				return
			}
			if g := e.groups[gname]; g != nil && g.local[id] != nil {
				return // ours: expired during an outage; the heartbeat puts it back
			}
			delete(reg, id)
		}
		if g := e.groups[gname]; g != nil {
			e.rebalance(g)
		}
	}
}

func groupErr(name string) error {
	return fmt.Errorf("jsengine: group %q: %w", name, engine.ErrUnknownGroup)
}

// Join adds a member to a group, creating the group on first join (on any
// node) fixed to req's Pattern and Filter, registers the member for every
// node to see, and rebalances. Consumer callbacks are made with the group
// lock held: c must not call the engine from them.
func (e *Engine) Join(ctx context.Context, req engine.JoinRequest, c engine.Consumer) (_ string, err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	if e.closed.Load() {
		return "", closedErr()
	}
	if err := e.reachable(); err != nil {
		return "", err
	}
	switch {
	case req.Group == "":
		return "", fmt.Errorf("jsengine: empty group name: %w", engine.ErrInvalidConfig)
	case c == nil:
		return "", fmt.Errorf("jsengine: nil consumer: %w", engine.ErrInvalidConfig)
	}
	if err := trie.ValidatePattern(req.Pattern); err != nil {
		return "", fmt.Errorf("jsengine: %w: %w", engine.ErrInvalidConfig, err)
	}
	if err := checkJoin(req); err != nil {
		return "", err
	}
	def := groupDef{Pattern: req.Pattern, Filter: maps.Clone(req.Filter), From: req.From, MaxInFlight: cmp.Or(req.MaxInFlight, e.policy.MaxInFlight)}
	if len(def.Filter) == 0 {
		def.Filter = nil
	}
	created := false
	ent, err := e.groupKV.Get(ctx, defKey(req.Group))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		b, _ := json.Marshal(def)
		_, ent, err = createOrGet(ctx, e.groupKV, defKey(req.Group), b)
		created = err == nil && ent == nil
	}
	if err != nil {
		return "", unavailable("join", err)
	}
	if ent != nil { // defined before, here or on another node
		def = groupDef{}
		if err := json.Unmarshal(ent.Value(), &def); err != nil {
			return "", fmt.Errorf("jsengine: group %q: bad definition: %w", req.Group, err)
		}
	}
	if def.Pattern != req.Pattern || !maps.Equal(def.Filter, req.Filter) {
		return "", fmt.Errorf("jsengine: group %q is fixed to pattern %q and filter %v: %w",
			req.Group, def.Pattern, def.Filter, engine.ErrGroupConflict)
	}
	if err := e.checkWindow(req, def); err != nil {
		return "", err
	}
	if created {
		// Positions for the topics that exist now start where the join asked.
		e.tmu.RLock()
		ts := slices.Collect(maps.Values(e.topics))
		e.tmu.RUnlock()
		for _, t := range ts {
			if !trie.Matches(def.Pattern, t.name) {
				continue
			}
			for _, p := range t.parts {
				off, err := e.resolve(ctx, p, def.From)
				if err != nil {
					return "", err
				}
				_, err = e.groupKV.Create(ctx, commitKey(req.Group, t, p.index), commitVal{Off: off, By: e.node}.marshal())
				if err != nil && !isWrongLast(err) {
					return "", unavailable("join", err)
				}
			}
		}
	}
	id := req.Member
	if id == "" {
		id = e.newID()
	}
	if strings.Contains(id, engine.AnyMember) {
		return "", fmt.Errorf("jsengine: member ID %q contains %q: %w", id, engine.AnyMember, engine.ErrInvalidConfig)
	}
	e.gmu.Lock()
	if e.closed.Load() {
		e.gmu.Unlock()
		return "", closedErr()
	}
	g := e.ensureGroup(req.Group, def)
	if node, ok := e.reg[g.name][id]; g.local[id] != nil || ok && node != e.node && e.nodes[node] {
		e.gmu.Unlock()
		return "", fmt.Errorf("jsengine: group %q already has member %q: %w", g.name, id, engine.ErrInvalidConfig)
	}
	g.local[id] = &groupstate.Member{ID: id, Consumer: c, Limit: req.MaxLeased, LimitBytes: req.MaxLeasedBytes}
	e.disarmIdle(g)
	if e.reg[g.name] == nil {
		e.reg[g.name] = make(map[string]string)
	}
	e.reg[g.name][id] = e.node
	e.rebalance(g)
	e.gmu.Unlock()
	if _, err := e.liveKV.Put(ctx, memberKey(g.name, id), []byte(e.node)); err != nil {
		e.log.Warn("jsengine: register member", "group", g.name, "member", id, "err", err)
	}
	return id, nil
}

// Leave removes a member of this node and rebalances. Records it held go
// back at once: redelivered without backoff to the partition's next member,
// or dead-lettered when that was their last attempt.
func (e *Engine) Leave(ctx context.Context, groupName, memberID string) (err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	e.gmu.Lock()
	g := e.groups[groupName]
	if g == nil {
		e.gmu.Unlock()
		return groupErr(groupName)
	}
	m := g.local[memberID]
	if m == nil {
		e.gmu.Unlock()
		return fmt.Errorf("jsengine: group %q member %q (on this node): %w", groupName, memberID, engine.ErrUnknownMember)
	}
	delete(g.local, memberID)
	delete(e.reg[groupName], memberID)
	for _, gp := range g.order {
		e.flights.Release(gp, &gp.Window, m)
	}
	e.rebalance(g)
	e.gmu.Unlock()
	if err := e.liveKV.Delete(ctx, memberKey(groupName, memberID)); err != nil {
		return unavailable("leave", err)
	}
	return nil
}

func (e *Engine) inFlight(groupName, member string, pos engine.Position) (*gpart, *groupstate.Flight, error) {
	g := e.groups[groupName]
	if g == nil {
		return nil, nil, groupErr(groupName)
	}
	if gp := g.parts[partKey{pos.Topic, pos.Partition}]; gp != nil && gp.holding {
		if f := gp.InFlightAt(pos.Offset); f != nil && f.HeldBy(member) {
			return gp, f, nil
		}
	}
	return nil, nil, fmt.Errorf("jsengine: group %q %s/%d@%d: %w",
		groupName, pos.Topic, pos.Partition, pos.Offset, engine.ErrNotInFlight)
}

// Ack completes a delivery, on any node: the node holding the partition
// settles it (see remote.go); the committed offset moves past every
// contiguous completed record and is written to the group bucket in the
// background.
func (e *Engine) Ack(ctx context.Context, groupName, member string, pos engine.Position) error {
	return e.settle(ctx, false, groupName, member, pos, "")
}

// Nack fails a delivery, on any node: it is redelivered after the policy's
// backoff for this attempt, or dead-lettered with reason as its error
// after the last.
func (e *Engine) Nack(ctx context.Context, groupName, member string, pos engine.Position, reason string) error {
	return e.settle(ctx, true, groupName, member, pos, reason)
}

// Seek moves the group's position on one partition, or on every partition
// of the topic when partition < 0, dropping in-flight records. It works
// from any node: the position is written to the group bucket and the
// holding node adopts it.
func (e *Engine) Seek(ctx context.Context, groupName, topicName string, partition int, to engine.Start) (err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	if err := e.reachable(); err != nil {
		return err
	}
	e.gmu.Lock()
	g := e.groups[groupName]
	e.gmu.Unlock()
	if g == nil {
		return groupErr(groupName)
	}
	t, err := e.lookup(ctx, topicName)
	if err != nil {
		return err
	}
	if partition >= len(t.parts) {
		return fmt.Errorf("jsengine: topic %q partition %d: %w", topicName, partition, engine.ErrUnknownPartition)
	}
	var gps []*gpart
	e.gmu.Lock()
	for _, p := range t.parts {
		if partition >= 0 && p.index != partition {
			continue
		}
		gp := g.parts[partKey{t.name, p.index}]
		if gp == nil || gp.t != t {
			e.gmu.Unlock()
			return fmt.Errorf("jsengine: group %q (pattern %q) does not read topic %q: %w",
				g.name, g.def.Pattern, t.name, engine.ErrUnknownTopic)
		}
		gps = append(gps, gp)
	}
	e.gmu.Unlock()
	for _, gp := range gps {
		off, err := e.resolve(ctx, gp.p, to)
		if err != nil {
			return err
		}
		if err := e.seekOne(ctx, gp, off); err != nil {
			return err
		}
	}
	return nil
}

func (e *Engine) seekOne(ctx context.Context, gp *gpart, off int64) error {
	for range 10 {
		e.gmu.Lock()
		if gp.holding {
			gp.dropWindow()
			gp.Committed, gp.Next = off, off
			gp.stored.Leases = nil                     // attempts before a seek do not count
			gp.stored.Redo, gp.stored.Asked = nil, nil // nor redrives
			e.updateFloor(gp.p)
			e.markDirty(gp)
			e.pump(gp)
			e.gmu.Unlock()
			return nil
		}
		v, rev, loaded := gp.stored, gp.storedRev, gp.loaded
		e.gmu.Unlock()
		v.Off, v.By, v.Leases, v.Redo, v.Asked = off, e.node, nil, nil, nil
		var err error
		if loaded {
			_, err = e.groupKV.Update(ctx, gp.key, v.marshal(), rev)
		} else {
			_, err = e.groupKV.Create(ctx, gp.key, v.marshal())
		}
		if err == nil {
			return nil
		}
		if !isWrongLast(err) {
			return unavailable("seek", err)
		}
		if ent, err := e.groupKV.Get(ctx, gp.key); err == nil {
			e.groupEntry(gp, ent)
		}
	}
	return fmt.Errorf("jsengine: seek %s: too much contention: %w", gp.key, engine.ErrUnavailable)
}

// Groups returns every group, sorted by name.
func (e *Engine) Groups(ctx context.Context) ([]engine.GroupInfo, error) {
	e.gmu.Lock()
	names := slices.Sorted(maps.Keys(e.groups))
	e.gmu.Unlock()
	out := make([]engine.GroupInfo, 0, len(names))
	for _, n := range names {
		info, err := e.Group(ctx, n)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// Group describes one group: members (of every node) sorted by ID with
// their partitions, and per partition the member, committed offset, lag,
// records leased by this node (InFlight; other nodes' leases are not
// counted) and records skipped by retention.
func (e *Engine) Group(ctx context.Context, name string) (_ engine.GroupInfo, err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	e.gmu.Lock()
	g := e.groups[name]
	if g == nil {
		e.gmu.Unlock()
		return engine.GroupInfo{}, groupErr(name)
	}
	var unknown []*partition
	for _, gp := range g.order {
		if !gp.p.loaded.Load() {
			unknown = append(unknown, gp.p)
		}
	}
	e.gmu.Unlock()
	for _, p := range unknown {
		if _, _, err := e.snapshot(ctx, p); err != nil {
			return engine.GroupInfo{}, err
		}
	}
	e.gmu.Lock()
	defer e.gmu.Unlock()
	info := engine.GroupInfo{Name: g.name, Pattern: g.def.Pattern, Filter: maps.Clone(g.def.Filter), MaxInFlight: e.window(g.def)}
	byMember := make(map[string]int)
	for _, id := range slices.Sorted(maps.Keys(e.reg[g.name])) {
		byMember[id] = len(info.Members)
		info.Members = append(info.Members, engine.MemberInfo{ID: id})
	}
	for _, gp := range g.order {
		_, next := gp.p.view()
		inflight := gp.Leased()
		committed, skipped := gp.position(), gp.Skipped
		if !gp.holding && gp.loaded {
			skipped = gp.stored.Skipped
		}
		if gp.owner != "" {
			mi := &info.Members[byMember[gp.owner]]
			mi.Partitions = append(mi.Partitions, engine.Position{Topic: gp.t.name, Partition: gp.p.index})
		}
		info.Partitions = append(info.Partitions, engine.GroupPartition{
			Topic:     gp.t.name,
			Partition: gp.p.index,
			Member:    gp.owner,
			Committed: committed,
			Next:      next,
			Lag:       max(next-committed, 0),
			InFlight:  inflight,
			Skipped:   skipped,
		})
	}
	return info, nil
}
