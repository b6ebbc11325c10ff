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
// Attempts. The position also holds, per record not yet done, the
// delivery attempts started on it, and the holder writes each attempt
// there before the record reaches its member (the write carries the
// commit of what was acked meanwhile, so a record costs one bucket write
// as before; delivery waits for it). The next holder, after a crash or a
// release, continues those counts (resumeAttempts), and a record whose
// every allowed attempt was used by nodes that died with it goes to the
// dead letters ("holder lost") without another delivery. A node dying
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
	lost   bool         // claiming from a holder that died without releasing
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
	if gp.removed {
		return syncWant{}, false
	}
	w := syncWant{rev: gp.storedRev, loaded: gp.loaded, start: gp.start}
	switch {
	case gp.holding:
		w.val = commitVal{Off: gp.Committed, Skipped: gp.Skipped, Holder: e.node, By: e.node, Leases: gp.leases(gp.member != nil), Redo: gp.redoOffsets(),
			Done: gp.doneSpans(e.window(gp.g.def))}
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
		w.val = commitVal{Off: gp.stored.Off, Skipped: gp.stored.Skipped, Holder: e.node, By: e.node, Leases: gp.stored.Leases,
			Redo: gp.stored.redoWithAsked(), Done: gp.stored.Done}
	default:
		if !w.loaded || gp.stored.Holder != e.node {
			return syncWant{}, false // nothing of ours to release
		}
		w.val = e.releaseVal(gp)
	}
	if w.loaded && !w.claim && gp.stored.equal(w.val) {
		return syncWant{}, false
	}
	return w, true
}

// releaseVal is the release of gp, which this node stopped holding: the
// position it reached, with the leases, redeliveries and settled runs it
// handed back. Caller holds gmu.
func (e *Engine) releaseVal(gp *gpart) commitVal {
	return commitVal{Off: gp.Committed, Skipped: gp.Skipped, By: e.node, Leases: gp.handback,
		Redo: gp.handbackRedo, Asked: gp.untaken(gp.stored.Asked), Done: gp.handbackDone}
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
	if !w.claim && gp.holding && !gp.removed {
		e.pump(gp) // attempts just written may be delivered now
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
				gp.holding = true
				e.updateFloor(gp.p)
			} else {
				// The owner moved on while the claim was written: release
				// what the claim read. The hand-back fields still hold an
				// earlier release of this node (or nothing).
				gp.handback = slices.Clone(want.Leases)
				gp.handbackRedo = slices.Clone(want.Redo)
				gp.handbackDone = slices.Clone(want.Done)
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
