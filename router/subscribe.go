package router

import (
	"context"
	"errors"
	"maps"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/session"
	"github.com/switchyard/switchyard/trie"
)

func validGroup(g string) *protoError {
	if g == "" || len(g) > trie.MaxNameBytes {
		return perr(codeBadRequest, "group must be 1 to 255 characters")
	}
	for i := 0; i < len(g); i++ {
		c := g[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == ':' || c == '.') {
			return perr(codeBadRequest, "group may hold only A-Z a-z 0-9 _ - : .")
		}
	}
	return nil
}

func (cn *conn) subscribe(req *request) *protoError {
	if req.Pattern == nil {
		return perr(codeBadRequest, `missing field "pattern"`)
	}
	pattern := *req.Pattern
	if pe := validPattern(&cn.rt.opts.Bounds, pattern); pe != nil {
		return pe
	}
	group := ""
	if req.Group != nil {
		group = *req.Group
		if pe := validGroup(group); pe != nil {
			return pe
		}
	}
	viaHook, pe := cn.authorizeSubscribe(pattern, group)
	if pe != nil {
		return pe
	}
	withPresence, pe := cn.checkPresence(req, pattern, group)
	if pe != nil {
		return pe
	}
	from, pe := parseFrom(req.From)
	if pe != nil {
		return pe
	}
	if pe := cn.rt.checkLast(from, group); pe != nil {
		return pe
	}
	policy := session.DropOld
	if req.OnFull != nil {
		if group != "" {
			return perr(codeBadRequest, "on_full applies to plain subscriptions only")
		}
		switch *req.OnFull {
		case "drop_old":
		case "drop_new":
			policy = session.DropNew
		case "disconnect":
			policy = session.Disconnect
		default:
			return perr(codeBadRequest, `on_full must be "drop_old", "drop_new" or "disconnect"`)
		}
	}
	var filter map[string]string
	filterBytes := 0
	if req.Filter != nil && len(req.Filter.Headers) > 0 {
		n, pe := checkFilter(&cn.rt.opts.Bounds, req.Filter.Headers)
		if pe != nil {
			return pe
		}
		filter, filterBytes = maps.Clone(req.Filter.Headers), n
	}
	if group != "" && from.positions {
		return perr(codeBadRequest, "a group resumes from its committed offsets; from.positions applies to plain subscriptions")
	}
	maxInFlight, pe := groupWindow(req, group)
	if pe != nil {
		return pe
	}

	key := subKey{pattern, group}
	cn.mu.Lock()
	if cn.closed {
		cn.mu.Unlock()
		return perr(codeShuttingDown, "session is closing")
	}
	if _, ok := cn.subs[key]; ok {
		cn.mu.Unlock()
		return perr(codeBadRequest, "already subscribed to %s", quoteInput(pattern))
	}
	if len(cn.subs) >= cn.rt.opts.MaxSubscriptions {
		cn.mu.Unlock()
		return perr(codeTooManySubs, "a session may hold at most %d subscriptions", cn.rt.opts.MaxSubscriptions)
	}
	if max := cn.rt.opts.Bounds.MaxSessionFilterBytes; cn.filterBytes+filterBytes > max {
		held := cn.filterBytes
		cn.mu.Unlock()
		return refuse(limitSessionFilterBytes, codeBadRequest,
			"the session's filters hold %d bytes; this one would pass the limit of %d", held, max)
	}
	cn.filterBytes += filterBytes
	cn.nextID++
	s := &subscription{c: cn, id: cn.nextID, pattern: pattern, group: group, policy: policy, filter: filter, maxInFlight: maxInFlight, hookAllowed: viaHook, presence: withPresence}
	cn.subs[key] = s
	cn.byID[s.id] = s
	cn.mu.Unlock()

	reply := map[string]any{"pattern": pattern}
	if group != "" {
		reply["group"] = group
		if pe := cn.joinGroup(s, from); pe != nil {
			cn.forget(s)
			return pe
		}
		cn.rt.m.subscriptions.WithLabelValues("group").Inc()
		cn.rt.stats.groupSubs.Add(1)
		cn.sess.Send(session.Item{Frame: encodeReply("subscribed", req.ID, reply)})
		s.release()
		return nil
	}

	if s.presence {
		if pe := cn.rt.presenceJoin(cn.ctx, s); pe != nil {
			cn.forget(s)
			return pe
		}
	}
	cn.rt.m.subscriptions.WithLabelValues("plain").Inc()
	cn.rt.stats.plainSubs.Add(1)
	if !from.positions && from.last == 0 && (from.start.Kind == engine.StartDefault || from.start.Kind == engine.StartLatest) {
		s.isLive.Store(true)
		if err := cn.rt.subs.Add(pattern, s); err != nil {
			cn.forget(s)
			return toProto(err)
		}
		cn.sess.Send(session.Item{Frame: encodeReply("subscribed", req.ID, reply)})
		return nil
	}
	// Replay: register first (live records queue up in s.pending), then
	// read the log up to its end, then switch to live.
	s.catchingUp = true
	if err := cn.rt.subs.Add(pattern, s); err != nil {
		cn.forget(s)
		return toProto(err)
	}
	plan, recovered, err := cn.rt.replayPlan(cn.ctx, s, from)
	if err != nil {
		cn.forget(s)
		cn.rt.dropSub(s)
		return toProto(err)
	}
	if from.positions {
		reply["recovered"] = recovered
	}
	cn.sess.Send(session.Item{Frame: encodeReply("subscribed", req.ID, reply)})
	cn.wg.Add(1)
	go func() {
		defer cn.wg.Done()
		s.catchUp(cn.ctx, plan)
	}()
	return nil
}

// forget removes s from the session's maps (not from the trie or engine).
func (cn *conn) forget(s *subscription) {
	cn.mu.Lock()
	if cn.subs[subKey{s.pattern, s.group}] == s {
		delete(cn.subs, subKey{s.pattern, s.group})
		cn.filterBytes -= mapSize(s.filter)
	}
	if cn.byID[s.id] == s {
		delete(cn.byID, s.id)
	}
	cn.mu.Unlock()
}

// unindex removes s from the session's id index. Every way a subscription
// ends passes here (dropSub, or forget for a subscribe that failed), so
// the index holds only the session's subscriptions, however many came and
// went. The session's queue may still hold items of s, written or dropped
// after it: a queue_full gap of theirs names no pattern and group (the
// client no longer holds the subscription), and their drops record no dead
// letter.
func (cn *conn) unindex(s *subscription) {
	cn.mu.Lock()
	if cn.byID[s.id] == s {
		delete(cn.byID, s.id)
	}
	cn.mu.Unlock()
}

func (cn *conn) joinGroup(s *subscription, from fromSpec) *protoError {
	if pe := cn.reserveLeases(s); pe != nil {
		return pe
	}
	s.mu.Lock()
	s.holding = true // deliveries wait until "subscribed" is queued
	s.mu.Unlock()
	member, err := cn.rt.eng.Join(cn.ctx, engine.JoinRequest{
		Group:   s.group,
		Pattern: s.pattern,
		Filter:  s.filter,
		From:    from.start,
		Member:  cn.id + "-" + itoa(int64(s.id)),
		// The group's window per partition, and the member's over all its
		// partitions: the engine holds back what the session's queue could
		// not take, so a member of many partitions with backlog is never
		// closed with 1013 for what the engine pushed at once, and what
		// the session's lease bounds leave it (groupleases.go).
		MaxInFlight:    s.maxInFlight,
		MaxLeased:      s.leases,
		MaxLeasedBytes: s.leaseBytes,
	}, s)
	if err != nil {
		cn.releaseLeases(s)
		return toProto(err)
	}
	// Under cn.mu: Shutdown's hand-back reads it from another goroutine.
	cn.mu.Lock()
	s.member = member
	cn.mu.Unlock()
	return nil
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
	s, ok := cn.subs[key]
	if ok {
		delete(cn.subs, key)
		cn.filterBytes -= mapSize(s.filter)
	}
	cn.mu.Unlock()
	if !ok {
		return perr(codeNotSubscribed, "not subscribed to %s", quoteInput(*req.Pattern))
	}
	cn.rt.dropSub(s)
	cn.sess.Send(session.Item{Frame: encodeReply("unsubscribed", req.ID, map[string]any{"pattern": s.pattern})})
	return nil
}

// dropSub ends a subscription: out of its session's index, and out of
// the trie or out of its group.
func (rt *Router) dropSub(s *subscription) {
	s.mu.Lock()
	already := s.ended
	s.ended = true
	s.pending = nil
	s.mu.Unlock()
	if s.c != nil {
		s.c.unindex(s)
	}
	if already {
		return
	}
	if s.presence {
		rt.presenceLeave(s)
	}
	if s.group == "" {
		rt.subs.Remove(s.pattern, s)
		rt.m.subscriptions.WithLabelValues("plain").Dec()
		rt.stats.plainSubs.Add(-1)
		return
	}
	rt.m.subscriptions.WithLabelValues("group").Dec()
	rt.stats.groupSubs.Add(-1)
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
	}
}
