package main

// The torture run's stall check (invariant 2): a reading subscriber gets
// every record within --stall of its acknowledgement, unless this process
// was starved of CPU meanwhile (overloadWatch); after a resume the clock
// of the records published since starts when the replay of what it missed
// is done, and the replay itself must keep delivering (see the books'
// description in torture_ledger.go).

import (
	"sort"
	"sync"
	"time"
)

// settleCatchUp drops from v.owe the partitions whose replay is done (the
// owed offset received or no longer owed) and, once none is left, sets
// v.caughtUp to at. v.mu is held; the partitions' logs are not.
func (v *sview) settleCatchUp(at time.Time) {
	if !v.caughtUp.IsZero() {
		return
	}
	for k, off := range v.owe {
		if p := v.pos[k]; (p != nil && p.hw >= off) || v.excused(k, off) || v.l.isDeleted(k) ||
			v.coveredLoose(k.topic, k.part, off, off+1) || v.curGen[k.topic] > k.gen {
			delete(v.owe, k)
		}
	}
	if len(v.owe) == 0 {
		v.caughtUp = at
		if d := at.Sub(v.since); d > time.Duration(v.l.worstCatchUp.Load()) {
			v.l.worstCatchUp.Store(int64(d))
		}
	}
}

// replaying reports whether the current subscription's replay still owes
// records of the partition part of topic, in any generation: a frame of
// it is the replay's progress. v.mu is held.
func (v *sview) replaying(topic string, part int) bool {
	for k := range v.owe {
		if k.topic == topic && k.part == part {
			return true
		}
	}
	return false
}

// clockStart is when the stall clock of a record published at t starts
// for v: t itself once the replay is done, else the later of t, the
// replay's last progress and the confirmation. v.mu is held.
func (v *sview) clockStart(t time.Time) time.Time {
	if !v.caughtUp.IsZero() {
		return later(t, v.caughtUp)
	}
	return later(later(t, v.lastRecv), v.since)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// checkStalls reports records v has waited for longer than the stall
// bound. It looks at each partition's oldest owed record only.
func (v *sview) checkStalls(now time.Time) {
	logs := v.l.matching(v.pattern)
	v.mu.Lock()
	defer v.mu.Unlock()
	if !v.live || !v.reading {
		return
	}
	for _, pl := range logs {
		pl.mu.Lock()
		if pl.deleted != 0 || v.catchingUp(pl.key) {
			pl.mu.Unlock()
			continue
		}
		hw := int64(-1)
		if p := v.pos[pl.key]; p != nil {
			hw = p.hw
		}
		i := sort.Search(len(pl.entries), func(i int) bool { return pl.entries[i].off > hw })
		for n := 0; i < len(pl.entries) && n < 512; i, n = i+1, n+1 {
			e := pl.entries[i]
			if !v.owed(pl, e, true) || v.coveredLoose(pl.key.topic, pl.key.part, e.off, e.off+1) {
				continue
			}
			wait := now.UnixNano() - v.clockStart(time.Unix(0, e.acked)).UnixNano()
			if wait > v.l.worstWait.Load() && !v.l.over.during(e.sent, now.UnixNano()) {
				v.l.worstWait.Store(wait)
			}
			if wait > int64(v.l.stall) && v.stalled[pl.key] < e.off+1 && !v.l.over.during(e.sent, now.UnixNano()) {
				v.stalled[pl.key] = e.off + 1
				how := "after its publish was acknowledged"
				if v.caughtUp.IsZero() {
					how = "with nothing received meanwhile, while the resume's replay runs"
				} else if v.caughtUp.UnixNano() > e.acked {
					how = "after the resume's replay was done"
				}
				v.l.v2.add("%s (%s): %s/%d offset %d not received %v %s",
					v.name, v.pattern, pl.key.topic, pl.key.part, e.off, time.Duration(wait).Round(time.Millisecond), how)
			}
			break
		}
		pl.mu.Unlock()
	}
	if v.caughtUp.IsZero() {
		v.settleCatchUp(later(v.lastRecv, v.since))
	}
}

// overloadWatch notices when this process is starved of CPU: a ticker
// that fires late by more than a bound marks the time it missed as
// overloaded. It is safe for concurrent use.
type overloadWatch struct {
	mu    sync.Mutex // guards following
	spans [][2]int64 // [from, to] unix nanoseconds
	total time.Duration
}

// run ticks until stop is closed.
func (o *overloadWatch) run(stop <-chan struct{}) {
	const tick, late = 20 * time.Millisecond, 150 * time.Millisecond
	t := time.NewTicker(tick)
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			if d := now.Sub(last); d > tick+late {
				o.mu.Lock()
				o.spans = append(o.spans, [2]int64{last.UnixNano(), now.UnixNano()})
				o.total += d
				o.mu.Unlock()
			}
			last = now
		}
	}
}

// during reports whether an overloaded span touches [from, to].
func (o *overloadWatch) during(from, to int64) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := len(o.spans) - 1; i >= 0; i-- {
		s := o.spans[i]
		if s[1] < from {
			return false
		}
		if s[0] <= to {
			return true
		}
	}
	return false
}
