package router

// The WebSocket transport: serveWS admits a session and runs it on the
// session core (lifecycle.go); HandleFrame decodes each text frame into an
// op and dispatches it. Also the ops that have no file of their own
// (publish, ack), the append path, and the HTTP error handler.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/session"
)

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
	// A page of another origin is refused before anything is taken, in
	// JSON like every HTTP error (the WebSocket library would answer in
	// plain text).
	if o := c.Request().Header.Get("Origin"); o != "" && !sameOrigin(c.Request(), o) && !originAllowed(rt.settings().origins, o) {
		return perr(codeForbidden, "a page of origin %s may not open a WebSocket to this gateway: add its host to --allowed-origins", quoteInput(o))
	}
	// The limits before the credential, which may cost a hook call.
	who, release, err := rt.admitConn(c)
	if err != nil {
		return err
	}
	if release == nil {
		return nil // admitConn wrote the refusal
	}
	cn := rt.newConn(c, transportWS, who, lean)
	sopts := cn.sessionOptions()
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

// HandleFrame implements session.Handler: one client op.
func (cn *conn) HandleFrame(_ *session.Session, data []byte) {
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
		if cn.pipe != nil {
			cn.pipe.idle(cn.sess.Closing())
		}
	}
	if pe == nil {
		pe = cn.dispatch(req)
	}
	if pe != nil {
		cn.replyError(req.ID, pe)
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

func (cn *conn) publish(req *request) *protoError {
	if cn.limiter != nil && !cn.limiter.Allow() {
		cn.rt.m.publishes.WithLabelValues("ws", codeRateLimited).Inc()
		return perr(codeRateLimited, "publish rate limit of %g/s exceeded", cn.set.publishRate)
	}
	msg, pe := parsePublish(req, cn.set.maxMessageBytes, &cn.rt.opts.Bounds)
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
		switch code {
		case codeBackpressure:
			rt.m.backpressure.Inc()
		case codeInternal:
			// The client is told only "internal error"; the cause is
			// for the operator.
			rt.log.Error("publish failed", "topic", topic, "transport", transport, "err", err)
		}
		rt.m.publishes.WithLabelValues(transport, code).Inc()
	case a.Duplicate:
		rt.m.publishes.WithLabelValues(transport, "duplicate").Inc()
	default:
		rt.m.publishes.WithLabelValues(transport, "ok").Inc()
		rt.stats.countTopic(topic)
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
	if !cn.who.CanJoin(*req.Group) && !cn.hookMember(*req.Group) {
		return cn.rt.forbidden("group", "not allowed to use group %q", *req.Group)
	}
	cn.mu.Lock()
	subscribed, member := false, ""
	for _, s := range cn.byID {
		if s.group == *req.Group {
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
