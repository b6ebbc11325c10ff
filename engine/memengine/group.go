package memengine

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/groupstate"
	"github.com/switchyard/switchyard/trie"
)

// group is a consumer group. mu guards every field below it and everything
// reachable from them: the group's members, cursors and flight windows.
type group struct {
	name        string
	pattern     string
	filter      map[string]string
	from        engine.Start
	maxInFlight int // the group's window per partition

	mu      sync.Mutex
	deleted bool // removed by DeleteGroup or idle expiry; the group is gone
	members map[string]*groupstate.Member
	parts   map[partKey]*gpart
	order   []*gpart // parts sorted by (topic, partition); rebuilt by rebalance
	idle    engine.Timer
	idleGen uint64 // bumped whenever idle is armed or disarmed
}

type partKey struct {
	topic     string
	partition int
}

// gpart is a group's cursor on one partition: its flight window and the
// partition it reads. Fields are guarded by g.mu, except floor, which the
// partition reads under its own lock.
type gpart struct {
	g       *group
	t       *topic
	p       *partition
	member  *groupstate.Member // assigned member; nil when the group has none
	removed bool               // the topic was deleted or the group dropped it
	active  bool               // listed in p.active: the group delivers it
	pumped  bool               // listed in p.pumped: appends pump it
	// parked: appends found the cursor unable to take a record parkAfter
	// times in a row (its window or its member's full, or draining), so
	// they no longer pump it; the ack, nack, timeout or rebalance that
	// gives it room again takes it back (pump). useless counts those
	// appends.
	parked  bool
	useless uint8

	floor atomic.Int64 // Committed, published for the block policy

	groupstate.Window
}

// addTopicToGroup gives g a cursor on every partition of t. At group
// creation the cursor starts where the join asked; on a topic that appears
// later it starts at the earliest record (or by time for a time start), so
// records appended after the group existed are always seen. Caller holds
// g.mu.
func (e *Engine) addTopicToGroup(g *group, t *topic, atCreation bool) {
	if t.deleted.Load() {
		return
	}
	start := engine.Start{Kind: engine.StartEarliest}
	if atCreation || g.from.Kind == engine.StartTime {
		start = g.from
	}
	now := e.clock.Now()
	for _, p := range t.parts {
		key := partKey{t.name, p.index}
		if old := g.parts[key]; old != nil {
			if old.t == t {
				continue
			}
			e.removeTopicFromGroup(g, old.t) // a deleted topic of the same name
		}
		p.mu.Lock()
		p.trimAge(t.cfg.MaxAge, now)
		off := p.resolve(start)
		p.mu.Unlock()
		gp := &gpart{g: g, t: t, p: p, Window: groupstate.Window{Committed: off, Next: off}}
		gp.floor.Store(off)
		g.parts[key] = gp
	}
}

// removeTopicFromGroup drops g's cursors on t and reports whether it had
// any. Caller holds g.mu.
func (e *Engine) removeTopicFromGroup(g *group, t *topic) bool {
	removed := false
	for _, p := range t.parts {
		key := partKey{t.name, p.index}
		gp := g.parts[key]
		if gp == nil || gp.t != t {
			continue
		}
		e.dropCursor(gp)
		delete(g.parts, key)
		removed = true
	}
	return removed
}

// dropCursor stops gp for good. Caller holds g.mu.
func (e *Engine) dropCursor(gp *gpart) {
	gp.Drop()
	gp.removed = true
	e.setActive(gp, false)
}

// setActive lists gp among the cursors its partition's appends pump (and
// whose position holds back a block-policy partition), or takes it off the
// list. Only cursors assigned to a member are listed: a group with no
// member costs an append nothing and holds nothing back. Caller holds g.mu.
func (e *Engine) setActive(gp *gpart, on bool) {
	if gp.active == on {
		return
	}
	gp.active = on
	gp.parked, gp.useless = false, 0
	p := gp.p
	p.mu.Lock()
	p.active.Store(relist(p.active.Load(), gp, on))
	listPumped(gp)
	e.updateFloorLocked(p)
	p.mu.Unlock()
}

// parkAfter is how many appends in a row must find a cursor unable to take
// a record before appends stop pumping it. A member that keeps up takes
// each append's record, so it is never parked; one whose window stays full
// (it acks slower than records arrive, or not at all, like an abandoned
// pull member) costs an append nothing once parked: its acks, nacks and
// timeouts pump it as before. A parked cursor whose leased records
// retention trims learns of the gap at its next ack or timeout.
const parkAfter = 8

// listPumped lists gp in p.pumped, or takes it off, as gp.active and
// gp.parked say. Caller holds g.mu and p.mu.
func listPumped(gp *gpart) {
	if want := gp.active && !gp.parked; want != gp.pumped {
		gp.pumped = want
		gp.p.pumped.Store(relist(gp.p.pumped.Load(), gp, want))
	}
}

// relist returns a copy of *cur with gp added (on) or removed; nil when
// that is empty.
func relist(cur *[]*gpart, gp *gpart, on bool) *[]*gpart {
	var next []*gpart
	if cur != nil {
		next = slices.Clone(*cur)
	}
	if on {
		next = append(next, gp)
	} else {
		next = slices.DeleteFunc(next, func(x *gpart) bool { return x == gp })
	}
	if len(next) == 0 {
		return nil
	}
	return &next
}

// park takes gp off or puts it back on the cursors appends pump. Caller
// holds g.mu.
func (e *Engine) park(gp *gpart, on bool) {
	gp.parked = on
	gp.p.mu.Lock()
	listPumped(gp)
	gp.p.mu.Unlock()
}

// pumpAppended pumps gp for an appended record and parks it once
// parkAfter appends in a row found it unable to take one. Caller holds
// g.mu.
func (e *Engine) pumpAppended(gp *gpart) {
	if e.pump(gp) {
		return
	}
	if gp.useless < parkAfter {
		gp.useless++
	}
	if gp.useless >= parkAfter && gp.active && !gp.parked {
		e.park(gp, true)
	}
}

// updateFloor publishes gp's committed offset to the block policy of its
// partition, waking blocked appenders when there may be room. Caller holds
// g.mu.
func (e *Engine) updateFloor(gp *gpart) {
	gp.floor.Store(gp.Committed)
	if !gp.active {
		return
	}
	gp.p.mu.Lock()
	e.updateFloorLocked(gp.p)
	gp.p.mu.Unlock()
}

// updateFloorLocked recomputes p's block floor from its active cursors.
// Caller holds p.mu.
func (e *Engine) updateFloorLocked(p *partition) {
	floor := int64(math.MaxInt64)
	readers := 0
	if cur := p.active.Load(); cur != nil {
		readers = len(*cur)
		for _, gp := range *cur {
			floor = min(floor, gp.floor.Load())
		}
	}
	wake := readers < p.readers || floor > p.floor
	p.readers, p.floor = readers, floor
	if wake && p.waiters > 0 {
		close(p.space)
		p.space = make(chan struct{})
	}
}

// rebalance assigns g's partitions, sorted by (topic, partition),
// round-robin over its members sorted by ID, then delivers. A partition that
// moves keeps its old member's in-flight records; the new member gets
// nothing on it until they are acked, nacked or time out. Caller holds g.mu.
func (e *Engine) rebalance(g *group) {
	g.order = slices.AppendSeq(g.order[:0], maps.Values(g.parts))
	slices.SortFunc(g.order, func(a, b *gpart) int {
		return cmp.Or(strings.Compare(a.t.name, b.t.name), cmp.Compare(a.p.index, b.p.index))
	})
	ids := slices.Sorted(maps.Keys(g.members))
	for i, gp := range g.order {
		if len(ids) == 0 {
			gp.member = nil
		} else {
			gp.member = g.members[ids[i%len(ids)]]
		}
		e.setActive(gp, gp.member != nil)
	}
	for _, gp := range g.order {
		e.pump(gp)
	}
}

// pump brings gp up to date: it fast-forwards past trimmed records (telling
// the member), delivers ready flights and new records up to the group's
// window outstanding and as many as the member may hold, and advances the
// committed offset. When the member was held back and has room again, its
// other partitions are pumped too. It reports whether gp could take
// another record now (and so whether an append should pump it); a parked
// cursor that could is listed again. Caller holds g.mu.
func (e *Engine) pump(gp *gpart) (room bool) {
	if gp.removed || e.closed.Load() {
		return false
	}
	g, p := gp.g, gp.p
	before := gp.Committed

	p.mu.Lock()
	p.trimAge(gp.t.cfg.MaxAge, e.clock.Now())
	skipFrom, skipTo := gp.SkipTo(p.base)
	m := gp.member
	outstanding, _, draining := gp.Load(m)
	if m != nil && !draining {
		outstanding = gp.Fill(outstanding, g.maxInFlight, p.next(), g.filter, p.at)
	}
	p.mu.Unlock()

	if skipTo > skipFrom && m != nil {
		m.Consumer.Skipped(g.name, gp.t.name, p.index, skipFrom, skipTo)
	}
	if m != nil && !draining {
		e.flights.DeliverReady(gp, &gp.Window, m)
	}
	gp.Advance()
	if gp.Committed != before {
		e.updateFloor(gp)
	}
	room = m != nil && !draining && outstanding < g.maxInFlight && m.Room()
	if room {
		gp.useless = 0
		if gp.parked {
			e.park(gp, false)
		}
	}
	if m != nil && m.Settled() {
		for _, o := range g.order {
			if o != gp && o.member == m {
				e.pump(o)
			}
		}
	}
	return room
}

// newMachine returns the group state machine wired to e. Timer callbacks
// take the cursor's group lock and do nothing once the cursor is removed or
// e is closed.
func (e *Engine) newMachine() groupstate.Machine[*gpart] {
	return groupstate.Machine[*gpart]{
		Policy:     e.policy,
		Clock:      e.clock,
		NewID:      e.newID,
		Group:      func(gp *gpart) string { return gp.g.name },
		LockOf:     func(gp *gpart) sync.Locker { return &gp.g.mu },
		AfterFunc:  e.afterFunc,
		Active:     func(gp *gpart) bool { return !gp.removed && !e.closed.Load() },
		Pump:       func(gp *gpart) { e.pump(gp) },
		DeadLetter: e.deadLetter,
	}
}

// deadLetter is the group machine's dead-letter store: memory never
// refuses a letter.
func (e *Engine) deadLetter(dl *engine.DeadLetter, _ func(error)) error {
	e.addDeadLetter(dl)
	return nil
}

func groupErr(name string) error {
	return fmt.Errorf("memengine: group %q: %w", name, engine.ErrUnknownGroup)
}

// lookupGroup returns the group named name, or nil.
func (e *Engine) lookupGroup(name string) *group {
	e.gmu.Lock()
	defer e.gmu.Unlock()
	return e.groups[name]
}

// lockGroup returns the group named name with its lock held, or an error
// wrapping engine.ErrUnknownGroup.
func (e *Engine) lockGroup(name string) (*group, error) {
	g := e.lookupGroup(name)
	if g == nil {
		return nil, groupErr(name)
	}
	g.mu.Lock()
	if g.deleted {
		g.mu.Unlock()
		return nil, groupErr(name)
	}
	return g, nil
}

// Join adds a member to a group, creating the group on first join fixed to
// req's Pattern, Filter and MaxInFlight, and rebalances. Consumer callbacks
// are made with the group lock held: c must not call the engine from them.
func (e *Engine) Join(ctx context.Context, req engine.JoinRequest, c engine.Consumer) (string, error) {
	if e.closed.Load() {
		return "", closedErr()
	}
	if err := req.Validate(); err != nil {
		return "", fmt.Errorf("memengine: %w", err)
	}
	if c == nil {
		return "", fmt.Errorf("memengine: nil consumer: %w", engine.ErrInvalidConfig)
	}
	if err := trie.ValidatePattern(req.Pattern); err != nil {
		return "", fmt.Errorf("memengine: %w: %w", engine.ErrInvalidConfig, err)
	}
	for range 3 { // retried when the group is deleted under the join
		g := e.groupFor(req)
		if g == nil {
			return "", closedErr()
		}
		g.mu.Lock()
		if g.deleted {
			g.mu.Unlock()
			continue
		}
		id, err := e.joinLocked(g, req, c)
		g.mu.Unlock()
		return id, err
	}
	return "", fmt.Errorf("memengine: group %q deleted during join: %w", req.Group, engine.ErrUnavailable)
}

// groupFor returns the group req names, creating it (reading every topic
// its pattern matches) when it does not exist; nil once e is closed.
func (e *Engine) groupFor(req engine.JoinRequest) *group {
	e.gmu.Lock()
	defer e.gmu.Unlock()
	if e.closed.Load() {
		return nil
	}
	if g := e.groups[req.Group]; g != nil {
		return g
	}
	g := &group{
		name:        req.Group,
		pattern:     req.Pattern,
		filter:      maps.Clone(req.Filter),
		from:        req.From,
		maxInFlight: cmp.Or(req.MaxInFlight, e.policy.MaxInFlight),
		members:     make(map[string]*groupstate.Member),
		parts:       make(map[partKey]*gpart),
	}
	if len(g.filter) == 0 {
		g.filter = nil
	}
	g.mu.Lock()
	e.groups[req.Group] = g
	_ = e.index.Add(g.pattern, g) // the pattern was validated
	e.topics.Range(func(_, v any) bool {
		if t := v.(*topic); trie.Matches(g.pattern, t.name) {
			e.addTopicToGroup(g, t, true)
		}
		return true
	})
	g.mu.Unlock()
	return g
}

// joinLocked adds a member to g. Caller holds g.mu.
func (e *Engine) joinLocked(g *group, req engine.JoinRequest, c engine.Consumer) (string, error) {
	if g.pattern != req.Pattern || !maps.Equal(g.filter, req.Filter) {
		return "", fmt.Errorf("memengine: group %q is fixed to pattern %q and filter %v: %w",
			g.name, g.pattern, g.filter, engine.ErrGroupConflict)
	}
	if req.MaxInFlight != 0 && req.MaxInFlight != g.maxInFlight {
		return "", fmt.Errorf("memengine: group %q is fixed to max in flight %d: %w",
			g.name, g.maxInFlight, engine.ErrGroupConflict)
	}
	id := req.Member
	if id == "" {
		id = e.newID()
	}
	if strings.Contains(id, engine.AnyMember) {
		return "", fmt.Errorf("memengine: member ID %q contains %q: %w", id, engine.AnyMember, engine.ErrInvalidConfig)
	}
	if g.members[id] != nil {
		return "", fmt.Errorf("memengine: group %q already has member %q: %w", g.name, id, engine.ErrInvalidConfig)
	}
	g.members[id] = &groupstate.Member{ID: id, Consumer: c, Limit: req.MaxLeased, LimitBytes: req.MaxLeasedBytes}
	e.disarmIdle(g)
	e.rebalance(g)
	return id, nil
}

// Leave removes a member and rebalances. Records it held go back at once:
// redelivered without backoff to the partition's next member, or
// dead-lettered when that was their last attempt.
func (e *Engine) Leave(ctx context.Context, groupName, memberID string) error {
	g, err := e.lockGroup(groupName)
	if err != nil {
		return err
	}
	defer g.mu.Unlock()
	m := g.members[memberID]
	if m == nil {
		return fmt.Errorf("memengine: group %q member %q: %w", groupName, memberID, engine.ErrUnknownMember)
	}
	delete(g.members, memberID)
	for _, gp := range g.order {
		e.flights.Release(gp, &gp.Window, m)
	}
	e.rebalance(g)
	e.armIdle(g)
	return nil
}

// HandBack removes the listed members group by group, each group in one
// step: what they held goes back Ready (a delivery listed as unsent does
// not count as an attempt), and no record goes to a member that is leaving
// with them.
func (e *Engine) HandBack(ctx context.Context, refs []engine.MemberRef) error {
	byGroup := make(map[string][]engine.MemberRef)
	for _, r := range refs {
		byGroup[r.Group] = append(byGroup[r.Group], r)
	}
	for _, name := range slices.Sorted(maps.Keys(byGroup)) {
		g, err := e.lockGroup(name)
		if err != nil {
			continue
		}
		var gone []*groupstate.Member
		var unsent []groupstate.Unsent
		for _, r := range byGroup[name] {
			if m := g.members[r.Member]; m != nil {
				gone = append(gone, m)
				unsent = append(unsent, groupstate.NewUnsent(r.AllUnsent()))
				delete(g.members, r.Member)
			}
		}
		if len(gone) > 0 {
			for _, gp := range g.order {
				for i, m := range gone {
					e.flights.HandBack(gp, &gp.Window, m, unsent[i].Of(gp.t.name, gp.p.index))
				}
			}
			e.rebalance(g)
			e.armIdle(g)
		}
		g.mu.Unlock()
	}
	return nil
}

// inFlight returns the cursor and flight of a record leased to member
// ("" for any holder). Caller holds g.mu.
func (e *Engine) inFlight(g *group, member string, pos engine.Position) (*gpart, *groupstate.Flight, error) {
	if gp := g.parts[partKey{pos.Topic, pos.Partition}]; gp != nil {
		if f := gp.InFlightAt(pos.Offset); f != nil && f.HeldBy(member) {
			return gp, f, nil
		}
	}
	return nil, nil, fmt.Errorf("memengine: group %q member %q %s/%d@%d: %w",
		g.name, member, pos.Topic, pos.Partition, pos.Offset, engine.ErrNotInFlight)
}

// Ack completes a delivery leased to member; the committed offset moves
// past every contiguous completed record.
func (e *Engine) Ack(ctx context.Context, groupName, member string, pos engine.Position) error {
	g, err := e.lockGroup(groupName)
	if err != nil {
		return err
	}
	defer g.mu.Unlock()
	gp, f, err := e.inFlight(g, member, pos)
	if err != nil {
		return err
	}
	f.Ack()
	e.pump(gp)
	return nil
}

// Nack fails a delivery leased to member: it is redelivered after the
// policy's backoff for this attempt, or dead-lettered with reason as its
// error after the last.
func (e *Engine) Nack(ctx context.Context, groupName, member string, pos engine.Position, reason string) error {
	g, err := e.lockGroup(groupName)
	if err != nil {
		return err
	}
	defer g.mu.Unlock()
	gp, f, err := e.inFlight(g, member, pos)
	if err != nil {
		return err
	}
	e.flights.Fail(gp, f, reason, true)
	e.pump(gp)
	return nil
}

// Seek moves the group's position on one partition, or on every partition
// of the topic when partition < 0, dropping in-flight records (acking them
// afterwards fails with engine.ErrNotInFlight). Offsets are clamped to what
// is retained. Once Close has begun it fails with engine.ErrClosed: Close
// sets closed before it takes each group's lock to hand its leases back,
// so a Seek that holds the lock either finds closed set or is done before
// Close reaches the group.
func (e *Engine) Seek(ctx context.Context, groupName, topicName string, partition int, to engine.Start) error {
	if e.closed.Load() {
		return closedErr()
	}
	g, err := e.lockGroup(groupName)
	if err != nil {
		return err
	}
	defer g.mu.Unlock()
	if e.closed.Load() {
		return closedErr()
	}
	t := e.lookup(topicName)
	if t == nil {
		return e.topicErr(topicName)
	}
	if partition >= len(t.parts) {
		return fmt.Errorf("memengine: topic %q partition %d: %w", topicName, partition, engine.ErrUnknownPartition)
	}
	var gps []*gpart
	for _, p := range t.parts {
		if partition >= 0 && p.index != partition {
			continue
		}
		gp := g.parts[partKey{t.name, p.index}]
		if gp == nil || gp.t != t {
			return fmt.Errorf("memengine: group %q (pattern %q) does not read topic %q: %w",
				g.name, g.pattern, t.name, engine.ErrUnknownTopic)
		}
		gps = append(gps, gp)
	}
	now := e.clock.Now()
	for _, gp := range gps {
		gp.p.mu.Lock()
		gp.p.trimAge(t.cfg.MaxAge, now)
		off := gp.p.resolve(to)
		gp.p.mu.Unlock()
		gp.Drop()
		gp.Committed, gp.Next = off, off
		e.setActive(gp, gp.member != nil)
		e.updateFloor(gp)
		e.pump(gp)
	}
	return nil
}

// Groups returns every group, sorted by name.
func (e *Engine) Groups(ctx context.Context) ([]engine.GroupInfo, error) {
	e.gmu.Lock()
	gs := slices.Collect(maps.Values(e.groups))
	e.gmu.Unlock()
	slices.SortFunc(gs, func(a, b *group) int { return strings.Compare(a.name, b.name) })
	out := make([]engine.GroupInfo, 0, len(gs))
	for _, g := range gs {
		g.mu.Lock()
		if !g.deleted {
			out = append(out, e.groupInfo(g))
		}
		g.mu.Unlock()
	}
	return out, nil
}

// Group describes one group: members sorted by ID with their partitions,
// and per partition the member, committed offset, lag, records leased to a
// member (InFlight) and records skipped by retention.
func (e *Engine) Group(ctx context.Context, name string) (engine.GroupInfo, error) {
	g, err := e.lockGroup(name)
	if err != nil {
		return engine.GroupInfo{}, err
	}
	defer g.mu.Unlock()
	return e.groupInfo(g), nil
}

// groupInfo describes g. Caller holds g.mu.
func (e *Engine) groupInfo(g *group) engine.GroupInfo {
	info := engine.GroupInfo{Name: g.name, Pattern: g.pattern, Filter: maps.Clone(g.filter), MaxInFlight: g.maxInFlight}
	byMember := make(map[string]*engine.MemberInfo, len(g.members))
	for _, id := range slices.Sorted(maps.Keys(g.members)) {
		info.Members = append(info.Members, engine.MemberInfo{ID: id})
	}
	for i := range info.Members {
		byMember[info.Members[i].ID] = &info.Members[i]
	}
	for _, gp := range g.order {
		gp.p.mu.Lock()
		next := gp.p.next()
		gp.p.mu.Unlock()
		inflight := gp.Leased()
		var mid string
		if gp.member != nil {
			mid = gp.member.ID
			mi := byMember[mid]
			mi.Partitions = append(mi.Partitions, engine.Position{Topic: gp.t.name, Partition: gp.p.index})
		}
		info.Partitions = append(info.Partitions, engine.GroupPartition{
			Topic:     gp.t.name,
			Partition: gp.p.index,
			Member:    mid,
			Committed: gp.Committed,
			Next:      next,
			Lag:       max(next-gp.Committed, 0),
			InFlight:  inflight,
			Skipped:   gp.Skipped,
		})
	}
	return info
}
