package router

// Re-checking open sessions when a reload changes the keys.
//
// A reload (Reload, reload.go) may remove the HMAC secret, public key,
// JWKS key or admin key that verified an open session's credential, stop
// admitting sessions without one, or change what a credential grants
// (claim names, the anonymous grants). Once the new settings are in force,
// every open session's credential is checked again with them, as a
// connect would be:
//
//   - A credential the new settings refuse ends the session: a WebSocket
//     is closed with 1008 and the reason CloseCredentialRefusedReason, an
//     SSE stream gets the same code and reason in its close event, an MQTT
//     client a DISCONNECT of reason "not authorized" (MQTT 5). Counted in
//     switchyard_reload_sessions_ended_total (the sessions checked are
//     counted in switchyard_reload_sessions_checked_total).
//   - A credential still accepted whose grants no longer allow some of the
//     session's subscriptions narrows the session as a refresh with fewer
//     grants does (refresh.go): each such subscription ends with
//     {"op":"unsubscribed","pattern","group"?,"reason":"forbidden"}, and
//     later requests are judged by the new grants. MQTT has no such notice:
//     an MQTT session whose grants no longer allow one of its
//     subscriptions is ended as above.
//   - Sessions the connect hook admitted keep the application's answer
//     (until its expires, or the session ends): the gateway holds no
//     credential of theirs to check.
//
// Sessions admitted without a credential (no key was configured, or as
// anonymous clients) are checked as a connect without one: a reload that
// configures the first key ends them unless anonymous clients are
// allowed, and then narrows them to the anonymous grants.
//
// A reload whose key options are unchanged (and which reads no key set)
// checks nothing. The re-check runs on a goroutine of its own (Shutdown
// waits for it), over a copy of the session list taken under the router's
// lock, in batches of recheckBatch sessions, with no lock held while
// tokens are verified; sessions sharing a credential within a batch verify
// it once. A newer re-check stops it: that one covers every session.
// A session listed after the copy was taken checks itself when it starts
// (runStart), and a refresh checked with the settings a reload replaced
// is checked again (refresh.go), so no credential escapes both.

import (
	"reflect"
	"slices"
	"sync/atomic"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"

	"github.com/switchyard/switchyard/router/internal/auth"
)

// CloseCredentialRefusedReason is the close reason (code 1008) of a
// session whose credential a reload's settings no longer accept.
const CloseCredentialRefusedReason = "credential no longer accepted"

// recheckBatch is how many sessions a reload's re-check verifies before it
// looks again whether it should go on: small enough that a newer reload or
// Shutdown stops it soon, large enough that sessions sharing a token
// verify it once.
const recheckBatch = 256

// heldPrincipal is a session's principal: replaced by a refresh (on the
// session's reader goroutine) or by a reload's re-check, read from any
// goroutine. Its Can methods ask the principal in force.
type heldPrincipal struct{ p atomic.Pointer[principal] }

func (h *heldPrincipal) load() *principal   { return h.p.Load() }
func (h *heldPrincipal) store(p *principal) { h.p.Store(p) }

// CanPublish reports whether the principal in force may publish to topic.
func (h *heldPrincipal) CanPublish(topic string) bool { return h.load().CanPublish(topic) }

// CanSubscribe reports whether the principal in force may subscribe to
// pattern.
func (h *heldPrincipal) CanSubscribe(pattern string) bool { return h.load().CanSubscribe(pattern) }

// CanJoin reports whether the principal in force may join group.
func (h *heldPrincipal) CanJoin(group string) bool { return h.load().CanJoin(group) }

// admittedKey is the echo.Context key of the live settings a connect's
// credential was checked with (admittedWith).
const admittedKey = "switchyard.admitted"

// authSettings returns the live settings in force for a connect's
// credential check and records them in c, so that the session made from
// it knows what its credential was checked with (admittedWith).
func (rt *Router) authSettings(c echo.Context) *liveSettings {
	s := rt.settings()
	c.Set(admittedKey, s)
	return s
}

// admittedWith returns the live settings a connect's credential was
// checked with (authSettings), else those in force.
func (rt *Router) admittedWith(c echo.Context) *liveSettings {
	if s, ok := c.Get(admittedKey).(*liveSettings); ok {
		return s
	}
	return rt.settings()
}

// keysChanged reports whether next may judge a credential otherwise than
// old: its auth options differ, or it reads a key set (whose keys may
// have changed whatever the options say).
func keysChanged(old, next *liveSettings) bool {
	return next.auth.JWKS() != nil || !reflect.DeepEqual(old.authOpts, next.authOpts)
}

// recheckStart starts the re-check of every open session with set, the
// settings Reload has just put in force. Called with reloadMu held, so
// that Shutdown (which takes it before it waits) sees the goroutine.
func (rt *Router) recheckStart(set *liveSettings) {
	gen := rt.recheckGen.Add(1)
	rt.wg.Add(1)
	rt.rechecks.Add(1)
	go func() {
		defer rt.wg.Done()
		defer rt.rechecks.Done()
		rt.recheckAll(set, gen)
	}()
}

// recheckAll checks every open session's credential with set, a batch at
// a time, until done, a newer re-check starts (rt.recheckGen is no longer
// gen) or the Router shuts down.
func (rt *Router) recheckAll(set *liveSettings, gen uint64) {
	conns := rt.connList()
	for batch := range slices.Chunk(conns, recheckBatch) {
		select {
		case <-rt.stopBG:
			return
		default:
		}
		if rt.recheckGen.Load() != gen {
			return // a newer re-check checks them all
		}
		memo := make(map[string]verdict, len(batch))
		for _, cn := range batch {
			cn.recheck(set, memo)
		}
		rt.lim.reloadChecked.Add(float64(len(batch)))
	}
}

// verdict is the outcome of checking one credential: its principal, or why
// it was refused.
type verdict struct {
	p  *principal
	ae *authError
}

// recheck checks the session's credential again with set (see the top of
// this file); memo, when not nil, holds the verdicts of credentials
// already checked with set.
func (cn *conn) recheck(set *liveSettings, memo map[string]verdict) {
	if cn.sess == nil {
		return
	}
	old := cn.who.load()
	if old != openPrincipal && !old.Anonymous && old.Credential == "" {
		return // admitted by the connect hook
	}
	v, ok := memo[old.Credential]
	if !ok {
		v.p, v.ae = set.auth.authenticate(old.Credential)
		if memo != nil {
			memo[old.Credential] = v
		}
	}
	if v.ae == auth.ErrExpired {
		return // its expiry timer closes it, as "token expired"
	}
	if v.ae != nil {
		cn.endRefused()
		return
	}
	if sameGrants(old, v.p) {
		return
	}
	if cn.kind == transportMQTT && !cn.allowsAll(v.p) {
		cn.endRefused()
		return
	}
	if !cn.who.p.CompareAndSwap(old, v.p) {
		return // a refresh replaced it meanwhile, and checks its own
	}
	cn.revoke("reload")
}

// endRefused closes the session because a reload refused its credential;
// a session already closing is left as it is, and not counted.
func (cn *conn) endRefused() {
	select {
	case <-cn.sess.Closing():
		return
	default:
	}
	cn.rt.lim.reloadEnded.Inc()
	cn.rt.log.Info("session ended: a reload no longer accepts its credential", "session", cn.id, "user", cn.info.user, "remote", cn.info.remote)
	cn.sess.Close(websocket.StatusPolicyViolation, CloseCredentialRefusedReason)
}

// allowsAll reports whether p allows every subscription of the session.
func (cn *conn) allowsAll(p *principal) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for _, s := range cn.byID {
		if !allowedStill(p, s) {
			return false
		}
	}
	return true
}

// sameGrants reports whether a and b allow the same.
func sameGrants(a, b *principal) bool {
	if a == b {
		return true
	}
	return a.Admin == b.Admin && slices.Equal(a.Grants.Publish, b.Grants.Publish) &&
		slices.Equal(a.Grants.Subscribe, b.Grants.Subscribe) && slices.Equal(a.Grants.Groups, b.Grants.Groups)
}
