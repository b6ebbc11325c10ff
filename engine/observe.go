package engine

import "context"

// ContextObserver is an optional extension of Observer, for an observer
// that can use what comes with an announcement. An engine calls
// AppendedContext instead of Appended, with one of two contexts:
//
//   - An engine that announces a record on the goroutine of the Append
//     that stored it, while that Append runs (as an in-memory engine
//     does), passes the Append's context, so that the observer can use
//     what the appending caller carried in it: the gateway finds there the
//     publishing session's deferred wakes (session.Deferral), so that the
//     fan-out of the frames of one read wakes each subscriber's writer
//     once.
//   - An engine that announces records from a goroutine of its own (the
//     live tail of a shared store) passes a context carrying the Batch of
//     the run of announcements the record is part of (WithBatch), so that
//     the observer can do once per run what it would otherwise do per
//     record: the gateway wakes each subscriber's writer once per run.
//
// An engine that does neither calls Appended, with no context.
type ContextObserver interface {
	Observer
	// AppendedContext is Appended for a record announced with ctx: the
	// context of the Append that stored it, on that Append's goroutine
	// before it returns, or one carrying the announcing goroutine's Batch.
	AppendedContext(ctx context.Context, r *Record)
}

// Announce tells o of r, announced with ctx (see ContextObserver):
// AppendedContext when o has it, Appended otherwise.
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
// other than its own work: room in a full partition under Block, another
// Append of the same MsgID that is still storing the first record, and
// any such wait an engine adds. The gateway flushes the deferred wakes of
// the publishing session there, so that the records announced before the
// wait are not held for it (a wait that skips the hook holds them for at
// most the session's bound on deferred wakes, session.Options.MaxDeferredWake).
func WithWaitHook(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, waitHookKey{}, f)
}

// BeforeWait calls the hook ctx carries (WithWaitHook), if any.
func BeforeWait(ctx context.Context) {
	if f, ok := ctx.Value(waitHookKey{}).(func()); ok {
		f()
	}
}

// Batch marks the end of a run of announcements an engine makes from a
// goroutine of its own: it announces each record of the run with a
// context carrying the Batch (WithBatch) and calls End once no further
// record is at hand, or after enough of them to bound how long the first
// one waits. An observer registers with Value, once for the Batch's life,
// a value of its own and a flush function; End calls the flush of every
// value looked up during the run. The gateway registers its deferred
// wakes this way, so that the records of one run reach each subscriber
// with one wake of its writer.
//
// The engine that owns a Batch keeps it for as long as it announces, so
// that what observers register is made once, and ends the run before it
// waits for anything other than the next record and before it stops
// announcing (at Close), so that nothing registered is held past its run.
// The zero Batch is ready to use.
//
// A Batch is not safe for concurrent use: the engine's announcing
// goroutine ends it, and observers use it only inside AppendedContext on
// that goroutine. Value and End allocate nothing once every value is made.
type Batch struct {
	vals []batchValue
}

// batchValue is one observer's registration with a Batch.
type batchValue struct {
	key   any
	val   any
	flush func()
	used  bool // looked up since the last End
}

type batchKey struct{}

// WithBatch returns a copy of ctx carrying b, for an engine to announce
// the records of b's runs with. An engine makes it once per Batch, not
// once per record.
func WithBatch(ctx context.Context, b *Batch) context.Context {
	return context.WithValue(ctx, batchKey{}, b)
}

// BatchOf returns the Batch ctx carries (WithBatch), nil when none.
func BatchOf(ctx context.Context) *Batch {
	b, _ := ctx.Value(batchKey{}).(*Batch)
	return b
}

// Value returns the value registered under key (compared with ==; a
// pointer or a type of the observer's own, as for context keys), and
// makes End of this run call its flush. The first lookup of key calls
// newValue for the value and its flush (which may be nil) and keeps them
// for the Batch's life.
func (b *Batch) Value(key any, newValue func() (val any, flush func())) any {
	for i := range b.vals {
		if v := &b.vals[i]; v.key == key {
			v.used = true
			return v.val
		}
	}
	val, flush := newValue()
	b.vals = append(b.vals, batchValue{key: key, val: val, flush: flush, used: true})
	return val
}

// End ends the run of announcements: it calls the flush of every value
// looked up since the last End, in the order the values were first
// registered. With none looked up it does nothing.
func (b *Batch) End() {
	for i := range b.vals {
		if v := &b.vals[i]; v.used {
			v.used = false
			if v.flush != nil {
				v.flush()
			}
		}
	}
}
