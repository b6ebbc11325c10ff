package router

import (
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/session"
)

// Token refresh on an open session.
//
// A session's credential may expire. Before it does the gateway sends
//
//	{"op":"refresh_required","expires":"RFC3339"}
//
// (AuthOptions.RefreshLead before exp; by default 30 s or a tenth of the
// token's lifetime, whichever is less), and the client answers with
//
//	{"op":"refresh","id":N,"token":"…"}  →  {"op":"refreshed","id":N,"expires":"RFC3339"}
//
// The new token's grants apply at once: every subscription they no longer
// allow ends with {"op":"unsubscribed","pattern","group"?,"reason":"forbidden"}
// (sent before the refreshed reply), and later requests are judged by the
// new grants. A session that is not refreshed by exp is closed with 1008.
// A refresh whose token is refused leaves the session on its old credential
// (and its old deadline); a refresh may not change the token's subject.
//
// Concurrency: the session's principal (conn.who) is replaced by a refresh
// on the session's reader goroutine, or by a reload's re-check
// (recheck.go), and read from any; the expiry timers run on their own
// goroutines and touch only the sessionExpiry under its mutex and the
// session's (concurrency-safe) Send and Close.

// sessionExpiry warns a session before its credential expires and closes
// it when it does. It is safe for concurrent use.
type sessionExpiry struct {
	cn *conn

	mu      sync.Mutex // guards the fields below
	gen     uint64     // bumped by every arm; stale timer callbacks compare it
	warn    *time.Timer
	close   *time.Timer
	stopped bool
}

// startExpiry arms the timers for the session's current principal.
func (cn *conn) startExpiry() *sessionExpiry {
	e := &sessionExpiry{cn: cn}
	e.arm(cn.who.load())
	return e
}

// arm replaces the timers with those of p (none when p never expires).
func (e *sessionExpiry) arm(p *principal) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return
	}
	e.stopTimers()
	e.gen++
	if p.Expires.IsZero() {
		return
	}
	gen, exp := e.gen, p.Expires
	now := time.Now()
	if lead := e.cn.rt.settings().auth.refreshLead(p, now); lead > 0 {
		e.warn = time.AfterFunc(max(exp.Add(-lead).Sub(now), 0), func() {
			e.mu.Lock()
			live := e.gen == gen && !e.stopped
			e.mu.Unlock()
			if live {
				e.cn.rt.lim.refreshes.WithLabelValues("required").Inc()
				e.cn.sess.Send(session.Item{Frame: encodeReply("refresh_required", nil, map[string]any{
					"expires": exp.UTC().Format(time.RFC3339),
				})})
			}
		})
	}
	e.close = time.AfterFunc(exp.Sub(now), func() {
		e.mu.Lock()
		live := e.gen == gen && !e.stopped
		e.mu.Unlock()
		if live {
			e.cn.rt.lim.sessionsExpired.Inc()
			e.cn.sess.Close(websocket.StatusPolicyViolation, "token expired")
		}
	})
}

func (e *sessionExpiry) stopTimers() {
	if e.warn != nil {
		e.warn.Stop()
		e.warn = nil
	}
	if e.close != nil {
		e.close.Stop()
		e.close = nil
	}
}

// stop ends the timers for good; a callback already running sees stopped.
func (e *sessionExpiry) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stopped = true
	e.stopTimers()
}

// refresh handles the refresh op: it authenticates the new token, applies
// its grants to the session's subscriptions and re-arms the expiry.
func (cn *conn) refresh(req *request) *protoError {
	if req.Token == nil {
		return perr(codeBadRequest, `missing field "token"`)
	}
	set := cn.rt.settings()
	p, ae := set.auth.authenticate(*req.Token)
	if ae != nil {
		cn.rt.lim.refreshes.WithLabelValues("refused").Inc()
		cn.rt.lim.authFailures.WithLabelValues(ae.Reason).Inc()
		return perr(codeUnauthorized, "%s", ae.Msg)
	}
	if old := cn.who.load(); !old.Admin && !old.Anonymous && old.Subject != p.Subject {
		cn.rt.lim.refreshes.WithLabelValues("refused").Inc()
		return cn.rt.forbidden("refresh", "a refresh must keep the token's subject")
	}
	cn.who.store(p)
	cn.revoke("refresh")
	if cn.expiry != nil {
		cn.expiry.arm(p)
	}
	// A reload during the check: the new token is checked again with the
	// new settings, as Reload's re-check may have seen the old one.
	if now := cn.rt.settings(); now != set {
		cn.recheck(now, nil)
	}
	cn.rt.lim.refreshes.WithLabelValues("ok").Inc()
	fields := map[string]any{}
	if !p.Expires.IsZero() {
		fields["expires"] = p.Expires.UTC().Format(time.RFC3339)
	}
	cn.sess.Send(session.Item{Frame: encodeReply("refreshed", req.ID, fields)})
	return nil
}

// revoke ends every subscription the session's principal no longer allows,
// each with an unsubscribed frame of reason "forbidden"; op (refresh,
// reload) labels them in forbidden_total.
func (cn *conn) revoke(op string) {
	var gone []*subscription
	who := cn.who.load()
	cn.mu.Lock()
	for _, s := range cn.byID {
		if allowedStill(who, s) {
			continue
		}
		cn.removeLocked(s)
		gone = append(gone, s)
	}
	cn.mu.Unlock()
	for _, s := range gone {
		cn.rt.dropSub(s)
		cn.rt.lim.forbidden.WithLabelValues(op).Inc()
		fields := map[string]any{"pattern": s.pattern, "reason": codeForbidden}
		if s.group != "" {
			fields["group"] = s.group
		}
		cn.sess.Send(session.Item{Frame: encodeReply("unsubscribed", nil, fields)})
	}
}

// allowedStill reports whether who still allows s: by its grants, or
// because the subscribe hook allowed it for this user (a refresh keeps the
// user).
func allowedStill(who *principal, s *subscription) bool {
	if s.hookAllowed {
		return true
	}
	if s.group != "" && !who.CanJoin(s.group) {
		return false
	}
	return who.CanSubscribe(s.pattern)
}
