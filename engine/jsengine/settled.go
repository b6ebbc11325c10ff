package jsengine

// Records settled above the committed offset. With a window above 1 a
// member may ack records past one it has not settled yet (a hole): the
// committed offset stays at the hole, and the acked records past it are
// Done flights of the holder's window. A position written to the group
// bucket carries them as Done, runs of offsets [from, to) above Off (JSON
// [[from,to],...]); the next holder, after a Close, a release to another
// node or a crash, marks them Done as its window reaches them instead of
// delivering them again. Each run follows a record not yet settled, and
// at most the window's worth of records is outstanding, so a value holds
// at most the window's worth of runs (writes keep the lowest that many, a
// bound that only a redrive reopening settled records could reach: the
// runs dropped are delivered again, as before this field existed). A
// value without the field (written before it existed) decodes as no runs:
// everything from Off is delivered, as it was then; a node that does not
// know the field ignores it and does the same.

import (
	"slices"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/groupstate"
)

// span is a run of offsets [span[0], span[1]) settled above a position's
// committed offset.
type span [2]int64

// settledRuns is what a cursor knows of the records settled above its
// committed offset beyond its window. Guarded by gmu.
type settledRuns struct {
	above     []span // read from the bucket and not yet reached by the window, in order
	doneAbove int    // Done flights in the window at the last pump
}

// addSpan appends [from, to) to out, merging it with the last run when
// they touch.
func addSpan(out []span, from, to int64) []span {
	if n := len(out); n > 0 && out[n-1][1] >= from {
		out[n-1][1] = max(out[n-1][1], to)
		return out
	}
	return append(out, span{from, to})
}

// doneSpans returns the runs of records settled above gp's committed
// offset: the Done flights of its window and the runs read from the
// bucket that the window has not reached, at most limit runs. Caller
// holds gmu.
func (gp *gpart) doneSpans(limit int) []span {
	var out []span
	for i, f := range gp.Flights {
		if f.State == groupstate.Done {
			off := gp.Committed + int64(i)
			out = addSpan(out, off, off+1)
		}
	}
	for _, s := range gp.above {
		if from := max(s[0], gp.Next); from < s[1] {
			out = addSpan(out, from, s[1])
		}
	}
	if len(out) > limit {
		out = out[:limit]
	}
	return out
}

// settledAt reports whether the bucket records off as settled, dropping
// the runs below off: the window reaches offsets in order. Caller holds
// gmu.
func (s *settledRuns) settledAt(off int64) bool {
	for len(s.above) > 0 && s.above[0][1] <= off {
		s.above = s.above[1:]
	}
	return len(s.above) > 0 && s.above[0][0] <= off
}

// unsettle drops off from the runs read from the bucket: a redrive asks
// for it to be delivered again. Caller holds gmu.
func (s *settledRuns) unsettle(off int64) {
	i := slices.IndexFunc(s.above, func(r span) bool { return r[0] <= off && off < r[1] })
	if i < 0 {
		return
	}
	r := s.above[i]
	var parts []span
	if r[0] < off {
		parts = append(parts, span{r[0], off})
	}
	if off+1 < r[1] {
		parts = append(parts, span{off + 1, r[1]})
	}
	s.above = slices.Replace(slices.Clone(s.above), i, i+1, parts...)
}

// pending counts the offsets of the runs read from the bucket at or past
// from. Caller holds gmu.
func (s *settledRuns) pending(from int64) int64 {
	var n int64
	for _, r := range s.above {
		n += max(r[1]-max(r[0], from), 0)
	}
	return n
}

// fill adds flights to gp's window for the records up to next while fewer
// than the window are outstanding, starting from outstanding, and returns
// how many are outstanding then, as Window.Fill. A record the bucket
// records as settled (acked before a hand-back) is Done at once, and the
// window fills on past it; every other new flight continues the attempts
// the bucket records for it. Each round but the last finds at least one
// settled record, so the rounds are bounded by their count. Caller holds
// gmu; gp is held.
func (e *Engine) fill(gp *gpart, outstanding int, next int64) int {
	limit := e.window(gp.g.def)
	for range gp.pending(gp.Next) + 1 {
		n := len(gp.Flights)
		outstanding = gp.Fill(outstanding, limit, next, gp.g.def.Filter,
			func(off int64) *engine.Record { return e.recordAt(gp, off) })
		found := 0
		for _, f := range gp.Flights[n:] {
			if !gp.settledAt(f.Rec.Offset) {
				e.resumeAttempts(gp, f)
				continue
			}
			if f.State != groupstate.Done {
				f.State = groupstate.Done
				outstanding--
			}
			found++
		}
		if found == 0 {
			break
		}
	}
	return outstanding
}

// countDone returns how many flights of gp's window are Done: past the
// first, they are settled above the committed offset. Caller holds gmu.
func (gp *gpart) countDone() int {
	n := 0
	for _, f := range gp.Flights {
		if f.State == groupstate.Done {
			n++
		}
	}
	return n
}
