// Package trie validates Switchyard topic and pattern names and indexes
// subscriptions by pattern so that a published topic finds its subscribers
// quickly.
//
// Topics are 1 to 16 dot-separated segments; patterns may use '*' for exactly
// one segment and a trailing '#' for one or more. Matches is the reference
// semantics; Trie is the index the gateway's fan-out uses; Covers decides
// whether one pattern permits everything another asks for, which is how a
// grant is checked against a subscription.
//
// # Design
//
// A Trie is a tree of nodes, one per pattern prefix, each with its literal
// children in a table, a '*' child, the subscribers of the pattern that
// ends there, and those of the pattern that ends there followed by '#'.
// Match splits the topic into a fixed array of at most MaxSegments segments
// on the stack, hashes each segment once, and walks the literal and '*'
// branches together, reporting each matching pattern once with its
// subscribers. It allocates nothing.
//
// The tree is persistent (copy-on-write). The current snapshot is published
// through an atomic pointer and never modified afterwards; Add and Remove
// take a mutex, build a new snapshot that shares everything off the path to
// the pattern they change, and publish its root. A node's children table is
// a hash array mapped trie over the segment hashes Match already computes:
// 32 entries per level at most, found by a bitmap and a population count,
// so a lookup is one to a few short steps and a write copies one level of
// at most 32 entries per 5 bits of hash it needs to tell its key apart,
// about log32 of the node's children, never the whole table. A write thus
// costs O(depth) in the pattern's segments times that logarithm: a
// million users subscribing each to user.<id>.inbox cost each new one four
// small copies at the wide node, not a copy of a million children. (Keys
// whose hashes are equal in all 64 bits share a list at the bottom level.)
// Removing a key folds a level left with a single key back into its
// parent, so a table that empties shrinks with it.
//
// A pattern's subscribers are one slice shared between snapshots: Add
// appends in place only beyond the length any published snapshot can see,
// and Remove always builds a new slice, so a reader's view never changes
// under it. A pattern with 64 subscribers or more also keeps a set of them
// that only writers use, so that Add finds a duplicate without a scan.
// Adding a subscriber to a pattern thus costs amortized O(1), whatever the
// number of others; removing one still copies that pattern's remaining
// subscribers (about 8 bytes each for pointers), the price of handing
// Match one contiguous, never-changing slice per pattern. Writes leave the
// replaced path as garbage for the collector; readers pay nothing for it.
//
// A Trie made by New also keeps a bounded, direct-mapped cache of recent
// Match results (4096 topics), admitting a topic on its second consecutive
// miss so that topics that never repeat do not churn it. Every snapshot
// carries a generation number; a cache entry is used only for the
// generation it was computed from, so any write invalidates the whole
// cache. The cache turns a repeated topic into one hash and one comparison;
// topics that do not repeat pay only the hash.
//
// # Concurrency
//
// All functions and all Trie methods are safe for concurrent use by
// multiple goroutines. Match takes no lock and never waits on a writer: it
// loads the current snapshot with one atomic read and walks it, and since
// nothing reachable from a published snapshot is written again (the one
// exception, appends past every published length, is invisible to it) it
// sees the Trie exactly as of that moment: every Add and Remove that
// returned before Match was called, none that started after. Add and Remove
// are serialized by the Trie's one mutex, which nothing else takes, so there
// is no lock order to keep; a write holds it for O(depth) work, so
// subscribers do not queue behind each other for long either. The package
// starts no goroutines.
package trie
