package router

// The leases of a session's group memberships are bounded together: each
// membership reserves, when it joins, the records and bytes it may hold
// leased (the engine's member window: engine.JoinRequest.MaxLeased and
// MaxLeasedBytes), out of what GroupBounds.MaxSessionLeases and
// MaxSessionLeaseBytes leave the session. Within its reservation a member
// is held back as before: past it the engine delivers nothing more to that
// membership until the client acks or nacks, or the leases time out
// (deliveries pause; nothing is refused or closed). A membership reserves
// the session's queue bound (--queue-messages) while the session has at
// least twice that left, and half of what is left after that (at least
// one lease), so a session can join many groups while the first ones keep
// full windows; a subscribe that finds nothing left is refused with
// too_many_subscriptions. Unsubscribing (or the session ending) gives the
// reservation back once the member has left its group.

import (
	"errors"

	"github.com/switchyard/switchyard/engine"
)

// reserveLeases reserves s's member window out of the session's lease
// bounds, and charges its group to the session's client when the join is
// to make it (groupcount.go), or refuses the subscribe.
func (cn *conn) reserveLeases(s *subscription) *protoError {
	b := cn.rt.opts.Groups
	if _, err := cn.rt.eng.Group(cn.ctx, s.group); errors.Is(err, engine.ErrUnknownGroup) {
		if pe := cn.rt.gm.made.charge(b, s.group, cn.client, groupCost(s.group, s.pattern, s.filter), s); pe != nil {
			return pe
		}
	}
	if pe := cn.reserveWindow(s); pe != nil {
		cn.rt.gm.made.settle(s, false)
		return pe
	}
	return nil
}

// reserveWindow reserves s's member window out of the session's lease
// bounds.
func (cn *conn) reserveWindow(s *subscription) *protoError {
	b := cn.rt.opts.Groups
	q := cn.rt.opts.Session.QueueMessages
	cn.mu.Lock()
	defer cn.mu.Unlock()
	n := q
	if b.MaxSessionLeases > 0 {
		left := b.MaxSessionLeases - cn.leases
		if left < 1 {
			return cn.refuseLeases(b)
		}
		n = min(q, (left+1)/2)
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
	cn.rt.gm.made.settle(s, s.member != "")
	n, nb := s.leases, s.leaseBytes
	s.leases, s.leaseBytes = 0, 0
	cn.leases -= n
	cn.leaseBytes -= nb
	cn.mu.Unlock()
	cn.rt.gm.leasesReserved.Sub(float64(n))
}
