package router

// Consumer groups made through this gateway are bounded per client and per
// gateway, in groups and in bytes. A group outlives the subscribe or poll
// that made it (its positions are kept until DELETE /v1/groups/{group} or
// until it has had no member for the engine's idle TTL, --group-idle-ttl),
// so a client joining ever-new group names would otherwise make the log
// hold groups without end.
//
// A subscribe with a group, or a poll, that finds the group unknown to the
// engine makes it: the gateway charges the group to its client (the
// token's subject, or the IP address without one; see clientOf) before the
// join, at groupCost bytes, and refuses it with too_many_subscriptions
// past GroupBounds.MaxGroups, MaxGroupBytes, MaxGroupsPerClient or
// MaxGroupBytesPerClient. Joining a group that exists costs nothing here.
// A group stops counting when it is deleted through this gateway, when
// the join that was to make it fails, and when a sweep (once a minute,
// from the background loop) finds the engine no longer knows it: expired
// after its idle TTL, or deleted through another node. What a gateway
// counts is what was made through it since it started.
//
// Concurrency: groupLedger.mu guards the ledger; it is a leaf lock
// (router.go's lock order): nothing is called with it held.

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/switchyard/switchyard/engine"
)

// groupOverhead is what one group costs the gateway beyond its name,
// pattern and filter: the engine's group and cursor state and, on
// JetStream, its entry in the group bucket (measured: 3.3 KiB of heap per
// group a WebSocket client joined and left, on the memory engine and a
// topic of one partition; each further partition a group reads adds its
// cursor).
const groupOverhead = 4 << 10

// groupSweepEvery is how often the ledger asks the engine which of the
// groups it counts still exist, groupSweepBatch of them at a time (in
// name order, going on from where the last sweep stopped), so that a
// sweep costs the background loop a bounded number of lookups: with the
// default --max-groups every group is looked at within ten minutes.
const (
	groupSweepEvery = time.Minute
	groupSweepBatch = 1000
)

// groupCost is the bytes a group made with this definition is charged.
func groupCost(group, pattern string, filter map[string]string) int64 {
	return int64(len(group) + len(pattern) + mapSize(filter) + groupOverhead)
}

// groupTally is a count of groups and their bytes.
type groupTally struct {
	n     int
	bytes int64
}

// madeGroup is a group the ledger counts: who made it and what it costs.
type madeGroup struct {
	client string
	bytes  int64
	// maker is the WebSocket subscription that made the group, while it
	// is subscribed (nil for a poll): a group with a member does not
	// expire, so the sweep skips it.
	maker *subscription
}

// groupLedger counts the groups made through this gateway.
type groupLedger struct {
	mu        sync.Mutex // guards following
	made      map[string]*madeGroup
	by        map[string]*groupTally // by client
	total     groupTally
	lastSweep time.Time
	sweptTo   string // the last group name the last sweep looked at
}

func newGroupLedger() *groupLedger {
	return &groupLedger{made: make(map[string]*madeGroup), by: make(map[string]*groupTally)}
}

// tally returns the gateway's count and bytes.
func (l *groupLedger) tally() groupTally {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.total
}

// charge counts group, about to be made by client, within b, or refuses
// it; it reports whether it charged the group now. A group the ledger
// counts already is not charged again (the join that charged it undoes
// the charge if it fails: see unmake).
func (l *groupLedger) charge(b GroupBounds, group, client string, bytes int64, maker *subscription) (bool, *protoError) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.made[group] != nil {
		return false, nil
	}
	mine := l.by[client]
	if mine == nil {
		mine = &groupTally{}
	}
	switch {
	case b.MaxGroups > 0 && l.total.n >= b.MaxGroups:
		return false, refuse(limitGroups, codeTooManySubs,
			"the gateway holds its limit of %d consumer groups made through it; join an existing group, or delete groups no longer used", b.MaxGroups)
	case b.MaxGroupBytes > 0 && l.total.bytes+bytes > b.MaxGroupBytes:
		return false, refuse(limitGroupBytes, codeTooManySubs,
			"the consumer groups made through this gateway hold %d bytes; this one would pass its limit of %d", l.total.bytes, b.MaxGroupBytes)
	case b.MaxGroupsPerClient > 0 && mine.n >= b.MaxGroupsPerClient:
		return false, refuse(limitGroupsPerClient, codeTooManySubs,
			"this client has made its limit of %d consumer groups; join one of them, or delete those no longer used (DELETE /v1/groups/{group}); an abandoned group stops counting when it expires", b.MaxGroupsPerClient)
	case b.MaxGroupBytesPerClient > 0 && mine.bytes+bytes > b.MaxGroupBytesPerClient:
		return false, refuse(limitGroupBytesPerClient, codeTooManySubs,
			"the consumer groups this client made hold %d bytes; this one would pass its limit of %d", mine.bytes, b.MaxGroupBytesPerClient)
	}
	l.countLocked(group, &madeGroup{client: client, bytes: bytes, maker: maker})
	return true, nil
}

func (l *groupLedger) countLocked(group string, m *madeGroup) {
	mine := l.by[m.client]
	if mine == nil {
		mine = &groupTally{}
		l.by[m.client] = mine
	}
	mine.n++
	mine.bytes += m.bytes
	l.total.n++
	l.total.bytes += m.bytes
	l.made[group] = m
}

// adopt counts group, made by a join of client's, when the ledger does
// not count it already: the join found the group unknown, and another
// join, which charged it, failed meanwhile (see unmake). It is past the
// bounds' check: the group exists.
func (l *groupLedger) adopt(group, client string, bytes int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.made[group] == nil {
		l.countLocked(group, &madeGroup{client: client, bytes: bytes})
	}
}

// forget stops counting group and returns what it counted (nil: it did
// not count it).
func (l *groupLedger) forget(group string) *madeGroup {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.forgetLocked(group)
}

func (l *groupLedger) forgetLocked(group string) *madeGroup {
	m := l.made[group]
	if m == nil {
		return nil
	}
	delete(l.made, group)
	l.total.n--
	l.total.bytes -= m.bytes
	if t := l.by[m.client]; t != nil {
		if t.n--; t.n <= 0 {
			delete(l.by, m.client)
		} else {
			t.bytes -= m.bytes
		}
	}
	return m
}

// settle ends s's part in its group, made by s: when s never joined (its
// join failed or was refused) s did not make the group, which stops
// counting; it returns what it counted then, for unmake.
func (l *groupLedger) settle(s *subscription, joined bool) *madeGroup {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.made[s.group]
	if m == nil || m.maker != s {
		return nil
	}
	m.maker = nil
	if joined {
		return nil
	}
	return l.forgetLocked(s.group)
}

// unmake settles the charge m of group, which the join that charged it
// (and was to make it) did not make: forgotten already, it counts again
// when the engine knows the group, made meanwhile by another join that
// found it counted and so did not charge it. Forgotten first, looked up
// after: a join that makes the group after the lookup counts it itself
// (adopt).
func (rt *Router) unmake(group string, m *madeGroup) {
	if m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(rt.ctx, 5*time.Second)
	_, err := rt.eng.Group(ctx, group)
	cancel()
	if err == nil {
		rt.gm.made.adopt(group, m.client, m.bytes)
	}
}

// sweep forgets the counted groups the engine no longer knows (expired
// after their idle TTL, or deleted through another node), at most once
// per groupSweepEvery unless force is set, groupSweepBatch groups at a
// time. Each lookup is bounded by 5 s; a lookup that fails otherwise
// keeps the group counted.
func (rt *Router) sweepGroups(now time.Time, force bool) {
	l := rt.gm.made
	l.mu.Lock()
	if !force && now.Sub(l.lastSweep) < groupSweepEvery {
		l.mu.Unlock()
		return
	}
	l.lastSweep = now
	var later, first []string // names after sweptTo, and the others
	for g, m := range l.made {
		switch {
		case m.maker != nil:
		case g > l.sweptTo:
			later = append(later, g)
		default:
			first = append(first, g)
		}
	}
	slices.Sort(later)
	slices.Sort(first)
	names := append(later, first...)[:min(len(later)+len(first), groupSweepBatch)]
	if len(names) > 0 {
		l.sweptTo = names[len(names)-1]
	}
	l.mu.Unlock()
	for _, g := range names {
		if rt.closing.Load() {
			return
		}
		ctx, cancel := context.WithTimeout(rt.ctx, 5*time.Second)
		_, err := rt.eng.Group(ctx, g)
		cancel()
		if errors.Is(err, engine.ErrUnknownGroup) {
			l.mu.Lock()
			if m := l.made[g]; m != nil && m.maker == nil {
				l.forgetLocked(g)
			}
			l.mu.Unlock()
		}
	}
}

// clientOf names the client of an HTTP request for the per-client bounds
// on groups and pull members (see clientKey).
func (rt *Router) clientOf(c echo.Context) string {
	return clientKey(rt.principalOf(c), c.RealIP())
}

// clientKey names a client for the per-client bounds on groups and pull
// members: its token's subject, or its IP address when it has none of its
// own (no auth, anonymous access, the admin key).
func clientKey(p *principal, ip string) string {
	if p != nil && p != openPrincipal && p.Subject != "" && p.Subject != "anonymous" && p.Subject != "admin" {
		return "sub:" + p.Subject
	}
	return "ip:" + ip
}
