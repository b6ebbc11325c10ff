package jsengine

// Group lifecycle and the group options that live in the definition:
// the group window (MaxInFlight), member windows, graceful hand-back,
// DeleteGroup and idle expiry.
//
// A group is deleted by removing its definition and its positions from the
// group bucket; every node sees the definition go (groupGone) and drops
// its local state and members. Idle expiry is driven by each node: while
// the registry shows no member of a group on any node, every node arms a
// timer of GroupPolicy.IdleTTL, and whichever fires first deletes the
// group if it is still memberless. A restarted node arms it afresh, so a
// group lives at least IdleTTL after its last member left.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/groupstate"
)

// window is a group's window per partition.
func (e *Engine) window(def groupDef) int { return cmp.Or(def.MaxInFlight, e.policy.MaxInFlight) }

// checkWindow fails with engine.ErrGroupConflict when req asks for a window
// other than the group's.
func (e *Engine) checkWindow(req engine.JoinRequest, def groupDef) error {
	if req.MaxInFlight != 0 && req.MaxInFlight != e.window(def) {
		return fmt.Errorf("jsengine: group %q is fixed to max in flight %d: %w",
			req.Group, e.window(def), engine.ErrGroupConflict)
	}
	return nil
}

// pumpMember pumps m's partitions other than from: m had been held back
// by its window and has room again. Caller holds gmu.
func (e *Engine) pumpMember(g *group, m *groupstate.Member, from *gpart) {
	for _, o := range g.order {
		if o != from && o.member == m {
			e.pump(o)
		}
	}
}

// idleGroup reports whether no node has a member of g. Caller holds gmu.
func (e *Engine) idleGroup(g *group) bool { return len(e.reg[g.name]) == 0 }

// armIdle starts g's idle expiry when no node has a member of it and it is
// not armed yet. Caller holds gmu.
func (e *Engine) armIdle(g *group) {
	if !e.idleGroup(g) {
		e.disarmIdle(g)
		return
	}
	if g.idle != nil || e.policy.IdleTTL < 0 || e.closed.Load() {
		return
	}
	gen, name := g.idleGen, g.name
	g.idle = e.afterFunc(e.policy.IdleTTL, func() { e.expireIdle(name, gen) })
}

// disarmIdle stops g's idle expiry. Caller holds gmu.
func (e *Engine) disarmIdle(g *group) {
	g.idleGen++
	if g.idle != nil {
		g.idle.Stop()
		g.idle = nil
	}
}

// expireIdle deletes the group if it is still the memberless one whose
// expiry generation gen was armed.
func (e *Engine) expireIdle(name string, gen uint64) {
	e.gmu.Lock()
	g := e.groups[name]
	ok := g != nil && g.idleGen == gen && e.idleGroup(g)
	if g != nil && ok {
		g.idle = nil
	}
	e.gmu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.DeleteGroup(ctx, name); err != nil && !errors.Is(err, engine.ErrUnknownGroup) {
		e.log.Warn("jsengine: expire idle group", "group", name, "err", err)
	}
}

// DeleteGroup removes a group's definition, positions and member
// registrations from the buckets, and its state on this node; other nodes
// drop theirs when they see the definition go. It fails with an error
// wrapping engine.ErrUnknownGroup when there is no such group.
//
// The positions are listed before anything is removed, so a listing that
// is not answered fails the call with the group whole; and a call that
// finds the definition gone but positions left (a delete whose purges
// failed part-way) purges them and succeeds, so the caller's retry
// finishes the delete: positions left behind would be taken up by a group
// made again under the name.
func (e *Engine) DeleteGroup(ctx context.Context, name string) (err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	if err := e.reachable(); err != nil {
		return err
	}
	_, err = e.groupKV.Get(ctx, defKey(name))
	defined := true
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		e.gmu.Lock()
		defined = e.groups[name] != nil
		e.gmu.Unlock()
	case err != nil:
		return unavailable("delete group", err)
	}
	var positions []string
	lister, err := e.groupKV.ListKeysFiltered(ctx, "c."+enc(name)+".>")
	if err != nil {
		return unavailable("delete group", err)
	}
	for k := range lister.Keys() {
		positions = append(positions, k)
	}
	if !defined && len(positions) == 0 {
		return groupErr(name)
	}
	e.gmu.Lock()
	members := slices.Collect(maps.Keys(e.reg[name]))
	e.dropGroup(name)
	e.gmu.Unlock()
	if err := e.groupKV.Delete(ctx, defKey(name)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return unavailable("delete group", err)
	}
	for _, k := range positions {
		if err := e.groupKV.Purge(ctx, k); err != nil {
			return unavailable("delete group", err)
		}
	}
	// A member of another node may have committed a partition's first
	// position before it saw the definition go: a second listing finds it.
	if lister, err = e.groupKV.ListKeysFiltered(ctx, "c."+enc(name)+".>"); err != nil {
		return unavailable("delete group", err)
	}
	for k := range lister.Keys() {
		if err := e.groupKV.Purge(ctx, k); err != nil {
			return unavailable("delete group", err)
		}
	}
	for _, id := range members {
		_ = e.liveKV.Delete(ctx, memberKey(name, id))
	}
	return nil
}

// groupGone handles the deletion of a group bucket key: the definition of
// a deleted group.
func (e *Engine) groupGone(key string) {
	parts := strings.Split(key, ".")
	if parts[0] != "d" || len(parts) != 2 {
		return
	}
	e.gmu.Lock()
	defer e.gmu.Unlock()
	e.dropGroup(dec(parts[1]))
}

// dropGroup forgets a group on this node: its cursors stop, its members
// here lose their leases. Caller holds gmu.
func (e *Engine) dropGroup(name string) {
	g := e.groups[name]
	if g == nil {
		return
	}
	e.disarmIdle(g)
	for _, gp := range g.order {
		gp.dropWindow()
		gp.removed = true
		gp.holding = false
		delete(e.dirty, gp)
		gp.p.gparts = slices.DeleteFunc(gp.p.gparts, func(x *gpart) bool { return x == gp })
		e.track(gp)
	}
	delete(e.groups, name)
	delete(e.reg, name)
	for _, gp := range g.order {
		e.updateFloor(gp.p)
	}
}

// HandBack removes the listed members of this node in one step: each
// group loses all of them before it rebalances, so no record goes to a
// member leaving with them, and what they held goes back Ready with its
// last attempt not counted. Their registrations are deleted afterwards, so
// other nodes take over the partitions. A delivery listed as unsent does
// not count as an attempt.
func (e *Engine) HandBack(ctx context.Context, refs []engine.MemberRef) (err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	var gone []engine.MemberRef
	e.gmu.Lock()
	byGroup := make(map[string][]*groupstate.Member)
	unsent := make(map[*groupstate.Member]groupstate.Unsent)
	for _, r := range refs {
		g := e.groups[r.Group]
		if g == nil || g.local[r.Member] == nil {
			continue
		}
		m := g.local[r.Member]
		byGroup[r.Group] = append(byGroup[r.Group], m)
		unsent[m] = groupstate.NewUnsent(r.AllUnsent())
		delete(g.local, r.Member)
		delete(e.reg[r.Group], r.Member)
		gone = append(gone, r)
	}
	for name, ms := range byGroup {
		g := e.groups[name]
		for _, gp := range g.order {
			for _, m := range ms {
				e.flights.HandBack(gp, &gp.Window, m, unsent[m].Of(gp.t.name, gp.p.index))
			}
		}
		e.rebalance(g)
	}
	e.gmu.Unlock()
	var errs []error
	for _, r := range gone {
		if err := e.liveKV.Delete(ctx, memberKey(r.Group, r.Member)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return unavailable("hand back", errors.Join(errs...))
	}
	return nil
}
