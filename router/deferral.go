package router

// Deferred wakes for the fan-out of WebSocket publishes. A session's
// publishes are appended with a context carrying the session's
// session.Deferral: an engine that announces a record on the appending
// goroutine (engine.ContextObserver) lets Appended queue the record for
// every matching session without waking their writers, and the session's
// reader wakes each once before it reads its socket again. The frames of
// one read of a publisher then reach each subscriber as one batch: one
// goroutine hand-off and one write per subscriber and read, rather than
// per message (docs/BENCHMARKS.md, issue #16).
//
// The reader flushes before it waits for anything but its socket: before
// an op other than publish (which waits for the publishes before it),
// before a publish hook's round trip, before waiting for room in the
// publish pipeline, and, through engine.WithWaitHook, before the engine
// waits for room in a full Block partition.

import (
	"context"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/session"
)

type deferralKey struct{}

// publishCtx returns the context the session's publishes are appended
// with: cn.ctx carrying the session's Deferral. It is made on the first
// publish (reader goroutine only), so that sessions that never publish
// hold none of it.
func (cn *conn) publishCtx() context.Context {
	if cn.pubCtx == nil {
		d := cn.sess.Deferral()
		cn.pubCtx = engine.WithWaitHook(context.WithValue(cn.ctx, deferralKey{}, d), d.Flush)
	}
	return cn.pubCtx
}

// flushDeferred wakes the writers the session's publishes queued for;
// the reader calls it before it waits for anything but its socket.
func (cn *conn) flushDeferred() { cn.sess.Deferral().Flush() }

// deferralOf returns the Deferral ctx carries, nil when none.
func deferralOf(ctx context.Context) *session.Deferral {
	d, _ := ctx.Value(deferralKey{}).(*session.Deferral)
	return d
}

// AppendedContext implements engine.ContextObserver: Appended, with the
// wakes deferred to the publishing session's reader when the append came
// from one.
func (rt *Router) AppendedContext(ctx context.Context, rec *engine.Record) {
	rt.fanOut(rec, deferralOf(ctx))
}

var _ engine.ContextObserver = (*Router)(nil)
