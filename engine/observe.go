package engine

import "context"

// ContextObserver is an optional extension of Observer. An engine that
// announces a record on the goroutine of the Append that stored it, while
// that Append runs (as an in-memory engine does), calls AppendedContext
// with the Append's context instead of Appended, so that the observer can
// use what the appending caller carried in it: the gateway finds there the
// publishing session's deferred wakes (session.Deferral), so that the
// fan-out of the frames of one read wakes each subscriber's writer once.
// Engines that announce records from goroutines of their own call
// Appended, with no context.
type ContextObserver interface {
	Observer
	// AppendedContext is Appended for a record stored by an Append made
	// with ctx; it runs on that Append's goroutine, before it returns.
	AppendedContext(ctx context.Context, r *Record)
}

// Announce tells o of r, stored by an Append made with ctx on the calling
// goroutine: AppendedContext when o has it, Appended otherwise.
func Announce(ctx context.Context, o Observer, r *Record) {
	if co, ok := o.(ContextObserver); ok {
		co.AppendedContext(ctx, r)
		return
	}
	o.Appended(r)
}

type waitHookKey struct{}

// WithWaitHook returns a copy of ctx carrying f, which an engine calls
// (BeforeWait) before an Append made with the context waits for something
// other than its own work, such as room in a full partition under Block.
// The gateway flushes the deferred wakes of the publishing session there,
// so that the records announced before the wait are not held for it.
func WithWaitHook(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, waitHookKey{}, f)
}

// BeforeWait calls the hook ctx carries (WithWaitHook), if any.
func BeforeWait(ctx context.Context) {
	if f, ok := ctx.Value(waitHookKey{}).(func()); ok {
		f()
	}
}
