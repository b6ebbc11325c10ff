package router

// The session core: one lifecycle for the sessions of every transport
// (see the package doc, "Transports").
//
//	admit    admitConn (limits.go): the connect rate and connection limits,
//	         then the credential; the transport owns the slot's release
//	new      newConn: the protocol state; the transport makes cn.sess
//	         with sessionOptions
//	list     addConn (router.go): Shutdown sees it and waits for it; false
//	         once Shutdown began, and the transport refuses as it can
//	start    runStart: counted, its context, the welcome, the token's
//	         expiry timers (refresh.go)
//	run      the ops (conn.go, subscribe.go, publish.go, ...), every
//	         refusal through errorFrame; deliveries (router.go,
//	         subscription.go) with drops and gaps back through onDrop and
//	         encodeGap
//	end      runEnd, once the session ended (the client, Close, a bound,
//	         the token's expiry, Shutdown): teardown removes every
//	         subscription (removeLocked, dropSub), the timers stop, the
//	         session is unlisted and its slot given back
//
// The WebSocket runs it in serveWS (conn.go), SSE in serveSSE (sse.go).

import (
	"context"
	"errors"
	"github.com/labstack/echo/v4"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/session"
)

// conn is one session's protocol state, whatever its transport: its
// credential, subscriptions, publishes in flight and limits.
type conn struct {
	rt      *Router
	sess    *session.Session
	id      string
	who     heldPrincipal // what the session's credential allows; a refresh or a reload replaces it (recheck.go)
	set     *liveSettings // the live settings its credential was checked with at admission: its per-session limits (reload.go)
	client  string        // clientKey at connect, for the bounds on groups (group_count.go)
	expiry  *sessionExpiry
	limiter *rate.Limiter // nil: unlimited (or a session without ops)
	// pipe is the publishes in flight and the replies owed (publish.go),
	// made by the session's first publish (a subscriber that never
	// publishes needs none; ownPipe), set by the reader goroutine under
	// mu; nil before and without ops. The
	// reader and what runs after it read it freely, other goroutines
	// through publishPipe.
	pipe   *pubPipe
	ctx    context.Context
	cancel context.CancelFunc
	pubCtx context.Context // ctx with the session's Deferral (deferral.go); reader goroutine only
	wg     sync.WaitGroup  // catch-up goroutines

	// lean: the session asked for the lean envelope (envelope.go).
	lean bool
	// kind is the session's transport.
	kind transportKind
	// mqtt is an MQTT session's own state (mqtt_conn.go); nil otherwise.
	mqtt *mqttSession
	// info is what GET /v1/sessions shows of it (sessions_api.go).
	info sessionInfo

	mu sync.Mutex // guards the fields below
	// byID holds the session's subscriptions by id; byKey indexes them by
	// pattern and group once there are many (conn_subs.go).
	byID   map[uint64]*subscription
	byKey  map[subKey]*subscription
	nextID uint64
	closed bool
	// filterBytes is the filter bytes of the subscriptions in byID
	// (bounded by Bounds.MaxSessionFilterBytes).
	filterBytes int
	// leases and leaseBytes are what the group memberships reserved
	// (group_leases.go).
	leases     int
	leaseBytes int64
}

type subKey struct{ pattern, group string }

// refusedSession is the Handler of a session refused after its upgrade:
// it ignores what the client sends while the session closes.
type refusedSession struct{}

func (refusedSession) HandleFrame(*session.Session, []byte) {}

// transportKind is the transport a session runs on: what the session core
// needs to know of it (see the package doc, "Transports").
type transportKind uint8

const (
	// transportWS is a WebSocket (conn.go): the client sends ops, each
	// answered in order.
	transportWS transportKind = iota
	// transportSSE is a Server-Sent Events stream (sse.go): one-way; it
	// subscribes from its request and only receives.
	transportSSE
	// transportMQTT is an MQTT connection over TCP or WebSocket
	// (mqtt*.go): the client sends packets, which become ops.
	transportMQTT
)

// ops reports whether the client sends ops on the session (subscribe,
// publish, ack, refresh, …).
func (k transportKind) ops() bool { return k != transportSSE }

// String names the transport as metrics and GET /v1/sessions do.
func (k transportKind) String() string {
	switch k {
	case transportSSE:
		return "sse"
	case transportMQTT:
		return "mqtt"
	}
	return "ws"
}

// newConn returns the protocol state of a session admitted with who
// (admitConn) on a transport of kind k. The transport then makes the
// session (cn.sess) with cn.sessionOptions, lists it (addConn), starts it
// (runStart) and tears it down once it has ended (runEnd).
func (rt *Router) newConn(c echo.Context, k transportKind, who *principal, lean bool) *conn {
	cn := &conn{rt: rt, kind: k, id: newID(), lean: lean, set: rt.admittedWith(c),
		client: clientKey(who, c.RealIP()), info: newSessionInfo(c, k.String(), who),
		byID: make(map[uint64]*subscription)}
	cn.who.p.Store(who)
	if k.ops() {
		if cn.set.publishRate > 0 {
			cn.limiter = rate.NewLimiter(rate.Limit(cn.set.publishRate), cn.set.publishBurst)
		}
	}
	return cn
}

// sessionOptions returns the options cn's session runs with: the
// Router's, with the session core's callbacks (queue_full gaps, drops,
// writes of group deliveries).
func (cn *conn) sessionOptions() session.Options {
	sopts := cn.rt.opts.Session
	sopts.EncodeGap = cn.encodeGap
	sopts.OnDrop = cn.onDrop
	sopts.OnSent = cn.rt.onSent
	return sopts
}

// welcomeFrame encodes the session's welcome. A one-way session announces
// only the limits that apply to what it receives.
func (cn *conn) welcomeFrame(sopts session.Options) []byte {
	var limits map[string]any
	if cn.kind.ops() {
		limits = cn.rt.welcomeLimits(sopts, cn.set)
	} else {
		limits = map[string]any{
			"max_subscriptions": cn.set.maxSubscriptions,
			"queue_messages":    sopts.QueueMessages,
		}
	}
	welcome := map[string]any{
		"session": cn.id,
		"epoch":   cn.rt.eng.Epoch(),
		"limits":  limits,
	}
	if cn.lean {
		welcome["envelope"] = envelopeLean
	}
	return encodeReply("welcome", nil, welcome)
}

// runStart counts the session, makes its context, queues the welcome,
// starts the token's expiry timers and checks the credential again if a
// reload came since it was checked (recheck.go). Every transport's session starts here
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
	// A reload after the credential was checked and before the session
	// was listed (where Reload's re-check finds it): check it again now.
	if s := rt.settings(); s != cn.set {
		cn.recheck(s, nil)
	}
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
	subs := make([]*subscription, 0, len(cn.byID))
	for _, s := range cn.byID {
		subs = append(subs, s)
	}
	for _, s := range subs {
		cn.removeLocked(s)
	}
	cn.mu.Unlock()
	for _, s := range subs {
		cn.rt.dropSub(s)
	}
	cn.wg.Wait()
}

func toProto(err error) *protoError {
	var pe *protoError
	if errors.As(err, &pe) {
		return pe
	}
	code, msg, _ := classify(err)
	return &protoError{Code: code, Msg: msg}
}

// errorFrame counts a refused request and encodes its error reply.
func (cn *conn) errorFrame(id []byte, pe *protoError) []byte {
	cn.rt.countLimit(pe)
	cn.rt.m.rejected.WithLabelValues(pe.Code).Inc()
	return encodeError(id, pe.Code, pe.Msg)
}

// replyError counts a refused request and queues its error reply after
// every reply the session owes before it (publish.go); a session that has
// not published owes none. Called on the reader goroutine.
func (cn *conn) replyError(id []byte, pe *protoError) {
	cn.replyOwed(cn.errorFrame(id, pe))
}

// replyOwed queues a reply after every reply the session owes before it
// (publish.go); a session that has not published owes none. Called on
// the reader goroutine.
func (cn *conn) replyOwed(frame []byte) {
	if cn.pipe == nil {
		cn.sess.Send(session.Item{Frame: frame})
		return
	}
	cn.pipe.reply(cn.sess, frame)
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
	return encodeGap(dst, pattern, group, st.Topic, st.Partition, from, to, "queue_full")
}

// onDrop implements session.Options.OnDrop: a plain subscription's queue
// dropped a message. It is counted, and recorded as a queue_full dead letter
// when the subscription's dead-letter bucket allows (Bounds.DeadLetterRate),
// asynchronously: this runs under the session's queue lock, on the engine's
// fan-out path, so a mass of non-reading subscribers must cost little here.
func (cn *conn) onDrop(it *session.Item) {
	policy := it.Policy
	if policy > session.Disconnect {
		policy = session.DropOld
	}
	cn.rt.bm.drops[policy].Inc()
	rec, ok := refRecord(it.Ref)
	if !ok {
		return
	}
	pattern, record := "", false
	now := time.Now()
	cn.mu.Lock()
	if s := cn.byID[it.Stream.Sub]; s != nil {
		if s.delta != nil {
			s.delta.gen.Add(1) // its partitions start again with full messages
		}
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
