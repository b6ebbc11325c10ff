package memengine

import (
	"bytes"
	"container/list"
	"context"
	"errors"
	"fmt"

	"github.com/switchyard/switchyard/engine"
)

// letters is the dead-letter store: every letter in arrival order, an
// index by ID, each group's max_attempts letters in arrival order, and a
// ring of the queue_full letters in arrival order so that the one to
// evict at a cap is found in O(1). Adding a letter, removing one by ID and
// evicting at a bound each cost O(1). Not safe for concurrent use:
// Engine.dlMu guards it.
//
// Bounds (engine.GroupPolicy): queue_full letters at DeadLetterLimit, a
// group's max_attempts letters at MaxGroupDeadLetters, and every letter at
// MaxDeadLetters and MaxDeadLetterBytes (letterBytes each); past one the
// oldest letter it bounds is dropped and counted in evicted. The newest
// letter is kept even when it alone passes MaxDeadLetterBytes.
type letters struct {
	all  list.List                // of *engine.DeadLetter, oldest first
	byID map[string]*list.Element // in all
	// byGroup holds each group's max_attempts letters (elements of all),
	// oldest first; inGroup maps an element of all to its element there.
	byGroup map[string]*list.List
	inGroup map[*list.Element]*list.Element
	bytes   int64 // letterBytes of the letters in all
	// ring holds the queue_full letters' elements oldest first:
	// ring[(head+i)%len(ring)] for i < n. An element redriven meanwhile is
	// left in place as a tombstone (byID no longer points at it) and is
	// skipped when it reaches the head, so the ring never holds more than
	// the cap and eviction never searches.
	ring    []*list.Element
	head, n int
	evicted int64 // letters dropped at a bound, oldest first
}

// letterBytes is what a letter counts against MaxDeadLetterBytes: its
// record's data, key and headers, and its error.
func letterBytes(dl *engine.DeadLetter) int64 {
	n := len(dl.Record.Data) + len(dl.Record.Key) + len(dl.Error)
	for k, v := range dl.Record.Headers {
		n += len(k) + len(v)
	}
	return int64(n)
}

// live reports whether el is still stored.
func (ls *letters) live(el *list.Element) bool {
	return el != nil && ls.byID[el.Value.(*engine.DeadLetter).ID] == el
}

func (ls *letters) remove(el *list.Element) {
	dl := el.Value.(*engine.DeadLetter)
	delete(ls.byID, dl.ID)
	ls.all.Remove(el)
	ls.bytes -= letterBytes(dl)
	if gel := ls.inGroup[el]; gel != nil {
		delete(ls.inGroup, el)
		gl := ls.byGroup[dl.Group]
		gl.Remove(gel)
		if gl.Len() == 0 {
			delete(ls.byGroup, dl.Group)
		}
	}
}

// evict drops el at a bound.
func (ls *letters) evict(el *list.Element) {
	ls.remove(el)
	ls.evicted++
}

// add stores dl, then drops the oldest letters past p's bounds.
func (ls *letters) add(dl *engine.DeadLetter, p engine.GroupPolicy) {
	if ls.byID == nil {
		ls.byID = make(map[string]*list.Element)
		ls.byGroup = make(map[string]*list.List)
		ls.inGroup = make(map[*list.Element]*list.Element)
	}
	if old := ls.byID[dl.ID]; old != nil {
		ls.remove(old) // a caller reusing an ID replaces the letter
	}
	el := ls.all.PushBack(dl)
	ls.byID[dl.ID] = el
	ls.bytes += letterBytes(dl)
	switch {
	case dl.Reason == engine.ReasonQueueFull && p.DeadLetterLimit > 0:
		ls.ringAdd(el, p.DeadLetterLimit)
	case dl.Reason != engine.ReasonQueueFull && dl.Group != "":
		gl := ls.byGroup[dl.Group]
		if gl == nil {
			gl = list.New()
			ls.byGroup[dl.Group] = gl
		}
		ls.inGroup[el] = gl.PushBack(el)
		for p.MaxGroupDeadLetters > 0 && gl.Len() > p.MaxGroupDeadLetters {
			ls.evict(gl.Front().Value.(*list.Element))
		}
	}
	for ls.all.Len() > 1 && (p.MaxDeadLetters > 0 && ls.all.Len() > p.MaxDeadLetters ||
		p.MaxDeadLetterBytes > 0 && ls.bytes > p.MaxDeadLetterBytes) {
		ls.evict(ls.all.Front()) // a queue_full one stays in the ring as a tombstone
	}
}

// ringAdd puts the queue_full letter el in the ring; past limit it evicts
// the oldest one.
func (ls *letters) ringAdd(el *list.Element, limit int) {
	if len(ls.ring) != limit {
		ls.resize(limit)
	}
	if ls.n == len(ls.ring) {
		oldest := ls.ring[ls.head]
		ls.ring[ls.head] = nil
		ls.head = (ls.head + 1) % len(ls.ring)
		ls.n--
		if ls.live(oldest) {
			ls.evict(oldest)
		}
	}
	ls.ring[(ls.head+ls.n)%len(ls.ring)] = el
	ls.n++
}

// resize gives the ring limit slots, keeping its newest letters (and
// evicting the rest); only the first queue_full letter, or a policy
// change, resizes.
func (ls *letters) resize(limit int) {
	ring := make([]*list.Element, limit)
	keep := min(ls.n, limit)
	for i := range ls.n {
		el := ls.ring[(ls.head+i)%len(ls.ring)]
		if i < ls.n-keep {
			if ls.live(el) {
				ls.evict(el)
			}
			continue
		}
		ring[i-(ls.n-keep)] = el
	}
	ls.ring, ls.head, ls.n = ring, 0, keep
}

// AddDeadLetter stores dl, giving it an ID and time when they are empty.
// Letters with ReasonQueueFull are bounded by Policy.DeadLetterLimit,
// max_attempts letters by Policy.MaxGroupDeadLetters per group, and all
// of them by Policy.MaxDeadLetters and MaxDeadLetterBytes, the oldest
// going first (see letters). It costs O(1), at a bound as below it.
func (e *Engine) AddDeadLetter(ctx context.Context, dl engine.DeadLetter) error {
	if dl.ID == "" {
		dl.ID = e.newID()
	}
	if dl.Time.IsZero() {
		dl.Time = e.clock.Now()
	}
	e.addDeadLetter(&dl)
	return nil
}

func (e *Engine) addDeadLetter(dl *engine.DeadLetter) {
	e.dlMu.Lock()
	defer e.dlMu.Unlock()
	e.deadLetters.add(dl, e.policy)
}

// EvictedDeadLetters returns how many letters were dropped at a bound
// (DeadLetterLimit, MaxGroupDeadLetters, MaxDeadLetters,
// MaxDeadLetterBytes) to make room for newer ones.
func (e *Engine) EvictedDeadLetters() int64 {
	e.dlMu.Lock()
	defer e.dlMu.Unlock()
	return e.deadLetters.evicted
}

// DeadLetters returns the letters f selects, oldest first.
func (e *Engine) DeadLetters(ctx context.Context, f engine.DeadLetterFilter) ([]engine.DeadLetter, error) {
	e.dlMu.Lock()
	defer e.dlMu.Unlock()
	var out []engine.DeadLetter
	for el := e.deadLetters.all.Front(); el != nil; el = el.Next() {
		if f.Limit > 0 && len(out) >= f.Limit {
			break
		}
		d := el.Value.(*engine.DeadLetter)
		if (f.Group == "" || d.Group == f.Group) && (f.Reason == "" || d.Reason == f.Reason) {
			out = append(out, *d)
		}
	}
	return out, nil
}

// Redrive hands the letters r chooses back: a letter whose group still
// reads its record goes back to that group only, at its own offset with a
// fresh attempt count (see engine.RedriveRequest); one that cannot go back
// in place is appended to its topic again (same key, headers, data and
// priority; a new offset) when r.AppendToTopics is set, and left otherwise.
// With ids it takes those letters (each once, unknown ones skipped),
// restricted to r.Group when set; without ids every letter of r.Group. It
// returns how many letters it handed back and removed, and the append
// errors.
//
// Ids are looked up one at a time through the index, each under its own
// short hold of the dead-letter lock: a request with many ids costs
// O(ids) and never holds the lock for work proportional to the request.
func (e *Engine) Redrive(ctx context.Context, r engine.RedriveRequest) (int, error) {
	if r.Group == "" && len(r.IDs) == 0 {
		return 0, fmt.Errorf("memengine: redrive needs a group or ids: %w", engine.ErrInvalidConfig)
	}
	n := 0
	var errs []error
	for _, el := range e.chooseLetters(r.Group, r.IDs) {
		d := el.Value.(*engine.DeadLetter)
		if d.Group != "" {
			switch e.redeliver(el) {
			case redelivered:
				n++
				continue
			case taken:
				continue
			}
		}
		if !r.AppendToTopics {
			continue
		}
		// Claim the letter first, so concurrent redrives append it once;
		// it is put back if the append fails.
		e.dlMu.Lock()
		live := e.deadLetters.live(el)
		if live {
			e.deadLetters.remove(el)
		}
		e.dlMu.Unlock()
		if !live {
			continue
		}
		_, err := e.Append(ctx, engine.Message{
			Topic:    d.Record.Topic,
			Key:      d.Record.Key,
			Headers:  d.Record.Headers,
			Data:     d.Record.Data,
			Priority: d.Record.Priority,
		})
		if err != nil {
			e.addDeadLetter(d)
			errs = append(errs, err)
			if ctx.Err() != nil || e.closed.Load() {
				break
			}
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// chooseLetters returns the stored letters of group (every one when ids is
// empty) or, with ids, those letters (restricted to group when it is set).
func (e *Engine) chooseLetters(group string, ids []string) []*list.Element {
	var chosen []*list.Element
	if len(ids) == 0 {
		e.dlMu.Lock()
		for el := e.deadLetters.all.Front(); el != nil; el = el.Next() {
			if el.Value.(*engine.DeadLetter).Group == group {
				chosen = append(chosen, el)
			}
		}
		e.dlMu.Unlock()
		return chosen
	}
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		if seen[id] {
			continue
		}
		seen[id] = true
		e.dlMu.Lock()
		el := e.deadLetters.byID[id]
		e.dlMu.Unlock()
		if el != nil && (group == "" || el.Value.(*engine.DeadLetter).Group == group) {
			chosen = append(chosen, el)
		}
	}
	return chosen
}

// redeliverOutcome is what redeliver did with a letter.
type redeliverOutcome int

const (
	redelivered redeliverOutcome = iota // back in its group; the letter is removed
	notInPlace                          // its group or record is gone; the letter stays
	taken                               // another redrive removed the letter first
)

// redeliver hands a max_attempts letter back to its group at its own
// offset, when the group still reads the partition and the log still holds
// the record (the same one: a topic deleted and created again has other
// records at those offsets). The letter is removed under the group's lock,
// so of two redrives at once only one redelivers it.
func (e *Engine) redeliver(el *list.Element) redeliverOutcome {
	d := el.Value.(*engine.DeadLetter)
	g, err := e.lockGroup(d.Group)
	if err != nil {
		return notInPlace
	}
	defer g.mu.Unlock()
	gp := g.parts[partKey{d.Record.Topic, d.Record.Partition}]
	if gp == nil || gp.removed {
		return notInPlace
	}
	p := gp.p
	p.mu.Lock()
	p.trimAge(gp.t.cfg.MaxAge, e.clock.Now())
	var rec *engine.Record
	if off := d.Record.Offset; off >= p.base && off < p.next() {
		rec = p.at(off)
	}
	p.mu.Unlock()
	if rec == nil || !sameRecord(rec, &d.Record) {
		return notInPlace
	}
	e.dlMu.Lock()
	live := e.deadLetters.live(el)
	if live {
		e.deadLetters.remove(el)
	}
	e.dlMu.Unlock()
	if !live {
		return taken
	}
	gp.Redeliver(rec)
	e.pump(gp)
	return redelivered
}

// sameRecord reports whether the log's record r is the one a letter holds
// a copy of.
func sameRecord(r, kept *engine.Record) bool {
	return r.Time.Equal(kept.Time) && r.Key == kept.Key && bytes.Equal(r.Data, kept.Data)
}
