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
// HTTP publishes (POST /v1/publish, one record or a batch) share one
// Deferral of the router's, flushed when the last HTTP publish being
// appended is done, so that overlapping requests reach each subscriber
// as one batch too (http_publish.go).
//
// Records an engine announces from a goroutine of its own (the JetStream
// tail, which brings every record on a multi-node deployment) come in runs
// of an engine.Batch instead: the router registers one Deferral of its own
// with the engine's Batch, used for every record of every run, and the
// engine flushes it as each run ends (or the bound below does), so that
// the records of one run reach each subscriber as one batch.
//
// The reader flushes before the waits it knows of: before an op other than
// publish (which waits for the publishes before it), before a publish
// hook's round trip, before waiting for room in the publish pipeline or
// for the shared read budget (session.ReadBudget), and, through
// engine.WithWaitHook, before the engine waits (for room in a full Block
// partition, for the first append of the same msg_id). Any other wait (a
// lookup of an unknown topic for MaxTopics, a wait an engine adds) is
// covered by the session's bound: a Deferral flushes itself once its
// oldest wake has waited session.Options.MaxDeferredWake (1 ms by
// default). A subscriber listed in a stalled publisher's Deferral is not
// listed in any other, so the bound is also what keeps every other
// publisher's records from waiting for that stall.

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

// batchKey is the key of a router's Deferral in an engine.Batch: one per
// router, for the routers that share an engine.
type batchKey struct{ rt *Router }

// newBatchDeferral makes a router's Deferral for an engine.Batch: flushed
// as each run of the batch ends, or once its first wake has waited the
// sessions' bound (Options.Session.MaxDeferredWake), should the engine's
// goroutine stall within a run.
func (rt *Router) newBatchDeferral() (any, func()) {
	d := session.NewDeferral(rt.opts.Session.MaxDeferredWake)
	return d, d.Flush
}

// AppendedContext implements engine.ContextObserver: Appended, with the
// wakes deferred to the publishing session's reader when the append came
// from one, or to the end of the run of announcements when the engine
// announced the record in an engine.Batch.
func (rt *Router) AppendedContext(ctx context.Context, rec *engine.Record) {
	d := deferralOf(ctx)
	if d == nil {
		if b := engine.BatchOf(ctx); b != nil {
			d = b.Value(batchKey{rt}, rt.newBatchDeferral).(*session.Deferral)
		}
	}
	rt.fanOut(rec, d)
}

var _ engine.ContextObserver = (*Router)(nil)
