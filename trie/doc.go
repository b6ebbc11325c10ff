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
// children in a small open-addressing hash table, a '*' child, the
// subscribers of the pattern that ends there, and those of the pattern that
// ends there followed by '#'. Match splits the topic into a fixed array of
// at most MaxSegments segments on the stack, hashes each segment once, and
// walks the literal and '*' branches together, reporting each matching
// pattern once with its subscribers. It allocates nothing.
//
// The tree is copy-on-write. The current snapshot is published through an
// atomic pointer and never modified afterwards; Add and Remove take a
// mutex, copy the nodes on the path to the pattern they change, and publish
// the new root. A pattern's subscribers are one slice shared between
// snapshots: Add appends in place only beyond the length any published
// snapshot can see, and Remove always builds a new slice, so a reader's view
// never changes under it. Writes therefore cost time in proportion to the
// children of the nodes on the path and to the subscribers of the pattern,
// and leave garbage for the collector; the gateway reads far more often
// than it subscribes, and that is the trade this design makes.
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
// multiple goroutines. Match never waits: it reads the snapshot current
// when it starts and sees every Add and Remove that returned before it was
// called. Add and Remove are serialized by the Trie's one mutex, which
// nothing else takes, so there is no lock order to keep. The package starts
// no goroutines.
package trie
