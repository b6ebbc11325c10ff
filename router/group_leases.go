package router

// The leases of a session's group memberships are bounded together: each
// membership reserves, when it joins, the records and bytes it may hold
// leased (the engine's member window: engine.JoinRequest.MaxLeased and
// MaxLeasedBytes), out of what GroupBounds.MaxSessionLeases and
// MaxSessionLeaseBytes leave the session. Within its reservation a member
// is held back as before: past it the engine delivers nothing more to that
// membership until the client acks or nacks, or the leases time out
// (deliveries pause; nothing is refused or closed). The engine allocates
// no window up front (a flight is made per record delivered), so what a
// membership reserves is what its group's window lets it hold: the
// window (max_in_flight) times the partitions the group reads when it
// joins, when the gateway can tell them (the group exists with
// partitions, or the pattern is a topic that exists), at most the
// session's queue bound (--queue-messages). When it cannot tell (a new
// group on a wildcard or a topic not made yet) the membership reserves the
// queue bound while the session has at least twice that left, and half of
// what is left after that (at least one lease), so a session can join many
// groups while the first ones keep full windows. A subscribe that finds
// nothing left is refused with too_many_subscriptions. Unsubscribing (or
// the session ending) gives the reservation back once the member has left
// its group.

import (
	"cmp"
	"errors"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/trie"
)

// reserveLeases reserves s's member window out of the session's lease
// bounds, and charges its group to the session's client when the join is
// to make it (group_count.go), or refuses the subscribe. It reports whether
// the engine did not know the group: a join that then works made it.
func (cn *conn) reserveLeases(s *subscription) (unknown bool, _ *protoError) {
	b := cn.rt.opts.Groups
	window, parts := cmp.Or(s.maxInFlight, b.DefaultWindow), 0
	info, err := cn.rt.eng.Group(cn.ctx, s.group)
	switch {
	case err == nil:
		window, parts = info.MaxInFlight, len(info.Partitions)
	case errors.Is(err, engine.ErrUnknownGroup):
		unknown = true
		if _, pe := cn.rt.gm.made.charge(b, s.group, cn.groupClient(), groupCost(s.group, s.pattern, s.filter), s); pe != nil {
			return false, pe
		}
	}
	if parts == 0 && trie.ValidateTopic(s.pattern) == nil {
		if ti, err := cn.rt.eng.Topic(cn.ctx, s.pattern); err == nil {
			parts = ti.Config.Partitions
		}
	}
	if pe := cn.reserveWindow(s, window*parts); pe != nil {
		cn.rt.unmake(s.group, cn.rt.gm.made.settle(s, false))
		return false, pe
	}
	return unknown, nil
}

// groupClient is the client the groups the session makes are charged to.
func (cn *conn) groupClient() string {
	return cmp.Or(cn.client, "session:"+cn.id) // a session made without one (none joins groups today)
}

// reserveWindow reserves s's member window out of the session's lease
// bounds: need records when need > 0 (what the group's window lets the
// member hold over every partition the group reads now) and that many are
// left, else the session's queue bound while twice that is left and half
// of what is left after that. A membership that later reads more
// partitions (a wildcard matching new topics) keeps its reservation: past
// it its deliveries pause until it settles some.
func (cn *conn) reserveWindow(s *subscription, need int) *protoError {
	b := cn.rt.opts.Groups
	q := cn.rt.opts.Session.QueueMessages
	cn.mu.Lock()
	defer cn.mu.Unlock()
	n := q
	if need > 0 {
		n = min(q, need)
	}
	if b.MaxSessionLeases > 0 {
		left := b.MaxSessionLeases - cn.leases
		if left < 1 {
			return cn.refuseLeases(b)
		}
		if need <= 0 || need > left {
			n = min(q, (left+1)/2)
		}
	}
	var nb int64 // 0: no bound
	if b.MaxSessionLeaseBytes > 0 {
		left := b.MaxSessionLeaseBytes - cn.leaseBytes
		if left < 1 {
			return cn.refuseLeases(b)
		}
		share := (left + 1) / 2
		if b.MaxSessionLeases > 0 {
			share = max(1, b.MaxSessionLeaseBytes*int64(n)/int64(b.MaxSessionLeases))
		}
		nb = min(share, left)
	}
	s.leases, s.leaseBytes = n, nb
	cn.leases += n
	cn.leaseBytes += nb
	cn.rt.gm.leasesReserved.Add(float64(n))
	return nil
}

// refuseLeases is the refusal of a membership the session has no leases
// left for. Caller holds cn.mu.
func (cn *conn) refuseLeases(b GroupBounds) *protoError {
	return refuse(limitSessionLeases, codeTooManySubs,
		"this session's group memberships already hold its limit of %d leased records (%d bytes); unsubscribe from a group first",
		b.MaxSessionLeases, b.MaxSessionLeaseBytes)
}

// releaseLeases gives s's reservation back to its session, once its join
// failed or it left its group.
func (cn *conn) releaseLeases(s *subscription) {
	cn.mu.Lock()
	joined := s.member != ""
	n, nb := s.leases, s.leaseBytes
	s.leases, s.leaseBytes = 0, 0
	cn.leases -= n
	cn.leaseBytes -= nb
	cn.mu.Unlock()
	cn.rt.unmake(s.group, cn.rt.gm.made.settle(s, joined))
	cn.rt.gm.leasesReserved.Sub(float64(n))
}
