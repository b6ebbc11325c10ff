package engine

import "context"

// AsyncAppender is an optional capability of an Engine: appends that do not
// wait for each other, so a publisher can have several in flight (the
// router pipelines a WebSocket session's publishes through it). An engine
// whose Append does not wait on a network may implement it by calling
// Append and then done.
//
// The router uses it through a type assertion and falls back to Append.
type AsyncAppender interface {
	// AppendAsync starts an append of m and calls done exactly once with
	// what Append would have returned, when Append would have returned:
	// the record is stored and announced to observers, or the error is
	// final. done may run before AppendAsync returns (on the caller's
	// goroutine) or later on a goroutine of the engine; it must not block
	// or call back into the engine. ctx bounds the append until done runs.
	//
	// Order: records of AppendAsync calls made one after another (each
	// returning before the next starts) that go to the same partition are
	// stored in call order, as if each call had been an Append that
	// returned before the next, and their done calls come in that order.
	// Records of different partitions, and done calls across partitions,
	// are in no particular order. A call may block, for instance while a
	// Block partition is full or the engine's own bound on appends in
	// flight is reached.
	AppendAsync(ctx context.Context, m Message, done func(Appended, error))
}
