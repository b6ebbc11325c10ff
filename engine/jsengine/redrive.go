package jsengine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/groupstate"
)

// Redrive in place. A max_attempts letter goes back to its group at its
// own offset; nothing is appended. Any node may redrive, while the node
// holding the partition delivers, so the request travels through the
// group bucket, where it survives restarts of either:
//
//   - The redriving node checks that the group still reads the partition
//     and that the log still holds the record (the same one: a re-created
//     topic has other records at those offsets), deletes the letter from
//     the dead-letter stream (so two nodes redriving at once hand it back
//     once), and asks for the redelivery: on the holding node directly;
//     elsewhere by a compare-and-set of the position adding the ask (offset
//     and letter ID) to Asked, keeping the rest. If the ask cannot be
//     written the letter is stored again.
//   - The holder takes up every ask it has not taken before (a foreign
//     write that keeps the holder and carries asks is a redrive, not a
//     seek: its window stays), and its next write lists the redelivery in
//     Redo and clears Asked. Until that write lands, the IDs it took are
//     remembered, so an ask seen twice is taken once.
//   - A node that claims the partition (after a release, a crash, a
//     restart) takes Redo and Asked as its redeliveries, continuing the
//     attempts the bucket records for them; a release writes the
//     releasing node's pending redeliveries to Redo and keeps the asks it
//     had not taken up.
//   - The holder gets each record from the tail's cache or fetches it
//     (one direct get per record, in a goroutine of its own, as for group
//     catch-up); a record retention trimmed meanwhile is reported to the
//     member as skipped.
//   - Seek drops pending redeliveries, as it drops records in flight.

// ask is a redrive asked for in the group bucket: the offset of the
// record and the ID of the letter it came from.
type ask struct {
	Off int64  `json:"o"`
	ID  string `json:"id"`
}

// redrives is a cursor's redriven records not yet in its window, and what
// the holder remembers of the asks it took up. Guarded by gmu.
type redrives struct {
	want         []int64                  // offsets whose records are still to be had
	recs         map[int64]*engine.Record // records fetched for want
	resume       map[int64]bool           // offsets restored from the bucket: their attempts continue
	redoFetching bool                     // a fetchRedo is running
	taken        map[string]bool          // IDs of asks taken up, until a write clears Asked
}

// drop forgets the pending redeliveries (with the window).
func (r *redrives) drop() { r.want, r.recs, r.resume = nil, nil, nil }

// restore makes offs, read from the bucket, the pending redeliveries.
func (r *redrives) restore(offs []int64) {
	r.want, r.recs, r.resume = slices.Clone(offs), nil, nil
	if len(offs) > 0 {
		r.resume = make(map[int64]bool, len(offs))
		for _, off := range offs {
			r.resume[off] = true
		}
	}
}

// untaken returns the asks not taken up by this node.
func (r *redrives) untaken(asks []ask) []ask {
	var out []ask
	for _, a := range asks {
		if !r.taken[a.ID] {
			out = append(out, a)
		}
	}
	return out
}

// redoWithAsked returns the offsets of Redo and Asked, sorted, each once.
func (v commitVal) redoWithAsked() []int64 {
	out := slices.Clone(v.Redo)
	for _, a := range v.Asked {
		out = append(out, a.Off)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// redoOffsets returns the offsets of gp's pending redeliveries, sorted.
// Caller holds gmu.
func (gp *gpart) redoOffsets() []int64 {
	out := slices.Clone(gp.want)
	for _, f := range gp.Redo {
		if f.State != groupstate.Done {
			out = append(out, f.Rec.Offset)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// takeAsks takes up the asks not taken before; the next write of the
// position records them in Redo and clears Asked. Caller holds gmu; gp is
// held by this node.
func (e *Engine) takeAsks(gp *gpart, asks []ask) {
	for _, a := range asks {
		if gp.taken[a.ID] {
			continue
		}
		if gp.taken == nil {
			gp.taken = make(map[string]bool)
		}
		gp.taken[a.ID] = true
		if !slices.Contains(gp.want, a.Off) {
			gp.want = append(gp.want, a.Off)
		}
		delete(gp.resume, a.Off)
		gp.unsettle(a.Off) // settled above the committed offset, and asked for again
	}
	e.markDirty(gp)
}

// resolveRedo hands the pending redeliveries whose records are at hand to
// the window, and fetches the others. Caller holds gmu; gp is held.
func (e *Engine) resolveRedo(gp *gpart) {
	if len(gp.want) == 0 {
		return
	}
	var keep []int64
	for _, off := range gp.want {
		r := gp.recs[off]
		if r == nil {
			r, _ = gp.p.cachedOrComing(off)
		}
		if r == nil {
			keep = append(keep, off)
			continue
		}
		delete(gp.recs, off)
		if f := gp.Redeliver(r); f != nil && gp.resume[off] {
			e.resumeAttempts(gp, f)
		}
		delete(gp.resume, off)
	}
	gp.want = keep
	if len(keep) > 0 && !gp.redoFetching && e.reachable() == nil {
		e.fetchRedo(gp, slices.Clone(keep))
	}
}

// fetchRedo reads the records at offs in a goroutine of its own, with no
// lock held across the round trips, then pumps gp. A record no longer in
// the log is dropped from the redeliveries and reported to the member as
// skipped. Caller holds gmu.
func (e *Engine) fetchRedo(gp *gpart, offs []int64) {
	if !e.life.Enter() {
		return
	}
	gp.redoFetching = true
	p := gp.p
	go func() { // exits after its fetches, bounded by a 5 s timeout
		defer e.life.Exit()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ctx, done := e.onConn(ctx)
		got := make(map[int64]*engine.Record, len(offs))
		var gone []int64
		var ferr error
		for _, off := range offs {
			recs, _, err := e.fetch(ctx, p, off, 1, e.lastSeen(p), 0)
			if err != nil {
				ferr = err
				break
			}
			if len(recs) == 1 && recs[0].Offset == off {
				got[off] = recs[0]
			} else {
				gone = append(gone, off)
			}
		}
		done(nil)
		cancel()
		e.gmu.Lock()
		defer e.gmu.Unlock()
		gp.redoFetching = false
		if gp.removed || !gp.holding {
			return
		}
		for off, r := range got {
			if slices.Contains(gp.want, off) {
				if gp.recs == nil {
					gp.recs = make(map[int64]*engine.Record)
				}
				gp.recs[off] = r
			}
		}
		for _, off := range gone {
			if !slices.Contains(gp.want, off) {
				continue
			}
			gp.want = slices.DeleteFunc(gp.want, func(o int64) bool { return o == off })
			if m := gp.member; m != nil {
				m.Consumer.Skipped(gp.g.name, gp.t.name, p.index, off, off+1)
			}
			e.markDirty(gp)
		}
		if ferr != nil {
			e.log.Debug("jsengine: redrive fetch", "subject", p.subject, "err", ferr)
			e.pumpLater(gp)
			return
		}
		e.pump(gp)
	}()
}

// Redrive hands the letters r chooses back: a letter whose group still
// reads its record goes back to that group only, at its own offset with a
// fresh attempt count (see engine.RedriveRequest); one that cannot go back
// in place is appended to its topic again (same key, headers, data and
// priority; a new offset) when r.AppendToTopics is set, and left
// otherwise. With ids it takes those letters, restricted to r.Group when
// set; without ids every letter of r.Group. It returns how many letters it
// handed back and removed, and the errors met.
func (e *Engine) Redrive(ctx context.Context, r engine.RedriveRequest) (_ int, err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	if r.Group == "" && len(r.IDs) == 0 {
		return 0, fmt.Errorf("jsengine: redrive needs a group or ids: %w", engine.ErrInvalidConfig)
	}
	all, err := e.letters(ctx)
	if err != nil {
		return 0, err
	}
	all = e.visible(all)
	// An index of the ids asked for: the scan costs O(letters + ids).
	want := make(map[string]bool, len(r.IDs))
	for _, id := range r.IDs {
		want[id] = true
	}
	n := 0
	var errs []error
	for _, s := range all {
		d := s.dl
		if (r.Group != "" && d.Group != r.Group) || (len(r.IDs) > 0 && !want[d.ID]) {
			continue
		}
		delete(want, d.ID) // each id once
		if d.Group != "" {
			out, err := e.redeliver(ctx, s)
			if err != nil {
				errs = append(errs, err)
				if ctx.Err() != nil || e.closed.Load() {
					break
				}
				continue
			}
			if out == redelivered {
				n++
			}
			if out != notInPlace {
				continue
			}
		}
		if !r.AppendToTopics {
			continue
		}
		if s.inLog {
			// Its data is in the log only: once trimmed, nothing to append.
			if ok, err := e.fillFromLog(ctx, &d); err != nil || !ok {
				if err != nil {
					errs = append(errs, err)
				}
				continue
			}
		}
		// Remove first: two nodes redriving at once append a letter once.
		if err := e.dl.DeleteMsg(ctx, s.seq); err != nil {
			continue
		}
		_, err := e.Append(ctx, engine.Message{
			Topic: d.Record.Topic, Key: d.Record.Key, Headers: d.Record.Headers,
			Data: d.Record.Data, Priority: d.Record.Priority,
		})
		if err != nil {
			errs = append(errs, err)
			// Put it back so it is not lost.
			if err := e.storeDeadLetter(context.WithoutCancel(ctx), &d); err != nil {
				errs = append(errs, err)
			}
			if ctx.Err() != nil || e.closed.Load() {
				break
			}
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// redeliverOutcome is what redeliver did with a letter.
type redeliverOutcome int

const (
	redelivered redeliverOutcome = iota // asked for; the letter is removed
	notInPlace                          // its group or record is gone; the letter stays
	taken                               // another redrive removed the letter first
)

// redeliver asks for a max_attempts letter's record to be delivered to its
// group again at its own offset, when the group still reads the partition
// and the log still holds the record. See the top of this file.
func (e *Engine) redeliver(ctx context.Context, s storedLetter) (redeliverOutcome, error) {
	d := &s.dl
	e.gmu.Lock()
	var gp *gpart
	if g := e.groups[d.Group]; g != nil {
		gp = g.parts[partKey{d.Record.Topic, d.Record.Partition}]
	}
	e.gmu.Unlock()
	if gp == nil {
		return notInPlace, nil
	}
	off := d.Record.Offset
	recs, _, err := e.Read(ctx, d.Record.Topic, d.Record.Partition, off, 1)
	switch {
	case errors.Is(err, engine.ErrUnknownTopic), errors.Is(err, engine.ErrUnknownPartition):
		return notInPlace, nil
	case err != nil:
		return notInPlace, err
	case len(recs) == 0 || recs[0].Offset != off || !sameRecord(recs[0], &d.Record, s.inLog):
		return notInPlace, nil
	}
	if s.inLog {
		d.Record.Data = recs[0].Data // for a put back below
		if d.Record.Headers == nil {
			d.Record.Headers = recs[0].Headers
		}
	}
	if err := e.dl.DeleteMsg(ctx, s.seq); err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return taken, nil
		}
		return notInPlace, unavailable("redrive", err)
	}
	if err := e.askRedo(ctx, gp, ask{Off: off, ID: d.ID}); err != nil {
		if err := e.storeDeadLetter(context.WithoutCancel(ctx), d); err != nil {
			e.log.Warn("jsengine: dead letter not put back after a failed redrive", "id", d.ID, "err", err)
		}
		return notInPlace, err
	}
	return redelivered, nil
}

// sameRecord reports whether the log's record r is the one a letter holds
// a copy of (without its data when inLog: see letterenc.go).
func sameRecord(r, kept *engine.Record, inLog bool) bool {
	return r.Time.Equal(kept.Time) && r.Key == kept.Key && (inLog || bytes.Equal(r.Data, kept.Data))
}

// askRedo asks for the redelivery: on this node when it holds the
// partition, else by adding it to the position's Asked with a
// compare-and-set.
func (e *Engine) askRedo(ctx context.Context, gp *gpart, a ask) error {
	for range 10 {
		e.gmu.Lock()
		if gp.removed {
			e.gmu.Unlock()
			return fmt.Errorf("jsengine: redrive %s: the group no longer reads the partition: %w", gp.key, engine.ErrUnknownTopic)
		}
		if gp.holding {
			e.takeAsks(gp, []ask{a})
			e.pump(gp)
			e.gmu.Unlock()
			return nil
		}
		v, rev, loaded := gp.stored, gp.storedRev, gp.loaded
		e.gmu.Unlock()
		if !loaded {
			ent, err := e.groupKV.Get(ctx, gp.key)
			if err != nil {
				return unavailable("redrive", err)
			}
			e.groupEntry(gp, ent)
			continue
		}
		v.Asked = append(slices.Clone(v.Asked), a)
		v.By = e.node
		_, err := e.groupKV.Update(ctx, gp.key, v.marshal(), rev)
		if err == nil {
			return nil
		}
		if !isWrongLast(err) {
			return unavailable("redrive", err)
		}
		if ent, err := e.groupKV.Get(ctx, gp.key); err == nil {
			e.groupEntry(gp, ent)
		}
	}
	return fmt.Errorf("jsengine: redrive %s: too much contention: %w", gp.key, engine.ErrUnavailable)
}
