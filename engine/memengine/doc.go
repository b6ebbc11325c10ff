// Package memengine is the embedded, in-memory implementation of
// engine.Engine: a partitioned ring-buffer log per topic, a synchronous live
// tail, consumer groups with leases, retries and dead letters, all held in
// the gateway's process and lost when it stops (a new Engine has a new
// Epoch).
//
// It passes the shared conformance suite in engine/enginetest with every
// feature, including an injected clock: age retention, ack timeouts,
// backoff and block timeouts all use Options.Clock, so a fake clock drives
// them deterministically. No background goroutine polls; age retention is
// applied lazily whenever a partition is appended to, read, resolved,
// inspected or delivered from.
//
// # Concurrency
//
// An Engine is safe for concurrent use by multiple goroutines. New starts no
// goroutine; the only goroutines running engine code are the Clock's timer
// callbacks (ack timeouts, backoffs, block timeouts), and Close stops the
// timers and waits for callbacks already running.
//
// Callbacks are made synchronously, with engine locks held:
//
//   - Observer.Appended runs inside Append while the record's partition is
//     locked, which is what makes appends and their announcement atomic and
//     ordered per partition; an engine.ContextObserver gets AppendedContext
//     instead, with the Append's context. TopicDeleted runs with no engine
//     lock held.
//   - Consumer.Deliver and Consumer.Skipped run with that group's lock
//     held, and so does a HandBack's call of MemberRef.Later (through
//     AllUnsent), so that no delivery falls between the member's lists.
//
// None may block, and neither may call back into the Engine: doing so
// deadlocks. A consumer hands the delivery to its own goroutine or queue and
// acks from there.
//
// # Lock order
//
// Locks are taken only in this order (a lock may be skipped, never taken
// out of order):
//
//  1. Engine.gmu: the map of groups and their pattern index (not the
//     groups' state); held only to find, create or delete a group.
//  2. group.mu: one group's members, cursors and flight windows; timer
//     callbacks of the group take it. Never two groups' locks at once.
//  3. Engine.topicsMu: creating and deleting topics (lookups are lock-free
//     through a sync.Map).
//  4. partition.mu: one partition's records, retention counters, its
//     block-policy floor and the list of cursors with members on it;
//     observers are called under it.
//  5. Engine.dlMu: the dead-letter store.
//
// Leaf locks, never held while taking another: topic.dmu (the dedupe map),
// the mutex in Engine.life (closed flag and the running timer callbacks),
// and the mutex in Engine.observers (registering observers; Append reads
// the observer list through an atomic pointer). nodeServer.mu (nodes.go)
// is held, shared, while a node request's handler runs, and by nothing else.
//
// Append takes partition.mu, releases it, and only then hands new records
// to the groups with a member on the partition (the partition's active
// list, read with one atomic load), taking each one's group.mu in turn: no
// engine-wide lock, and an append costs what those live groups need, not
// O(all groups). Groups are indexed by pattern, so creating or deleting a
// topic visits only the groups whose pattern matches it. A block-policy
// Append waits with no lock held.
package memengine
