package jsengine

// The public group API: Join, Leave, Ack, Nack, Seek, Groups and Group.
// Acks and nacks are handled by the holding node; one made on another
// node is forwarded to the holder (remote.go).

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/groupstate"
	"github.com/switchyard/switchyard/trie"
)

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
	if err := req.Validate(); err != nil {
		return "", fmt.Errorf("jsengine: %w", err)
	}
	if c == nil {
		return "", fmt.Errorf("jsengine: nil consumer: %w", engine.ErrInvalidConfig)
	}
	if err := trie.ValidatePattern(req.Pattern); err != nil {
		return "", fmt.Errorf("jsengine: %w: %w", engine.ErrInvalidConfig, err)
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
// holding node adopts it. Once Close has begun it fails with
// engine.ErrClosed, and so does a Seek that Close cut short (onConn).
func (e *Engine) Seek(ctx context.Context, groupName, topicName string, partition int, to engine.Start) (err error) {
	if e.closed.Load() {
		return closedErr()
	}
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
			gp.stored.Done = nil                       // nor what was settled past the old offset
			gp.seeks++                                 // nor what a write under way carries (syncApply)
			e.updateFloor(gp.p)
			e.markDirty(gp)
			e.pump(gp)
			e.gmu.Unlock()
			return nil
		}
		v, rev, loaded, rel := gp.stored, gp.storedRev, gp.loaded, gp.rel
		// This node let the partition go and its release is still to be
		// written (no claim of its own is coming): the Seek is the
		// release.
		release := v.Holder == e.node && !gp.acquiring
		// Until the Seek is written and its outcome applied, the committer
		// writes nothing here: a claim or release it wrote meanwhile would
		// start from the pending release and undo the Seek.
		gp.seeking++
		e.gmu.Unlock()
		v.Off, v.By, v.Leases, v.Redo, v.Asked, v.Done = off, e.node, nil, nil, nil, nil
		if release {
			v.Holder = ""
		}
		var err error
		var newRev uint64
		if loaded {
			newRev, err = e.groupKV.Update(ctx, gp.key, v.marshal(), rev)
		} else {
			newRev, err = e.groupKV.Create(ctx, gp.key, v.marshal())
		}
		e.gmu.Lock()
		gp.seeking--
		if err == nil && rel != nil && gp.rel == rel {
			// A release or claim of this node still to be written starts
			// from the Seek (see releaseVal), not from where it let go.
			gp.rel = nil
		}
		if err == nil && !gp.removed {
			e.applyStored(gp, v, newRev)
		}
		if !gp.removed {
			e.markDirty(gp) // what the committer left for the Seek
		}
		e.gmu.Unlock()
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
