package memengine

// Group lifecycle: deleting a group on request, and expiring groups that
// have had no member for the policy's IdleTTL. A group is deleted with its
// positions; a later Join of the same name creates it afresh.

import (
	"context"
)

// DeleteGroup removes a group, its positions and its members: their leases
// end and later acks fail with engine.ErrUnknownGroup. It fails with an
// error wrapping engine.ErrUnknownGroup when there is no such group.
func (e *Engine) DeleteGroup(ctx context.Context, name string) error {
	e.gmu.Lock()
	defer e.gmu.Unlock()
	g := e.groups[name]
	if g == nil {
		return groupErr(name)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	e.deleteGroupLocked(g)
	return nil
}

// deleteGroupLocked removes g. Caller holds gmu and g.mu.
func (e *Engine) deleteGroupLocked(g *group) {
	g.deleted = true
	e.disarmIdle(g)
	for _, gp := range g.parts {
		e.dropCursor(gp)
	}
	clear(g.parts)
	g.order = nil
	clear(g.members)
	delete(e.groups, g.name)
	e.index.Remove(g.pattern, g)
}

// armIdle starts g's idle expiry when it has no member. Caller holds g.mu.
func (e *Engine) armIdle(g *group) {
	if len(g.members) > 0 || g.deleted || e.policy.IdleTTL < 0 {
		return
	}
	e.disarmIdle(g)
	gen := g.idleGen
	g.idle = e.afterFunc(e.policy.IdleTTL, func() { e.expire(g, gen) })
}

// disarmIdle stops g's idle expiry. Caller holds g.mu.
func (e *Engine) disarmIdle(g *group) {
	g.idleGen++
	if g.idle != nil {
		g.idle.Stop()
		g.idle = nil
	}
}

// expire deletes g if it is still the memberless group whose expiry
// generation gen was armed.
func (e *Engine) expire(g *group, gen uint64) {
	e.gmu.Lock()
	defer e.gmu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.deleted || g.idleGen != gen || len(g.members) > 0 || e.groups[g.name] != g {
		return
	}
	e.deleteGroupLocked(g)
}
