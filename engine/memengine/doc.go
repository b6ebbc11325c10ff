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
//     ordered per partition. TopicDeleted runs with no engine lock held.
//   - Consumer.Deliver and Consumer.Skipped run with the group lock held.
//
// Neither may block, and neither may call back into the Engine: doing so
// deadlocks. A consumer hands the delivery to its own goroutine or queue and
// acks from there.
//
// # Lock order
//
// Locks are taken only in this order (a lock may be skipped, never taken
// out of order):
//
//  1. Engine.gmu: all consumer-group state, every group, and each
//     partition's list of group readers.
//  2. Engine.topicsMu: creating and deleting topics (lookups are lock-free
//     through a sync.Map).
//  3. partition.mu: one partition's records, retention counters and its
//     block-policy floor; observers are called under it.
//  4. Engine.dlMu: the dead-letter list.
//
// Leaf locks, never held while taking another: topic.dmu (the dedupe map),
// the mutex in Engine.life (closed flag and the running timer callbacks),
// and the mutex in Engine.observers (registering observers; Append reads
// the observer list through an atomic pointer).
//
// Append takes partition.mu, releases it, and only then takes gmu to hand
// new records to the groups reading the partition, so a publisher never
// holds a partition while waiting for group state. A block-policy Append
// waits with no lock held.
package memengine
