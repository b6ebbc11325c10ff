package jsengine

// Commits. Committed offsets are written by a background committer, in
// rounds of at most 16 keys at once, each write carrying every ack since
// the previous one, the acks above the first record not yet settled
// included (Done, see settled.go); after a crash the next holder
// redelivers from the last written offset: the records leased and not
// acked, and those acked since the last write (about one round trip's
// worth), never one acked above that offset in a write. A release (a
// member handed back or gone elsewhere, or Close) writes the same, so
// after a graceful hand-back only the records not settled come again.
// Group on another node shows them a moment later. Seek works from any
// node: the holder adopts a position written by someone else.
//
// Releases. A node that stops holding a partition keeps what its window
// reached as the release to write (gp.rel, letGo) until the committer has
// written it; a claim of its own landing after its owner moved on keeps
// what the claim read. Until then everything that writes the position
// for this node starts from it: the release, Close, and a claim when a
// member joins this node again first (the last value written while
// holding lacks the acks since). A Seek made meanwhile replaces it, on
// this node (the Seek is written as the release) or another (releaseVal
// then releases the value sought); while a Seek of this node is being
// written the committer leaves the partition alone (gp.seeking), so no
// claim or release started from the old release lands over it. A
// partition is not let go while a dead letter of it is being stored, and
// the leases a window has not reached yet (still being fetched after a
// claim) are handed back with the others (heldLeases); a write worked out
// before a Seek on the holder does not bring back the leases the Seek
// cleared (syncApply). A release whose position could not be read again
// after a conflict is kept until it is read and the release written.
//
// Attempts. The position also holds, per record not yet done, the
// delivery attempts started on it, and the holder writes each attempt
// there before the record reaches its member (the write carries the
// commit of what was acked meanwhile, so a record costs one bucket write
// as before; delivery waits for it). The next holder, after a crash or a
// release, continues those counts (resumeAttempts), and a record whose
// every allowed attempt was used goes to the dead letters without another
// delivery: by nodes that died with it ("holder lost"), or before a
// release (its last attempt ended as when its member leaves, or its
// letter was being stored as its node closed). A node dying
// between that write and the delivery counts an attempt that never
// reached a member: at most one per crash.

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

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
	} else if v.By != e.node && !gp.holding && len(v.Asked) == 0 {
		// A Seek (or another node's claim or release): a release of this
		// node still to be written hands back the value stored now, not
		// the position it had reached (see releaseVal).
		gp.rel = nil
	} else if v.By != e.node && gp.holding {
		gp.dropWindow()
		if v.Holder == e.node {
			gp.Committed, gp.Next, gp.Skipped = v.Off, v.Off, v.Skipped
			gp.above = slices.Clone(v.Done)
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
// revision seen; a conflict reloads the value and tries again. Each round
// has three phases: work out what to write under gmu (syncWanted), write
// it without a lock (syncWrite), and apply the outcome under gmu
// (syncApply).
func (e *Engine) sync(gp *gpart) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 10 {
		w, ok := e.syncWanted(gp)
		if !ok {
			return
		}
		rev, step := e.syncWrite(ctx, gp, &w)
		switch step {
		case syncAgain:
			continue
		case syncLater:
			e.retryLater(gp)
			return
		}
		e.syncApply(gp, &w, rev)
		return
	}
	e.retryLater(gp)
}

// syncWant is what one round of sync writes to gp's position.
type syncWant struct {
	val    commitVal
	rev    uint64       // the stored revision the write replaces
	loaded bool         // gp's position was read from the bucket
	claim  bool         // the write claims the partition for this node
	rel    *commitVal   // the pending release the write hands back (gp.rel then)
	lost   bool         // claiming from a holder that died without releasing
	seeks  uint64       // gp.seeks when the write was worked out
	start  engine.Start // where a new position starts
}

// syncStep is how syncWrite ended.
type syncStep int

const (
	syncWritten syncStep = iota // written: apply it
	syncAgain                   // the position was reloaded: work out the wanted state again
	syncLater                   // failed: try again after a pause
)

// syncWanted works out what gp's position should hold: while holding, the
// commits, leases and redrives; while acquiring, a claim naming this node
// (unless a live holder must release first); otherwise a release of what
// this node held. It reports false when there is nothing to write.
func (e *Engine) syncWanted(gp *gpart) (syncWant, bool) {
	e.gmu.Lock()
	defer e.gmu.Unlock()
	if gp.removed || gp.seeking > 0 {
		return syncWant{}, false // a Seek marks gp dirty once written
	}
	w := syncWant{rev: gp.storedRev, loaded: gp.loaded, start: gp.start, seeks: gp.seeks}
	switch {
	case gp.holding:
		w.val = e.heldVal(gp, gp.member != nil)
		w.val.Holder = e.node
	case gp.acquiring:
		if gp.member == nil {
			gp.acquiring = false
			return syncWant{}, false
		}
		if w.loaded && gp.stored.Holder != "" && gp.stored.Holder != e.node && e.nodes[gp.stored.Holder] {
			gp.acquiring = false // wait for the holder to release or die
			return syncWant{}, false
		}
		w.claim = true
		w.lost = w.loaded && gp.stored.Holder != "" && gp.stored.Holder != e.node
		// Claiming back what this node still holds in the bucket (a member
		// joined here again before the release was written) starts from
		// the release, which holds every ack since the last write.
		base := gp.stored
		if gp.stored.Holder == e.node {
			base = e.releaseVal(gp)
		} else {
			gp.rel = nil
		}
		w.val = commitVal{Off: base.Off, Skipped: base.Skipped, Holder: e.node, By: e.node, Leases: base.Leases,
			Redo: base.redoWithAsked(), Done: base.Done}
	default:
		if !w.loaded && gp.rel != nil {
			// A release still to be written, and the position unread (a
			// read after a conflict failed): read it (syncWrite), then
			// write the release. Dropping it would leave the partition held
			// by this live node, which other nodes wait for.
			w.rel = gp.rel
			return w, true
		}
		if !w.loaded || gp.stored.Holder != e.node {
			gp.rel = nil
			return syncWant{}, false // nothing of ours to release
		}
		w.val, w.rel = e.releaseVal(gp), gp.rel
	}
	if w.loaded && !w.claim && gp.stored.equal(w.val) {
		return syncWant{}, false
	}
	return w, true
}

// heldVal is the position gp's window has reached while this node holds
// it (Holder not set): the committed offset, the leases (with ahead, a
// Ready record counts the attempt it is about to get), the redeliveries
// and the settled runs. Caller holds gmu.
func (e *Engine) heldVal(gp *gpart, ahead bool) commitVal {
	return commitVal{Off: gp.Committed, Skipped: gp.Skipped, By: e.node, Leases: gp.heldLeases(ahead), Redo: gp.redoOffsets(),
		Done: gp.doneSpans(e.window(gp.g.def))}
}

// letGo stops holding gp: what its window reached becomes the release to
// write (gp.rel), and the window is dropped. The caller has the release
// written (markDirty, or Close). Caller holds gmu.
func (e *Engine) letGo(gp *gpart) {
	rel := e.heldVal(gp, false)
	gp.rel = &rel
	gp.dropWindow()
	gp.holding = false
}

// releaseVal is the release of gp, which this node stopped holding but
// still holds in the bucket: the position it reached when it let go
// (gp.rel), or, when a Seek came since or the node's claim landed after
// its owner moved on, the value stored, with the holder cleared and the
// redrives asked for and not taken up. Caller holds gmu.
//
// Every path that stops holding sets gp.rel: a release written from
// anything older (the last position written while holding, or an earlier
// release) would have the next holder deliver again, as first attempts,
// the records acked since.
func (e *Engine) releaseVal(gp *gpart) commitVal {
	v := gp.stored
	if gp.rel != nil {
		v = *gp.rel
	}
	v.Holder, v.By, v.Asked = "", e.node, gp.untaken(gp.stored.Asked)
	return v
}

// syncWrite writes w to gp's position without a lock: an update of the
// stored revision, or, for a position not yet loaded, a load and (for a
// claim) a create starting at w.start. It returns the new revision.
func (e *Engine) syncWrite(ctx context.Context, gp *gpart, w *syncWant) (uint64, syncStep) {
	var newRev uint64
	var err error
	if !w.loaded {
		var ent jetstream.KeyValueEntry
		ent, err = e.groupKV.Get(ctx, gp.key)
		if err == nil {
			e.groupEntry(gp, ent)
			return 0, syncAgain
		}
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			e.log.Warn("jsengine: load position", "key", gp.key, "err", err)
			return 0, syncLater
		}
		if !w.claim {
			e.gmu.Lock()
			if w.rel != nil && gp.rel == w.rel {
				gp.rel = nil // no position to release
			}
			e.gmu.Unlock()
			return 0, syncAgain
		}
		var off int64
		if off, err = e.resolve(ctx, gp.p, w.start); err != nil {
			return 0, syncLater
		}
		w.val.Off = off
		newRev, err = e.groupKV.Create(ctx, gp.key, w.val.marshal())
	} else {
		newRev, err = e.groupKV.Update(ctx, gp.key, w.val.marshal(), w.rev)
	}
	if isWrongLast(err) {
		if ent, err := e.groupKV.Get(ctx, gp.key); err == nil {
			e.groupEntry(gp, ent)
		} else {
			e.gmu.Lock()
			gp.loaded, gp.storedRev = false, 0
			e.gmu.Unlock()
		}
		return 0, syncAgain
	}
	if err != nil {
		e.log.Warn("jsengine: write position", "key", gp.key, "err", err)
		return 0, syncLater
	}
	return newRev, syncWritten
}

// syncApply records that w was written at revision rev and, for a claim,
// starts holding gp from the written position (or releases it again when
// its owner moved on meanwhile).
func (e *Engine) syncApply(gp *gpart, w *syncWant, rev uint64) {
	e.gmu.Lock()
	defer e.gmu.Unlock()
	want := w.val
	if rev > gp.storedRev {
		gp.stored, gp.storedRev, gp.loaded = want, rev, true
		if len(want.Asked) == 0 {
			gp.taken = nil // every redrive taken up is off the bucket now
		}
	}
	if !w.claim && w.seeks != gp.seeks && rev == gp.storedRev {
		// Worked out before a Seek on this holder: the leases, redrives
		// and settled runs it carries are from before the Seek, which
		// cleared them; kept, the next writes would carry the leases past
		// the window on (heldLeases) and the records would come with
		// attempts the Seek reset.
		gp.stored.Leases, gp.stored.Redo, gp.stored.Asked, gp.stored.Done = nil, nil, nil, nil
	}
	if !w.claim && gp.holding && !gp.removed {
		e.pump(gp) // attempts just written may be delivered now
	}
	if w.rel != nil && gp.rel == w.rel {
		gp.rel = nil // written
	}
	if w.claim && !gp.removed {
		gp.acquiring = false
		if !gp.holding {
			gp.Committed, gp.Next, gp.Skipped = want.Off, want.Off, want.Skipped
			gp.Flights, gp.Redo, gp.ahead = nil, nil, nil
			gp.redrives.drop()
			gp.restore(want.Redo)
			gp.above, gp.doneAbove = slices.Clone(want.Done), 0
			for _, off := range want.Redo {
				gp.unsettle(off) // asked for again by a redrive
			}
			gp.lost = w.lost
			if gp.member != nil {
				gp.holding, gp.rel = true, nil
				e.updateFloor(gp.p)
			} else {
				// The owner moved on while the claim was written: release
				// what the claim read.
				gp.rel = &commitVal{Off: want.Off, Skipped: want.Skipped, Leases: want.Leases, Redo: want.Redo, Done: want.Done}
				e.markDirty(gp)
			}
		}
		e.pump(gp)
	}
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
