package router

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"
	"golang.org/x/time/rate"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/session"
	"github.com/switchyard/switchyard/trie"
)

// conn is one WebSocket session's protocol state.
type conn struct {
	rt      *Router
	sess    *session.Session
	id      string
	who     *principal // what the session's credential allows; reader goroutine only (refresh replaces it)
	expiry  *sessionExpiry
	limiter *rate.Limiter // nil: unlimited
	pipe    *pubPipe      // publishes in flight and replies owed (publish.go)
	ctx     context.Context
	cancel  context.CancelFunc
	pubCtx  context.Context // ctx with the session's Deferral (deferral.go); reader goroutine only
	wg      sync.WaitGroup  // catch-up goroutines

	// lean: the session asked for the lean envelope (envelope.go).
	lean bool
	// info is what GET /v1/sessions shows of it (sessions_api.go).
	info sessionInfo

	mu     sync.Mutex // guards the fields below
	subs   map[subKey]*subscription
	byID   map[uint64]*subscription
	nextID uint64
	closed bool
	// filterBytes is the filter bytes of the subscriptions in subs
	// (bounded by Bounds.MaxSessionFilterBytes).
	filterBytes int
	// leases and leaseBytes are what the group memberships reserved
	// (groupleases.go).
	leases     int
	leaseBytes int64
}

type subKey struct{ pattern, group string }

func (rt *Router) serveWS(c echo.Context) error {
	if rt.closing.Load() {
		return perr(codeShuttingDown, "server is shutting down")
	}
	var lean bool
	switch env := c.QueryParam("envelope"); env {
	case envelopeFull:
	case envelopeLean:
		lean = true
	default:
		return perr(codeBadRequest, `envelope: want "lean" or nothing`)
	}
	// The limits before the credential, which may cost a hook call.
	who, release, err := rt.admitConn(c)
	if err != nil {
		return err
	}
	if release == nil {
		return nil // admitConn wrote the refusal
	}
	cn := &conn{rt: rt, id: newID(), who: who, lean: lean, info: newSessionInfo(c, "ws", who), subs: make(map[subKey]*subscription), byID: make(map[uint64]*subscription),
		pipe: newPubPipe(rt.opts.PublishPipeline, rt.opts.PublishPipelineBytes)}
	if rt.opts.PublishRate > 0 {
		cn.limiter = rate.NewLimiter(rate.Limit(rt.opts.PublishRate), rt.opts.PublishBurst)
	}
	sopts := rt.opts.Session
	sopts.EncodeGap = cn.encodeGap
	sopts.OnDrop = cn.onDrop
	sopts.OnSent = rt.onSent
	sess, err := session.Accept(c.Response(), c.Request(), rt.acceptOptions(), cn.id, sopts)
	if err != nil {
		release()
		// Accept has written the HTTP error response.
		rt.log.Debug("websocket accept failed", "err", err)
		return nil
	}
	cn.sess = sess
	if !rt.addConn(cn) {
		// Shutdown began after the check above: the client has its 101,
		// so the refusal is a close frame, written and answered by the
		// session's own close handshake (bounded by its write timeout and
		// the library's close timeout) on this goroutine.
		release()
		sess.Close(websocket.StatusGoingAway, "server shutting down")
		if err := sess.Run(context.Background(), refusedSession{}); err != nil {
			rt.log.Debug("refused session ended", "err", err)
		}
		return nil
	}
	// The session runs on goroutines of its own and the handler returns:
	// net/http and echo then drop what they hold for the request (the
	// request, its headers and context, echo's context, the connection's
	// state and buffers), and an idle reader waits on a fresh goroutine's
	// small stack instead of under the handshake's frames (session.Start).
	// Shutdown waits for it (addConn counted it in rt.wg).
	cn.runStart(cn.welcomeFrame(sopts))
	// Shutdown closes every session itself, so the session needs no
	// context that is ever done; one that is would cost each session an
	// AfterFunc and a children map in cn.ctx (about 0.4 KiB of an idle
	// connection).
	if err := sess.Start(context.WithoutCancel(cn.ctx), cn, func(err error) { cn.runEnd(err, release) }); err != nil {
		cn.runEnd(err, release) // not started before: cannot happen
	}
	return nil
}

// refusedSession is the Handler of a session refused after its upgrade:
// it ignores what the client sends while the session closes.
type refusedSession struct{}

func (refusedSession) HandleFrame(*session.Session, []byte) {}

// welcomeFrame encodes the session's welcome.
func (cn *conn) welcomeFrame(sopts session.Options) []byte {
	welcome := map[string]any{
		"session": cn.id,
		"epoch":   cn.rt.eng.Epoch(),
		"limits":  cn.rt.welcomeLimits(sopts),
	}
	if cn.lean {
		welcome["envelope"] = envelopeLean
	}
	return encodeReply("welcome", nil, welcome)
}

// runStart counts the session, makes its context, queues the welcome and
// starts the token's expiry timers. Every transport's session starts here
// (WebSocket: serveWS; SSE: serveSSE), once it holds its connection-limit
// slot (reserveConn) and is listed (addConn), and ends with runEnd.
func (cn *conn) runStart(welcome []byte) {
	rt := cn.rt
	rt.m.connections.Inc()
	rt.m.connectsTotal.Inc()
	cn.ctx, cn.cancel = context.WithCancel(rt.ctx)
	cn.sess.Send(session.Item{Frame: welcome})
	// The session ends when its token does unless it is refreshed (see
	// refresh.go); the timers stop when the session ends first.
	cn.expiry = cn.startExpiry()
}

// runEnd tears the session down once it has ended with err, in the
// reverse order of runStart, counts the limit that ended it, if any, and
// gives back its connection-limit slot, whatever the session's transport.
func (cn *conn) runEnd(err error, release func()) {
	rt := cn.rt
	if errors.Is(err, session.ErrSlowConsumer) {
		rt.m.slowDisconnects.Inc()
	}
	rt.countSessionEnd(err)
	rt.log.Debug("session ended", "session", cn.id, "err", err)
	cn.teardown()
	cn.expiry.stop()
	cn.cancel()
	rt.m.connections.Dec()
	rt.removeConn(cn)
	release()
}

// teardown removes every subscription of a finished session.
func (cn *conn) teardown() {
	cn.cancel()
	// Appends in flight end soon with the context; their done callbacks
	// must not outlive the session's teardown.
	if cn.pipe != nil {
		cn.pipe.idle(nil)
	}
	cn.mu.Lock()
	cn.closed = true
	subs := make([]*subscription, 0, len(cn.subs))
	for _, s := range cn.subs {
		subs = append(subs, s)
	}
	clear(cn.subs)
	cn.mu.Unlock()
	for _, s := range subs {
		cn.rt.dropSub(s)
	}
	cn.wg.Wait()
}

// HandleFrame implements session.Handler: one client op.
func (cn *conn) HandleFrame(_ *session.Session, data []byte) {
	cn.rt.m.bytesIn.Add(float64(len(data)))
	req, pe := decodeRequest(data)
	if max := cn.rt.opts.Bounds.MaxIDBytes; len(req.ID) > max {
		// Too long to echo: the error goes without it.
		pe = refuse(limitIDBytes, codeBadRequest, "id is %d bytes; the limit is %d", len(req.ID), max)
		req.ID = nil
	}
	if pe == nil && req.Op != "publish" {
		// Every other op runs after the publishes before it (publish.go),
		// and may wait: what they fanned out goes first.
		cn.flushDeferred()
		cn.pipe.idle(cn.sess.Closing())
	}
	if pe == nil {
		pe = cn.dispatch(req)
	}
	if pe != nil {
		cn.pipe.reply(cn.sess, cn.errorFrame(req.ID, pe))
	}
}

func (cn *conn) dispatch(req *request) *protoError {
	switch req.Op {
	case "publish":
		return cn.publish(req)
	case "subscribe":
		return cn.subscribe(req)
	case "unsubscribe":
		return cn.unsubscribe(req)
	case "ack", "nack":
		return cn.ack(req)
	case "refresh":
		return cn.refresh(req)
	case "presence":
		return cn.presenceOp(req)
	case "ping":
		return cn.ping(req)
	}
	return perr(codeBadRequest, "unknown op %s", quoteInput(req.Op))
}

func toProto(err error) *protoError {
	var pe *protoError
	if errors.As(err, &pe) {
		return pe
	}
	code, msg, _ := classify(err)
	return &protoError{Code: code, Msg: msg}
}

func (cn *conn) publish(req *request) *protoError {
	if cn.limiter != nil && !cn.limiter.Allow() {
		cn.rt.m.publishes.WithLabelValues("ws", codeRateLimited).Inc()
		return perr(codeRateLimited, "publish rate limit of %g/s exceeded", cn.rt.opts.PublishRate)
	}
	msg, pe := parsePublish(req, cn.rt.opts.MaxMessageBytes, &cn.rt.opts.Bounds)
	if pe != nil {
		return pe
	}
	if pe := cn.authorizePublish(req, &msg.Data, &msg.Headers, msg.Topic); pe != nil {
		return pe
	}
	cn.publishAsync(req, msg)
	return nil
}

// append is the one path from a publish (WebSocket, HTTP, redrive) to the
// log; appendAsync (publish.go) is its pipelined form.
func (rt *Router) append(ctx context.Context, msg engine.Message, transport string) (engine.Appended, error) {
	if err := rt.preAppend(ctx, msg.Topic, transport); err != nil {
		return engine.Appended{}, err
	}
	start := time.Now()
	a, err := rt.eng.Append(ctx, msg)
	rt.postAppend(msg.Topic, transport, start, a, err)
	return a, err
}

// preAppend refuses an append while the router shuts down or when it would
// create a topic past MaxTopics, counting the refusal.
func (rt *Router) preAppend(ctx context.Context, topic, transport string) error {
	if rt.closing.Load() {
		rt.m.publishes.WithLabelValues(transport, codeShuttingDown).Inc()
		return perr(codeShuttingDown, "server is shutting down")
	}
	if err := rt.checkTopicLimit(ctx, topic); err != nil {
		code, _, _ := classify(err)
		rt.m.publishes.WithLabelValues(transport, code).Inc()
		return err
	}
	return nil
}

// postAppend counts an append's outcome.
func (rt *Router) postAppend(topic, transport string, start time.Time, a engine.Appended, err error) {
	rt.m.appendLatency.Observe(time.Since(start).Seconds())
	switch {
	case err != nil:
		code, _, _ := classify(err)
		if code == codeBackpressure {
			rt.m.backpressure.Inc()
		}
		rt.m.publishes.WithLabelValues(transport, code).Inc()
	case a.Duplicate:
		rt.m.publishes.WithLabelValues(transport, "duplicate").Inc()
	default:
		rt.m.publishes.WithLabelValues(transport, "ok").Inc()
		rt.stats.publishes.Add(1)
		rt.stats.countTopic(topic)
	}
}

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

// maxAckOffsets bounds the offsets one ack or nack frame may settle, so
// that one frame's work stays small beside the others of the session.
const maxAckOffsets = 1024

func (cn *conn) ack(req *request) *protoError {
	switch {
	case req.Group == nil:
		return perr(codeBadRequest, `missing field "group"`)
	case req.Topic == nil:
		return perr(codeBadRequest, `missing field "topic"`)
	case req.Partition == nil:
		return perr(codeBadRequest, `missing field "partition"`)
	case req.Offset != nil && req.Offsets != nil:
		return perr(codeBadRequest, `give "offset" or "offsets", not both`)
	case req.Offset == nil && req.Offsets == nil:
		return perr(codeBadRequest, `missing field "offset"`)
	case req.Offsets != nil && (len(req.Offsets) == 0 || len(req.Offsets) > maxAckOffsets):
		return perr(codeBadRequest, `"offsets" must list 1 to %d offsets`, maxAckOffsets)
	}
	if !cn.who.canJoin(*req.Group) && !cn.hookMember(*req.Group) {
		return cn.rt.forbidden("group", "not allowed to use group %q", *req.Group)
	}
	cn.mu.Lock()
	subscribed, member := false, ""
	for k, s := range cn.subs {
		if k.group == *req.Group {
			subscribed, member = true, s.member
			break
		}
	}
	cn.mu.Unlock()
	if !subscribed {
		return perr(codeNotSubscribed, "this session is not a member of group %s", quoteInput(*req.Group))
	}
	offsets := req.Offsets
	if offsets == nil {
		offsets = []int64{*req.Offset}
	}
	op, reason := "acked", ""
	if req.Op == "nack" {
		op = "nacked"
		if req.Error != nil {
			reason = nackReason(*req.Error)
		}
	}
	// Each offset is settled on its own; one that fails does not stop
	// the others. The first failure is the one reported.
	var first error
	var failed []int64
	for _, off := range offsets {
		pos := engine.Position{Topic: *req.Topic, Partition: *req.Partition, Offset: off}
		var err error
		if req.Op == "ack" {
			err = cn.rt.eng.Ack(cn.ctx, *req.Group, member, pos)
		} else {
			err = cn.rt.eng.Nack(cn.ctx, *req.Group, member, pos, reason)
		}
		if err == nil || (len(req.ID) == 0 && errors.Is(err, engine.ErrNotInFlight)) {
			// Without an id there is no reply; a late ack for a record
			// that was already handed on is harmless under at-least-once.
			continue
		}
		if first == nil {
			first = err
		}
		failed = append(failed, off)
	}
	if first != nil {
		pe := toProto(first)
		if req.Offsets != nil {
			pe = &protoError{Code: pe.Code, Msg: fmt.Sprintf("offsets %s: %s", offsetList(failed), pe.Msg)}
		}
		return pe
	}
	if len(req.ID) > 0 {
		cn.sess.Send(session.Item{Frame: encodeReply(op, req.ID, nil)})
	}
	return nil
}

// offsetList formats offsets for an error message, listing at most 16.
func offsetList(offs []int64) string {
	b := []byte{'['}
	for i, o := range offs {
		if i == 16 {
			b = fmt.Appendf(b, " and %d more", len(offs)-i)
			break
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, o, 10)
	}
	return string(append(b, ']'))
}

// encodeGap implements session.Options.EncodeGap for queue_full gaps.
func (cn *conn) encodeGap(dst []byte, st session.Stream, from, to int64) []byte {
	cn.mu.Lock()
	s := cn.byID[st.Sub]
	cn.mu.Unlock()
	pattern, group := "", ""
	if s != nil {
		pattern, group = s.pattern, s.group
	}
	cn.rt.m.gaps.WithLabelValues("queue_full").Inc()
	cn.rt.stats.gaps.Add(1)
	return encodeGap(dst, pattern, group, st.Topic, st.Partition, from, to, "queue_full")
}

// onDrop implements session.Options.OnDrop: a plain subscription's queue
// dropped a message. It is counted, and recorded as a queue_full dead letter
// when the subscription's dead-letter bucket allows (Bounds.DeadLetterRate),
// asynchronously: this runs under the session's queue lock, on the engine's
// fan-out path, so a mass of non-reading subscribers must cost little here.
func (cn *conn) onDrop(it *session.Item) {
	cn.rt.stats.drops.Add(1)
	policy := it.Policy
	if policy > session.Disconnect {
		policy = session.DropOld
	}
	cn.rt.bm.drops[policy].Inc()
	rec, ok := it.Ref.(*engine.Record)
	if !ok {
		return
	}
	pattern, record := "", false
	now := time.Now()
	cn.mu.Lock()
	if s := cn.byID[it.Stream.Sub]; s != nil {
		pattern = s.pattern
		record = s.dl.take(&cn.rt.opts.Bounds, now)
	}
	cn.mu.Unlock()
	if !record {
		cn.rt.bm.deadLettersSkipped.Inc()
		return
	}
	cn.rt.deadLetter(engine.DeadLetter{
		Reason:     engine.ReasonQueueFull,
		Subscriber: cn.id + " " + pattern,
		Record:     *rec,
		Error:      "outbound queue full (" + policy.String() + ")",
		Time:       now,
	})
}

func itoa(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// errorHandler renders every HTTP error as {"code","message"}.
func (rt *Router) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	var he *echo.HTTPError
	code, msg, status := "", "", 0
	if errors.As(err, &he) {
		status = he.Code
		switch status {
		case http.StatusNotFound:
			code, msg = codeNotFound, noEndpoint(c)
		case http.StatusMethodNotAllowed:
			code, msg = codeMethodNotAllowed, "method not allowed"
		case http.StatusRequestEntityTooLarge:
			code, msg = codeTooLarge, "request body too large"
		case http.StatusUnauthorized:
			code, msg = codeUnauthorized, "unauthorized"
		default:
			code, msg = codeBadRequest, http.StatusText(status)
		}
	} else {
		var pe *protoError
		if errors.As(err, &pe) {
			rt.countLimit(pe)
		}
		code, msg, status = classify(err)
		msg = capMessage(msg)
		if code == codeInternal {
			rt.log.Error("request failed", "path", c.Path(), "err", err)
		}
	}
	if code == codeBackpressure {
		c.Response().Header().Set("Retry-After", "1")
	}
	writeErrorJSON(c, status, code, msg)
}
