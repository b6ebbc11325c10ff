package router

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"sync"

	"github.com/labstack/echo/v4"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/session"
	"github.com/switchyard/switchyard/trie"
)

// Presence: who is subscribed to a topic.
//
// A plain subscription to a topic (not a wildcard pattern) may ask for
// presence with "presence": true. The session then joins the topic's
// presence set, with its user (the token's sub or the connect hook's user)
// and info (from the connect hook), and receives
//
//	{"op":"join","topic","session","user","info"?}   {"op":"leave",…}
//
// for every other session that joins or leaves that set, on any node. The
// set lives in the engine (engine.Presence), so it spans every gateway node
// of a shared store; the engine announces each change once, and this
// router fans it out to its own presence subscribers of the topic. GET
// /v1/presence/{topic} and the presence op list the members;
// ?count=1 answers only the count.
//
// Bound: a topic lists and announces at most Options.MaxPresencePerTopic
// members; sessions that join beyond it are counted only (hidden), so a
// crowded topic costs each subscriber nothing per member beyond the bound.
// Churn is bounded per session (joins per second) and per member (queued
// announcements, then a resync frame): presence_churn.go.
//
// Concurrency: presenceHub.mu guards the local index and is taken after a
// presenceMember's mu, never before (presence_churn.go); the engine calls
// PresenceChanged on its goroutines, which takes mu to copy the members
// and then each member's mu to queue a frame (session.Send is safe for
// concurrent use).

// defaultMaxPresencePerTopic bounds listed members: a page of names a
// client can show, and join/leave traffic each subscriber can absorb.
const defaultMaxPresencePerTopic = 1000

// DefaultMaxPresencePerTopic is Options.MaxPresencePerTopic's default.
const DefaultMaxPresencePerTopic = defaultMaxPresencePerTopic

type presenceHub struct {
	eng  engine.Presence // nil when the engine has no presence
	max  int
	stop func()

	mu    sync.Mutex // guards local and presenceChurn's guarded fields
	local map[string]map[*subscription]*presenceMember

	presenceChurn // announcement and join bounds (presence_churn.go)
}

func (rt *Router) startPresence() {
	h := &presenceHub{max: rt.opts.MaxPresencePerTopic, local: map[string]map[*subscription]*presenceMember{}}
	h.initChurn(rt)
	if h.max <= 0 {
		h.max = defaultMaxPresencePerTopic
	}
	if p, ok := rt.eng.(engine.Presence); ok {
		h.eng = p
		h.stop = p.WatchPresence(h)
	}
	rt.pres = h
}

// close stops watching the engine and sending resync frames.
func (h *presenceHub) close() {
	if h == nil {
		return
	}
	if h.stop != nil {
		h.stop()
	}
	h.closeChurn()
}

// PresenceChanged implements engine.PresenceObserver.
func (h *presenceHub) PresenceChanged(m engine.PresenceMember, joined bool) {
	if m.Hidden {
		return
	}
	h.mu.Lock()
	members := make([]*presenceMember, 0, len(h.local[m.Topic]))
	for _, pm := range h.local[m.Topic] {
		members = append(members, pm)
	}
	h.mu.Unlock()
	if len(members) == 0 {
		return
	}
	op := "leave"
	if joined {
		op = "join"
	}
	frame := encodePresence(op, m)
	for _, pm := range members {
		if pm.s.c != nil && pm.s.c.id != m.Session {
			h.announce(pm, frame)
		}
	}
}

func encodePresence(op string, m engine.PresenceMember) []byte {
	dst := make([]byte, 0, 96+len(m.Topic)+len(m.User)+len(m.Info))
	dst = append(dst, `{"op":`...)
	dst = appendString(dst, op)
	dst = append(dst, `,"topic":`...)
	dst = appendString(dst, m.Topic)
	dst = appendMember(dst, m)
	return append(dst, '}')
}

// appendMember appends ,"session":…,"user":…[,"info":…].
func appendMember(dst []byte, m engine.PresenceMember) []byte {
	dst = append(dst, `,"session":`...)
	dst = appendString(dst, m.Session)
	dst = append(dst, `,"user":`...)
	dst = appendString(dst, m.User)
	if len(m.Info) > 0 {
		dst = append(dst, `,"info":`...)
		dst = append(dst, m.Info...)
	}
	return dst
}

// checkPresence validates "presence" on a subscribe.
func (cn *conn) checkPresence(req *request, pattern, group string) (bool, *protoError) {
	if req.Presence == nil || !*req.Presence {
		return false, nil
	}
	switch {
	case group != "":
		return false, perr(codeBadRequest, "presence applies to plain subscriptions only")
	case trie.ValidateTopic(pattern) != nil:
		return false, perr(codeBadRequest, "presence needs a topic, not a wildcard pattern")
	case cn.rt.pres.eng == nil:
		return false, perr(codeBadRequest, "this gateway's engine does not support presence")
	}
	if p := cn.rt.settings().presenceOff(pattern); p != "" { // topic_policies_access.go
		return false, cn.rt.forbidden("presence", "presence is off on %s (topic policy %s)", quoteInput(pattern), quoteInput(p))
	}
	return true, nil
}

// presenceJoin puts s's session in its topic's presence set.
func (rt *Router) presenceJoin(ctx context.Context, s *subscription) *protoError {
	return rt.presenceJoinReplacing(ctx, s, "")
}

// presenceJoinReplacing is presenceJoin for a session that takes the
// place of session replaces (an MQTT session taken over: the connection
// it replaces may still be listed, on another node, until it ends): at
// the listing bound, a listed member replaces does not count, so the
// session is listed as the one it replaces was.
func (rt *Router) presenceJoinReplacing(ctx context.Context, s *subscription, replaces string) *protoError {
	h := rt.pres
	if !h.allowJoin(s.c) {
		return refuse(limitPresenceJoinRate, codeRateLimited,
			"presence joins are limited to %g per second per session (burst %d); subscribe with presence less often", float64(h.joinRate), h.joinBurst)
	}
	_, n, err := h.eng.PresenceList(ctx, s.pattern, 0)
	if err != nil {
		return toProto(err)
	}
	if n >= h.max && replaces != "" && replaces != s.c.id {
		// The listed members are at most the bound: one read of them.
		listed, _, err := h.eng.PresenceList(ctx, s.pattern, h.max)
		if err != nil {
			return toProto(err)
		}
		if slices.ContainsFunc(listed, func(m engine.PresenceMember) bool { return m.Session == replaces }) {
			n--
		}
	}
	h.mu.Lock()
	set := h.local[s.pattern]
	if set == nil {
		set = map[*subscription]*presenceMember{}
		h.local[s.pattern] = set
	}
	set[s] = &presenceMember{s: s}
	h.mu.Unlock()
	who := s.c.who.load()
	m := engine.PresenceMember{Topic: s.pattern, Session: s.c.id, User: who.Subject, Info: who.Info, Hidden: n >= h.max}
	if err := h.eng.PresenceJoin(ctx, m); err != nil {
		rt.presenceForget(s)
		return toProto(err)
	}
	return nil
}

func (rt *Router) presenceForget(s *subscription) {
	h := rt.pres
	h.mu.Lock()
	pm := h.local[s.pattern][s]
	delete(h.local[s.pattern], s)
	if len(h.local[s.pattern]) == 0 {
		delete(h.local, s.pattern)
	}
	h.mu.Unlock()
	if pm != nil {
		h.endMember(pm)
	}
}

// presenceLeave takes s's session out of the presence set (the session may
// be gone: a fresh context).
func (rt *Router) presenceLeave(s *subscription) {
	rt.presenceForget(s)
	if s.c.ctx.Err() != nil {
		rt.pres.forgetJoins(s.c) // the session is ending
		if s.c.sess != nil {
			rt.pres.memberEnded(rt.log, s)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), defaultHookTimeout)
	defer cancel()
	if err := rt.pres.eng.PresenceLeave(ctx, s.pattern, s.c.id); err != nil {
		rt.log.Debug("presence leave failed", "topic", s.pattern, "err", err)
	}
}

// presenceReply builds {"topic","count","members"?}.
func (rt *Router) presenceReply(ctx context.Context, topic string, countOnly bool) (map[string]any, *protoError) {
	if pe := validTopic(&rt.opts.Bounds, topic); pe != nil {
		return nil, pe
	}
	if rt.pres.eng == nil {
		return nil, perr(codeBadRequest, "this gateway's engine does not support presence")
	}
	limit := rt.pres.max
	if countOnly {
		limit = 0
	}
	members, n, err := rt.pres.eng.PresenceList(ctx, topic, limit)
	if err != nil {
		return nil, toProto(err)
	}
	out := map[string]any{"topic": topic, "count": n}
	if !countOnly {
		list := make([]json.RawMessage, 0, len(members))
		for _, m := range members {
			b := appendMember([]byte{'{'}, m)
			b = append(b[:1], b[2:]...) // drop the leading comma
			list = append(list, append(b, '}'))
		}
		out["members"] = list
	}
	return out, nil
}

// presenceOp answers {"op":"presence","id","topic"}.
func (cn *conn) presenceOp(req *request) *protoError {
	if req.Topic == nil {
		return perr(codeBadRequest, `missing field "topic"`)
	}
	topic := *req.Topic
	if trie.ValidateTopic(topic) == nil && !cn.who.CanSubscribe(topic) && !cn.presenceMember(topic) {
		return cn.rt.forbidden("subscribe", "not allowed to see who is on %q", topic)
	}
	// A member's list is answered in order with its announcements:
	// those made while it is built follow the reply.
	pm := cn.presenceMemberOf(topic)
	if pm != nil {
		pm.beginListing()
	}
	out, pe := cn.rt.presenceReply(cn.ctx, topic, false)
	var reply []byte
	if pe == nil {
		reply = encodeReply("presence", req.ID, out)
	}
	if pm != nil {
		cn.rt.pres.endListing(pm, reply)
	} else if reply != nil {
		cn.sess.Send(session.Item{Frame: reply})
	}
	return pe
}

// presenceMemberOf returns the session's presence member of topic, if any.
func (cn *conn) presenceMemberOf(topic string) *presenceMember {
	cn.mu.Lock()
	s := cn.subNamed(subKey{topic, ""})
	cn.mu.Unlock()
	if s == nil || !s.presence.Load() {
		return nil
	}
	h := cn.rt.pres
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.local[topic][s]
}

// presenceMember reports whether the session holds a presence
// subscription on topic (allowed, perhaps by the hook).
func (cn *conn) presenceMember(topic string) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	s := cn.subNamed(subKey{topic, ""})
	return s != nil && s.presence.Load()
}

// httpPresence serves GET /v1/presence/{topic}[?count=1].
func (rt *Router) httpPresence(c echo.Context) error {
	topic := param(c, "topic")
	if trie.ValidateTopic(topic) == nil && !rt.principalOf(c).CanSubscribe(topic) {
		return rt.forbidden("subscribe", "not allowed to see who is on %q", topic)
	}
	out, pe := rt.presenceReply(c.Request().Context(), topic, c.QueryParam("count") == "1")
	if pe != nil {
		return pe
	}
	return c.JSON(http.StatusOK, out)
}
