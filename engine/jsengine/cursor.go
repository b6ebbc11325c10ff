package jsengine

// Cursors: one per (group, partition) this node knows. A group cursor
// fetches fetchBatch records at a time, in a goroutine of its own and
// without the group lock, then pumps; its next fetch starts at the
// sequence after the last, with no search. A cursor waiting for a record
// past the last one the tail announced (appended, so its offset is known,
// but not yet seen by the tail) does not fetch it either: the tail brings
// it and pumps the cursor. A cursor held on a partition this node has not
// loaded (it started after the last append) loads its state first
// (loadView), so a quiet partition's backlog is delivered at once.
//
// A record pumps only the cursors of its partition that a member on this
// node owns or that this node holds (partition.pumped), under gmu; when
// there are none (every group reading it is idle, or delivered by other
// nodes) the tail takes no engine-wide lock at all, so groups without
// members cost an append nothing. The block floor likewise counts only
// the cursors of groups with a member on some node (partition.reading).

import (
	"context"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/groupstate"
)

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
		if f := e.beforeFetch.Load(); f != nil {
			(*f)()
		}
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
			e.pumpLater(gp)
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

// loadView reads the state of gp's partition from NATS in a goroutine of
// its own, without gmu, when this node has not loaded it (it started after
// the partition's last append: its view ends at offset 0 until the tail
// brings a record), then pumps gp. Without it the records the group owes
// on a quiet partition would wait for the next append. Caller holds gmu;
// gp is held.
func (e *Engine) loadView(gp *gpart) {
	if gp.viewing || e.reachable() != nil || !e.life.Enter() {
		return // a running load, or the tail once NATS is back, pumps gp
	}
	gp.viewing = true
	p := gp.p
	go func() { // exits after one load, bounded by its 5 s timeout
		defer e.life.Exit()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ctx, done := e.onConn(ctx)
		_, _, err := e.snapshot(ctx, p)
		done(nil)
		cancel()
		e.gmu.Lock()
		defer e.gmu.Unlock()
		gp.viewing = false
		if err != nil {
			e.log.Debug("jsengine: group view", "subject", p.subject, "err", err)
			e.pumpLater(gp)
			return
		}
		e.pump(gp)
	}()
}

// pumpLater pumps gp again after a pause (retryPause): a read of the
// partition's state or records failed, and the next try may succeed.
func (e *Engine) pumpLater(gp *gpart) {
	e.afterReal(retryPause, func() {
		e.gmu.Lock()
		defer e.gmu.Unlock()
		e.pump(gp)
	})
}

// retryPause is how long a failed group read waits before it is tried
// again.
const retryPause = 200 * time.Millisecond

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
	if !gp.p.loaded.Load() {
		e.loadView(gp)
	}
	earliest, next := gp.p.view()
	skipFrom, skipTo := gp.SkipTo(earliest)
	if skipTo > skipFrom && len(gp.Flights) == 0 {
		gp.ahead = nil // the whole window was dropped: so are its fetched records
	}
	e.resolveRedo(gp)
	m := gp.member
	outstanding, inFlight, draining := gp.Load(m)
	if m != nil && !draining {
		outstanding = e.fill(gp, outstanding, next)
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
	done := gp.countDone()
	if gp.Committed != before {
		e.updateFloor(gp.p)
		e.markDirty(gp)
	} else if len(gp.Redo) != redo {
		e.markDirty(gp) // a redelivery settled: off the bucket's Redo
	} else if done != gp.doneAbove {
		e.markDirty(gp) // settled above the committed offset: in the bucket's Done
	}
	gp.doneAbove = done
	if trimmed, _ := gp.p.view(); gp.Committed < trimmed {
		defer e.pump(gp) // recordAt found records trimmed meanwhile
	}
	if gp.room = m != nil && !draining && outstanding < e.window(g.def) && m.Room(); gp.room {
		gp.useless, gp.parked = 0, false
	}
	if m != nil && m.Settled() {
		e.pumpMember(g, m, gp)
	}
	if m == nil && inFlight == 0 && !gp.storing() {
		// Owned elsewhere (or by nobody): hand the partition back. Not
		// while a dead letter is being stored: its record would be handed
		// back owed, with its attempts used, though its letter is stored.
		e.letGo(gp)
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
// it: delivered by another node, they continue from there. When its
// attempts are used up it goes to the dead letters without another
// delivery: its last lease ended unsettled, as by an ack timeout, when the
// node holding it died ("holder lost"); after a release its last attempt
// ended as when its member leaves, or its letter was being stored as the
// node closed (then it may be stored twice, never delivered after it).
// Caller holds gmu.
func (e *Engine) resumeAttempts(gp *gpart, f *groupstate.Flight) {
	if f.State != groupstate.Ready || f.Attempt != 0 {
		return
	}
	if f.Attempt = gp.stored.attempts(f.Rec.Offset); f.Attempt >= e.policy.MaxAttempts {
		reason := "attempts used before a hand-over"
		if gp.lost {
			reason = "holder lost"
		}
		e.flights.Fail(gp, f, reason, false)
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
		Active:     func(gp *gpart) bool { return !gp.removed && (!e.closed.Load() || e.lateLetter) },
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
