package memengine

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/groupstate"
	"github.com/switchyard/switchyard/trie"
)

// group is a consumer group. Every field, and everything reachable from it,
// is guarded by Engine.gmu.
type group struct {
	name    string
	pattern string
	filter  map[string]string
	from    engine.Start
	members map[string]*groupstate.Member
	parts   map[partKey]*gpart
	order   []*gpart // parts sorted by (topic, partition); rebuilt by rebalance
}

type partKey struct {
	topic     string
	partition int
}

// gpart is a group's cursor on one partition: its flight window and the
// partition it reads.
type gpart struct {
	g       *group
	t       *topic
	p       *partition
	member  *groupstate.Member // assigned member; nil when the group has none
	removed bool               // the topic was deleted or the group dropped it

	groupstate.Window
}

// addTopicToGroup gives g a cursor on every partition of t. At group
// creation the cursor starts where the join asked; on a topic that appears
// later it starts at the earliest record (or by time for a time start), so
// records appended after the group existed are always seen.
func (e *Engine) addTopicToGroup(g *group, t *topic, atCreation bool) {
	if t.deleted.Load() {
		return
	}
	start := engine.Start{Kind: engine.StartEarliest}
	if atCreation || g.from.Kind == engine.StartTime {
		start = g.from
	}
	now := e.clock.Now()
	added := false
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
		g.parts[key] = gp
		p.groupParts = append(p.groupParts, gp)
		e.updateFloor(p)
		added = true
	}
	if added {
		t.readers.Add(1)
	}
}

// removeTopicFromGroup drops g's cursors on t and reports whether it had any.
func (e *Engine) removeTopicFromGroup(g *group, t *topic) bool {
	removed := false
	for _, p := range t.parts {
		key := partKey{t.name, p.index}
		gp := g.parts[key]
		if gp == nil || gp.t != t {
			continue
		}
		gp.Drop()
		gp.removed = true
		delete(g.parts, key)
		p.groupParts = slices.DeleteFunc(p.groupParts, func(x *gpart) bool { return x == gp })
		e.updateFloor(p)
		removed = true
	}
	if removed {
		t.readers.Add(-1)
	}
	return removed
}

// updateFloor publishes the lowest committed offset of p's groups to the
// block policy, waking blocked appenders when there may be room.
func (e *Engine) updateFloor(p *partition) {
	floor := int64(math.MaxInt64)
	for _, gp := range p.groupParts {
		floor = min(floor, gp.Committed)
	}
	p.mu.Lock()
	wake := len(p.groupParts) < p.readers || floor > p.floor
	p.readers, p.floor = len(p.groupParts), floor
	if wake && p.waiters > 0 {
		close(p.space)
		p.space = make(chan struct{})
	}
	p.mu.Unlock()
}

// rebalance assigns g's partitions, sorted by (topic, partition),
// round-robin over its members sorted by ID, then delivers. A partition that
// moves keeps its old member's in-flight records; the new member gets
// nothing on it until they are acked, nacked or time out.
func (e *Engine) rebalance(g *group) {
	g.order = slices.AppendSeq(g.order[:0], maps.Values(g.parts))
	slices.SortFunc(g.order, func(a, b *gpart) int {
		return cmp.Or(strings.Compare(a.t.name, b.t.name), cmp.Compare(a.p.index, b.p.index))
	})
	ids := slices.Sorted(maps.Keys(g.members))
	for i, gp := range g.order {
		if len(ids) == 0 {
			gp.member = nil
			continue
		}
		gp.member = g.members[ids[i%len(ids)]]
	}
	for _, gp := range g.order {
		e.pump(gp)
	}
}

// pump brings gp up to date: it fast-forwards past trimmed records (telling
// the member), delivers ready flights and new records up to MaxInFlight
// outstanding, and advances the committed offset. Caller holds gmu.
func (e *Engine) pump(gp *gpart) {
	if gp.removed || e.closed.Load() {
		return
	}
	g, p := gp.g, gp.p
	before := gp.Committed

	p.mu.Lock()
	p.trimAge(gp.t.cfg.MaxAge, e.clock.Now())
	skipFrom, skipTo := gp.SkipTo(p.base)
	m := gp.member
	outstanding, _, draining := gp.Load(m)
	if m != nil && !draining {
		gp.Fill(outstanding, e.policy.MaxInFlight, p.next(), g.filter, p.at)
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
		e.updateFloor(p)
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

// deadLetter is the group machine's dead-letter store: memory never
// refuses a letter.
func (e *Engine) deadLetter(dl *engine.DeadLetter, _ func(error)) error {
	e.addDeadLetter(dl)
	return nil
}

func groupErr(name string) error {
	return fmt.Errorf("memengine: group %q: %w", name, engine.ErrUnknownGroup)
}

// Join adds a member to a group, creating the group on first join fixed to
// req's Pattern and Filter, and rebalances. Consumer callbacks are made
// with the group lock held: c must not call the engine from them.
func (e *Engine) Join(ctx context.Context, req engine.JoinRequest, c engine.Consumer) (string, error) {
	if e.closed.Load() {
		return "", closedErr()
	}
	switch {
	case req.Group == "":
		return "", fmt.Errorf("memengine: empty group name: %w", engine.ErrInvalidConfig)
	case c == nil:
		return "", fmt.Errorf("memengine: nil consumer: %w", engine.ErrInvalidConfig)
	}
	if err := trie.ValidatePattern(req.Pattern); err != nil {
		return "", fmt.Errorf("memengine: %w: %w", engine.ErrInvalidConfig, err)
	}
	e.gmu.Lock()
	defer e.gmu.Unlock()
	if e.closed.Load() {
		return "", closedErr()
	}
	g := e.groups[req.Group]
	if g == nil {
		g = &group{
			name:    req.Group,
			pattern: req.Pattern,
			filter:  maps.Clone(req.Filter),
			from:    req.From,
			members: make(map[string]*groupstate.Member),
			parts:   make(map[partKey]*gpart),
		}
		e.groups[req.Group] = g
		e.topics.Range(func(_, v any) bool {
			if t := v.(*topic); trie.Matches(g.pattern, t.name) {
				e.addTopicToGroup(g, t, true)
			}
			return true
		})
	} else if g.pattern != req.Pattern || !maps.Equal(g.filter, req.Filter) {
		return "", fmt.Errorf("memengine: group %q is fixed to pattern %q and filter %v: %w",
			g.name, g.pattern, g.filter, engine.ErrGroupConflict)
	}
	id := req.Member
	if id == "" {
		id = e.newID()
	}
	if g.members[id] != nil {
		return "", fmt.Errorf("memengine: group %q already has member %q: %w", g.name, id, engine.ErrInvalidConfig)
	}
	g.members[id] = &groupstate.Member{ID: id, Consumer: c}
	e.rebalance(g)
	return id, nil
}

// Leave removes a member and rebalances. Records it held go back at once:
// redelivered without backoff to the partition's next member, or
// dead-lettered when that was their last attempt.
func (e *Engine) Leave(ctx context.Context, groupName, memberID string) error {
	e.gmu.Lock()
	defer e.gmu.Unlock()
	g := e.groups[groupName]
	if g == nil {
		return groupErr(groupName)
	}
	m := g.members[memberID]
	if m == nil {
		return fmt.Errorf("memengine: group %q member %q: %w", groupName, memberID, engine.ErrUnknownMember)
	}
	delete(g.members, memberID)
	for _, gp := range g.order {
		e.flights.Release(gp, &gp.Window, m)
	}
	e.rebalance(g)
	return nil
}

func (e *Engine) inFlight(groupName string, pos engine.Position) (*gpart, *groupstate.Flight, error) {
	g := e.groups[groupName]
	if g == nil {
		return nil, nil, groupErr(groupName)
	}
	if gp := g.parts[partKey{pos.Topic, pos.Partition}]; gp != nil {
		if f := gp.InFlightAt(pos.Offset); f != nil {
			return gp, f, nil
		}
	}
	return nil, nil, fmt.Errorf("memengine: group %q %s/%d@%d: %w",
		groupName, pos.Topic, pos.Partition, pos.Offset, engine.ErrNotInFlight)
}

// Ack completes a delivery; the committed offset moves past every
// contiguous completed record.
func (e *Engine) Ack(ctx context.Context, groupName string, pos engine.Position) error {
	e.gmu.Lock()
	defer e.gmu.Unlock()
	gp, f, err := e.inFlight(groupName, pos)
	if err != nil {
		return err
	}
	f.Ack()
	e.pump(gp)
	return nil
}

// Nack fails a delivery: it is redelivered after the policy's backoff for
// this attempt, or dead-lettered with reason as its error after the last.
func (e *Engine) Nack(ctx context.Context, groupName string, pos engine.Position, reason string) error {
	e.gmu.Lock()
	defer e.gmu.Unlock()
	gp, f, err := e.inFlight(groupName, pos)
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
// is retained.
func (e *Engine) Seek(ctx context.Context, groupName, topicName string, partition int, to engine.Start) error {
	e.gmu.Lock()
	defer e.gmu.Unlock()
	g := e.groups[groupName]
	if g == nil {
		return groupErr(groupName)
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
		e.updateFloor(gp.p)
		e.pump(gp)
	}
	return nil
}

// Groups returns every group, sorted by name.
func (e *Engine) Groups(ctx context.Context) ([]engine.GroupInfo, error) {
	e.gmu.Lock()
	defer e.gmu.Unlock()
	names := slices.Sorted(maps.Keys(e.groups))
	out := make([]engine.GroupInfo, 0, len(names))
	for _, n := range names {
		out = append(out, e.groupInfo(e.groups[n]))
	}
	return out, nil
}

// Group describes one group: members sorted by ID with their partitions,
// and per partition the member, committed offset, lag, records leased to a
// member (InFlight) and records skipped by retention.
func (e *Engine) Group(ctx context.Context, name string) (engine.GroupInfo, error) {
	e.gmu.Lock()
	defer e.gmu.Unlock()
	g := e.groups[name]
	if g == nil {
		return engine.GroupInfo{}, groupErr(name)
	}
	return e.groupInfo(g), nil
}

func (e *Engine) groupInfo(g *group) engine.GroupInfo {
	info := engine.GroupInfo{Name: g.name, Pattern: g.pattern, Filter: maps.Clone(g.filter)}
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
