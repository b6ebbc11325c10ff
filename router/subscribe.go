package router

// Subscriptions of a session. A subscribe is checked (parseSubscribe for
// the WebSocket's op; sseSubscribe for a stream's query), then handed as
// a subscribeSpec to subscribeSpec, which registers it in the session
// within its bounds (register) and starts it: as a group member
// (startGroup), at the live tail (startLive), or with a replay of the log
// that then goes live (startReplay). Every way a subscription ends takes
// it out of the session through removeLocked, then out of the trie or its
// group through dropSub.

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router/internal/auth"
	"github.com/switchyard/switchyard/session"
)

// validGroup checks a group name by the rule of auth.ValidateGroupName.
func validGroup(g string) *protoError {
	if err := auth.ValidateGroupName(g); err != nil {
		return perr(codeBadRequest, "%s", err)
	}
	return nil
}

// subscribeSpec is a subscribe whose fields are checked and which the
// session's grants (or the subscribe hook) allow: what every transport
// hands the session core to subscribe (subscribeSpec). The WebSocket
// parses it from a subscribe op (parseSubscribe), SSE from its query
// (sseSubscribe).
type subscribeSpec struct {
	id          json.RawMessage // echoed in the reply
	pattern     string
	group       string // "": a plain subscription
	from        fromSpec
	policy      session.Policy
	filter      map[string]string // the session's own copy
	filterBytes int               // its size against Bounds.MaxSessionFilterBytes
	maxInFlight int               // a group subscribe's max_in_flight (0: the group's)
	hookAllowed bool              // the subscribe hook allowed it, not the grants
	presence    bool              // join the topic's presence set
	delta       bool              // "delta":"fossil" (delta.go)
}

// live reports whether a plain subscription starts at the live tail, with
// nothing to replay.
func (sp *subscribeSpec) live() bool {
	f := &sp.from
	return !f.positions && f.last == 0 && (f.start.Kind == engine.StartDefault || f.start.Kind == engine.StartLatest)
}

// subscribe runs a WebSocket subscribe op.
func (cn *conn) subscribe(req *request) *protoError {
	sp, pe := cn.parseSubscribe(req)
	if pe != nil {
		return pe
	}
	return cn.subscribeSpec(&sp)
}

// parseSubscribe checks a subscribe op: its fields, the grants and the
// subscribe hook, in the order the protocol reports their errors.
func (cn *conn) parseSubscribe(req *request) (subscribeSpec, *protoError) {
	sp := subscribeSpec{id: req.ID}
	if req.Pattern == nil {
		return sp, perr(codeBadRequest, `missing field "pattern"`)
	}
	sp.pattern = *req.Pattern
	if pe := validPattern(&cn.rt.opts.Bounds, sp.pattern); pe != nil {
		return sp, pe
	}
	if req.Group != nil {
		sp.group = *req.Group
		if pe := validGroup(sp.group); pe != nil {
			return sp, pe
		}
	}
	var pe *protoError
	if sp.hookAllowed, pe = cn.authorizeSubscribe(sp.pattern, sp.group); pe != nil {
		return sp, pe
	}
	if sp.presence, pe = cn.checkPresence(req, sp.pattern, sp.group); pe != nil {
		return sp, pe
	}
	if sp.from, pe = parseFrom(req.From); pe != nil {
		return sp, pe
	}
	if pe := cn.rt.checkLast(sp.from, sp.group, sp.pattern); pe != nil {
		return sp, pe
	}
	if sp.policy, pe = parseOnFull(req.OnFull, sp.group); pe != nil {
		return sp, pe
	}
	if req.Filter != nil && len(req.Filter.Headers) > 0 {
		n, pe := checkFilter(&cn.rt.opts.Bounds, req.Filter.Headers)
		if pe != nil {
			return sp, pe
		}
		sp.filter, sp.filterBytes = maps.Clone(req.Filter.Headers), n
	}
	if sp.group != "" && sp.from.positions {
		return sp, perr(codeBadRequest, "a group resumes from its committed offsets; from.positions applies to plain subscriptions")
	}
	if sp.maxInFlight, pe = groupWindow(req, sp.group); pe != nil {
		return sp, pe
	}
	if sp.delta, pe = parseDelta(req.Delta, sp.group); pe != nil {
		return sp, pe
	}
	return sp, nil
}

// parseOnFull parses a subscribe's on_full (nil: drop_old), which applies
// to plain subscriptions only.
func parseOnFull(onFull *string, group string) (session.Policy, *protoError) {
	if onFull == nil {
		return session.DropOld, nil
	}
	if group != "" {
		return session.DropOld, perr(codeBadRequest, "on_full applies to plain subscriptions only")
	}
	switch *onFull {
	case "drop_old":
		return session.DropOld, nil
	case "drop_new":
		return session.DropNew, nil
	case "disconnect":
		return session.Disconnect, nil
	}
	return session.DropOld, perr(codeBadRequest, `on_full must be "drop_old", "drop_new" or "disconnect"`)
}

// subscribeSpec registers a checked subscribe in the session and starts
// it: as a group member, at the live tail, or with a replay that then
// goes live. It queues the "subscribed" reply before the subscription's
// first delivery; an error it returns is the reply instead.
func (cn *conn) subscribeSpec(sp *subscribeSpec) *protoError {
	s, pe := cn.register(sp)
	if pe != nil {
		return pe
	}
	if sp.group != "" {
		return cn.startGroup(s, sp)
	}
	if s.presence.Load() {
		if pe := cn.rt.presenceJoin(cn.ctx, s); pe != nil {
			cn.forget(s)
			return pe
		}
	}
	// The topic by policy last: a subscribe refused before this leaves no
	// topic behind; one whose creation fails holds nothing.
	if err := cn.rt.createOnSubscribe(cn.ctx, cn.who.load(), sp.pattern); err != nil { // topic_policies_access.go
		if s.presence.Load() {
			cn.rt.presenceLeave(s)
		}
		cn.forget(s)
		return toProto(err)
	}
	cn.rt.m.subscriptions.WithLabelValues("plain").Inc()
	if sp.live() {
		return cn.startLive(s, sp)
	}
	return cn.startReplay(s, sp)
}

// register adds a subscription for sp to the session, within the
// session's bounds (subscriptions, filter bytes).
func (cn *conn) register(sp *subscribeSpec) (*subscription, *protoError) {
	key := subKey{sp.pattern, sp.group}
	if f := cn.rt.beforeRegister.Load(); f != nil {
		(*f)()
	}
	cn.mu.Lock()
	if cn.closed {
		cn.mu.Unlock()
		return nil, perr(codeShuttingDown, "session is closing")
	}
	if cn.subNamed(key) != nil {
		cn.mu.Unlock()
		return nil, perr(codeBadRequest, "already subscribed to %s", quoteInput(sp.pattern))
	}
	// The grants again, under cn.mu: a reload or refresh that narrowed
	// them after parseSubscribe checked them has either revoked before
	// this (and the principal read here is the new one) or revokes after.
	if !allowedStill(cn.who.load(), &subscription{pattern: sp.pattern, group: sp.group, hookAllowed: sp.hookAllowed}) {
		cn.mu.Unlock()
		return nil, cn.rt.forbidden("subscribe", "not allowed to subscribe to %q (the grants changed meanwhile)", sp.pattern)
	}
	if len(cn.byID) >= cn.set.maxSubscriptions {
		cn.mu.Unlock()
		return nil, perr(codeTooManySubs, "a session may hold at most %d subscriptions", cn.set.maxSubscriptions)
	}
	if max := cn.rt.opts.Bounds.MaxSessionFilterBytes; cn.filterBytes+sp.filterBytes > max {
		held := cn.filterBytes
		cn.mu.Unlock()
		return nil, refuse(limitSessionFilterBytes, codeBadRequest,
			"the session's filters hold %d bytes; this one would pass the limit of %d", held, max)
	}
	cn.filterBytes += sp.filterBytes
	cn.nextID++
	s := &subscription{c: cn, id: cn.nextID, pattern: sp.pattern, group: sp.group, policy: sp.policy, filter: sp.filter,
		maxInFlight: sp.maxInFlight, hookAllowed: sp.hookAllowed}
	s.presence.Store(sp.presence)
	if sp.delta {
		s.delta = &deltaSub{last: map[partKey]int64{}}
	}
	cn.addLocked(s)
	cn.mu.Unlock()
	return s, nil
}

// subscribed queues the reply to a subscribe.
func (cn *conn) subscribed(sp *subscribeSpec, fields map[string]any) {
	fields["pattern"] = sp.pattern
	if sp.group != "" {
		fields["group"] = sp.group
	}
	cn.sess.Send(session.Item{Frame: encodeReply("subscribed", sp.id, fields)})
}

// startGroup joins s's group; its deliveries wait until the reply is
// queued.
func (cn *conn) startGroup(s *subscription, sp *subscribeSpec) *protoError {
	if pe := cn.joinGroup(s, sp.from, true); pe != nil {
		cn.forget(s)
		return pe
	}
	cn.rt.m.subscriptions.WithLabelValues("group").Inc()
	cn.subscribed(sp, map[string]any{})
	s.release()
	return nil
}

// startLive puts s in the trie: it delivers from the next record on.
func (cn *conn) startLive(s *subscription, sp *subscribeSpec) *protoError {
	s.isLive.Store(true)
	if err := cn.rt.subs.Add(s.pattern, s); err != nil {
		cn.forget(s)
		return toProto(err)
	}
	cn.subscribed(sp, map[string]any{})
	return nil
}

// startReplay registers s first (live records queue up in s.pending), then
// reads the log up to its end on a goroutine of the session's (cn.wg),
// then switches to live (subscription.catchUp).
func (cn *conn) startReplay(s *subscription, sp *subscribeSpec) *protoError {
	s.catchingUp = true
	if err := cn.rt.subs.Add(s.pattern, s); err != nil {
		cn.forget(s)
		return toProto(err)
	}
	plan, recovered, err := cn.rt.replayPlan(cn.ctx, s, sp.from)
	if err != nil {
		cn.forget(s)
		cn.rt.dropSub(s)
		return toProto(err)
	}
	fields := map[string]any{}
	if sp.from.positions {
		fields["recovered"] = recovered
	}
	cn.subscribed(sp, fields)
	cn.wg.Add(1)
	go func() {
		defer cn.wg.Done()
		s.catchUp(cn.ctx, plan)
	}()
	return nil
}

// removeLocked takes s out of the session: its entries in byID and byKey
// (conn_subs.go) and the filter bytes it held. Every way a subscription ends passes here
// (unsubscribe, teardown, a refresh that revokes it, a deleted group, a
// subscribe that failed, and dropSub itself), so the session's maps hold
// only its subscriptions, however many came and went. It reports whether
// s was still there. The session's queue may still hold items of s,
// written or dropped after it: a queue_full gap of theirs names no pattern
// and group (the client no longer holds the subscription), and their drops
// record no dead letter. The caller holds cn.mu.
func (cn *conn) removeLocked(s *subscription) bool {
	held := cn.byID[s.id] == s
	if held {
		delete(cn.byID, s.id)
		if key := (subKey{s.pattern, s.group}); cn.byKey[key] == s {
			delete(cn.byKey, key)
		}
		if cn.byKey != nil && len(cn.byID) <= keyIndexAt/2 {
			// Back to a few: the scan serves again, and the index (a
			// map that would keep its grown size) goes. Half the
			// threshold, so that churn around it does not rebuild the
			// index on every subscribe.
			cn.byKey = nil
		}
		cn.filterBytes -= mapSize(s.filter)
	}
	return held
}

// forget removes s from the session (not from the trie or engine).
func (cn *conn) forget(s *subscription) {
	cn.mu.Lock()
	cn.removeLocked(s)
	cn.mu.Unlock()
}

// joinGroup joins s's group; create: a subscribe that creates its exact
// topic by policy (createOnSubscribe), once the session's lease bounds
// have allowed the join and right before it.
func (cn *conn) joinGroup(s *subscription, from fromSpec, create bool) *protoError {
	unknown, pe := cn.reserveLeases(s)
	if pe != nil {
		return pe
	}
	if create {
		if err := cn.rt.createOnSubscribe(cn.ctx, cn.who.load(), s.pattern); err != nil { // topic_policies_access.go
			cn.releaseLeases(s)
			return toProto(err)
		}
	}
	s.mu.Lock()
	s.holding = true // deliveries wait until "subscribed" is queued
	s.mu.Unlock()
	member, err := cn.rt.eng.Join(cn.ctx, engine.JoinRequest{
		Group:   s.group,
		Pattern: s.pattern,
		Filter:  s.filter,
		From:    from.start,
		Member:  s.memberID(),
		// The group's window per partition, and the member's over all its
		// partitions: the engine holds back what the session's queue could
		// not take, so a member of many partitions with backlog is never
		// closed with 1013 for what the engine pushed at once, and what
		// the session's lease bounds leave it (group_leases.go).
		MaxInFlight:    s.maxInFlight,
		MaxLeased:      s.leases,
		MaxLeasedBytes: s.leaseBytes,
	}, s)
	if err != nil {
		cn.releaseLeases(s)
		return toProto(err)
	}
	if unknown { // this join made the group, unless another did first
		cn.rt.gm.made.adopt(s.group, cn.groupClient(), groupCost(s.group, s.pattern, s.filter))
	}
	// Under cn.mu: Shutdown's hand-back reads it from another goroutine.
	cn.mu.Lock()
	held := cn.byID[s.id] == s
	if held {
		s.member = member
	}
	closed := cn.closed
	cn.mu.Unlock()
	if !held {
		return cn.abandonJoin(s, member, closed)
	}
	return nil
}

// memberID is the member ID the join of s asks for, which the engine
// gives the member (engine.JoinRequest.Member). Known before the engine's
// Join, which may deliver before it returns (and so before s.member is
// set): an MQTT session settles a delivery with it (mqtt_group.go).
func (s *subscription) memberID() string { return s.c.id + "-" + itoa(int64(s.id)) }

// abandonJoin undoes the join of s, which ended while it joined (its
// group deleted through DELETE /v1/groups/{group}, its session torn
// down): no session holds the member, so it leaves at once, and the
// subscribe is refused. s.member stays empty (a dropSub of s may be
// running): the group the join made stays counted (group_count.go).
func (cn *conn) abandonJoin(s *subscription, member string, closed bool) *protoError {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := cn.rt.eng.Leave(ctx, s.group, member); err != nil && !errors.Is(err, engine.ErrClosed) && !errors.Is(err, engine.ErrUnknownGroup) {
		cn.rt.log.Warn("leaving group failed", "group", s.group, "member", member, "err", err)
	}
	cn.rt.gm.made.settle(s, true)
	cn.releaseLeases(s)
	if closed {
		return perr(codeShuttingDown, "session is closing")
	}
	return perr(codeUnknownGroup, "group %s was deleted while this subscribe joined it; subscribe again to make it anew", quoteInput(s.group))
}

// groupWindow validates a subscribe's max_in_flight: only on a group
// subscribe, 1 to engine.MaxGroupInFlight; absent (0) takes the group's.
func groupWindow(req *request, group string) (int, *protoError) {
	if req.MaxInFlight == nil {
		return 0, nil
	}
	if group == "" {
		return 0, perr(codeBadRequest, "max_in_flight applies to group subscriptions only")
	}
	if n := *req.MaxInFlight; n < 1 || n > engine.MaxGroupInFlight {
		return 0, perr(codeBadRequest, "max_in_flight must be 1 to %d", engine.MaxGroupInFlight)
	}
	return *req.MaxInFlight, nil
}

func (cn *conn) unsubscribe(req *request) *protoError {
	if req.Pattern == nil {
		return perr(codeBadRequest, `missing field "pattern"`)
	}
	group := ""
	if req.Group != nil {
		group = *req.Group
	}
	key := subKey{*req.Pattern, group}
	cn.mu.Lock()
	s := cn.subNamed(key)
	ok := s != nil
	if ok {
		cn.removeLocked(s)
	}
	cn.mu.Unlock()
	if !ok {
		return perr(codeNotSubscribed, "not subscribed to %s", quoteInput(*req.Pattern))
	}
	cn.rt.dropSub(s)
	cn.sess.Send(session.Item{Frame: encodeReply("unsubscribed", req.ID, map[string]any{"pattern": s.pattern})})
	return nil
}

// dropSub ends a subscription: out of its session (removeLocked, when
// its caller has not taken it out already), and out of the trie or out of
// its group.
func (rt *Router) dropSub(s *subscription) {
	s.mu.Lock()
	already := s.ended
	s.ended = true
	s.pending = nil
	s.mu.Unlock()
	if s.c != nil {
		s.c.forget(s)
	}
	if already {
		return
	}
	if s.presence.Load() {
		rt.presenceLeave(s)
	}
	if s.group == "" {
		rt.subs.Remove(s.pattern, s)
		rt.m.subscriptions.WithLabelValues("plain").Dec()
		return
	}
	rt.m.subscriptions.WithLabelValues("group").Dec()
	if s.member != "" && !s.handedBack.Load() {
		// Leave with a fresh context: the session's may be canceled, and
		// the member's records must go back.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := rt.eng.Leave(ctx, s.group, s.member); err != nil && !errors.Is(err, engine.ErrClosed) && !errors.Is(err, engine.ErrUnknownGroup) {
			rt.log.Warn("leaving group failed", "group", s.group, "member", s.member, "err", err)
		}
	}
	if s.c != nil {
		s.c.releaseLeases(s) // the member's leases went with it
		if s.c.mqtt != nil {
			s.c.mqtt.dropHeldOf(s) // mqtt_group.go
		}
	}
}
