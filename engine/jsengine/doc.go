// Package jsengine is the NATS JetStream implementation of engine.Engine:
// the log, its live tail and the consumer groups live in NATS, so several
// gateway nodes sharing one Prefix serve one set of topics and groups.
// It passes the shared conformance suite in engine/enginetest with every
// feature, including an injected clock.
//
// # Mapping onto JetStream
//
// Records. One stream, <prefix>_rec, holds every record of every topic on
// subject <prefix>.rec.<topic>.<inc>.<partition>. Topic names are valid
// subject tokens as they are (their characters are [A-Za-z0-9_:-], '.'
// separates segments, '$' may start the first); the partition is the last
// token and inc the one before it, so parsing from the end is unambiguous.
// inc is the topic bucket revision that created the topic: a deleted and
// recreated topic gets fresh subjects, so stale appends by a node that has
// not yet heard of the delete can never leak into the new incarnation.
// A node whose tail meets a record of an incarnation newer than the one it
// knows (its topic watcher has not yet reached the delete and the create
// made on another node) asks the bucket for the topic at once, announces
// the old incarnation's delete to its observers, then the record: records
// of a re-created topic are never dropped by a lagging watcher. While the
// bucket cannot be reached the tail waits and retries rather than drop it.
// One stream rather than one per topic or partition because streams are
// heavy in NATS (a Raft group each when replicated, files, consumers,
// limits bookkeeping): a gateway with thousands of auto-created topics
// would otherwise create thousands of streams. The price is that stream
// limits cannot be per topic; see Retention.
//
// Offsets. Each record carries its partition offset in a header (Sy-Off)
// and is published with Nats-Expected-Last-Subject-Sequence set to the
// subject's last sequence as this node knows it. The server accepts it only
// if no other node appended to the partition meanwhile; otherwise the
// publish fails, the node reloads the subject's last message and retries.
// That assigns offsets 0, 1, 2, ... without holes or repeats, across any
// number of nodes, without a central lock or counter; on one node, appends
// to a partition are serialised locally so they never conflict with each
// other. Offsets are stable: they are stored in the records themselves.
//
// Reading. Read and group catch-up use direct gets of the record stream
// (with Options.Replicas above 1, gets from the stream's leader instead:
// see replicas.go) filtered by the partition's subject (one round trip per
// record), after a
// binary search over stream sequences for the first wanted offset (offsets
// grow with sequences within a subject). The search is bounded above by
// the highest sequence known: the subject's last as just loaded (Read) or
// the highest this node saw of the subject or of the stream (catch-up), so
// it takes about log2 of the sequences in between (a dozen round trips
// over thousands of records, not 63 over all of uint64). A group cursor
// fetches 64 records at a time, in a goroutine of its own and without the
// group lock, then pumps; its next fetch starts at the sequence after the
// last, with no search. The tail keeps the last 512 records of every
// partition in memory, so reads and deliveries near the head cost no round
// trip; a cursor waiting for a record past the last one the tail announced
// (appended, so its offset is known, but not yet seen by the tail) does
// not fetch it either: the tail brings it and pumps the cursor. Reading a long backlog is therefore slower than a consumer-based
// scan would be; it keeps Read stateless on the server. A load of a
// partition's state (Topics, Topic, Read) keeps the newest record it
// fetched in that cache, and records Read fetches that end where the cache
// starts are put in front of it, so reading a partition's last records
// again costs no fetch; a search before the cache is bounded by the
// cache's first sequence.
//
// Latest value. A replaying subscribe (the router's "from":"last" over a
// wildcard, or any catch-up) reads through engine.SeenReader: ReadSeen
// answers from the partition's view and cache, with no round trip, when
// the state was loaded once and the records asked for are cached and not
// past MaxAge; records this node's tail has not announced yet reach the
// subscription live. So {"last": N} over thousands of topics costs the
// listing's load (two direct gets per partition, at most once a second)
// plus, for records older than the cache holds, one Read per partition.
//
// Listing. Topics loads every partition's state from NATS at most once a
// second (or at once after a topic was created or deleted); in between it
// answers from that load, with earliest and next offsets brought up to
// what the tail and this node's appends saw. Readiness probes, replaying
// subscribes and the system topics call it often. Topics live in a KV
// bucket whose watcher keeps every topic's configuration on every node,
// so listing needs no NATS call of its own: TopicsPage picks one page from
// that set (keeping only the page) and loads the partition states of the
// page's topics only, or copies them from a fresh Topics load.
//
// Live tail. Each engine runs one ordered consumer over <prefix>.rec.>,
// starting after the last record stored when it was created. It sees every
// record stored by any node, in stream order (so in offset order per
// partition), only once stored (a core subscription would also see
// publishes that the expected-sequence check then rejects), and resumes
// from where it stopped after a reconnect. It feeds observers and the
// node's groups; no goroutine per subscriber, no polling. A record pumps
// only the cursors of its partition that a member on this node owns or
// that this node holds (partition.pumped), under gmu; when there are none
// (every group reading it is idle, or delivered by other nodes) the tail
// takes no engine-wide lock at all, so groups without members cost an
// append nothing. The block floor likewise counts only the cursors of
// groups with a member on some node (partition.reading). Append returns
// after this node's tail has announced the record (or after five seconds,
// if the tail lags: the record is stored either way). Once an append gave
// up on the tail, the node's appends return without waiting until the
// tail reaches that append's record, so a stalled tail delays them by five
// seconds in all, not five seconds each.
//
// Pipelined appends. AppendAsync (engine.AsyncAppender, used by the
// router for WebSocket publishes) publishes without waiting for the
// previous record's acknowledgement, chaining this node's publishes with
// Nats-Expected-Last-Msg-Id so that the expected-sequence guarantees above
// still hold; a chain broken by another writer is appended again in order.
// With more than one replica AppendAsync appends as Append does. See
// pipeline.go. Topic deletion is
// announced to every node by the topic bucket's watcher.
//
// Epoch. The node that creates the record stream stores a random epoch in
// the stream's metadata; every node reads it from there. A recreated
// stream (and so a restarted offset space) has a new epoch. On a server
// without stream metadata (before NATS 2.10) the epoch is derived from the
// stream's creation time and name.
//
// Topic configurations live in the <prefix>_topics bucket, keyed by the
// base64url of the name (KV keys cannot hold ':' or '$'); creating one is an
// atomic KV create, so two nodes cannot both create a name; the one
// refused waits for the other's create to show (see replicas.go).
//
// # Retention
//
// JetStream limits apply to a whole stream, so per-partition MaxMessages
// and MaxAge are enforced by the engine with subject-filtered purges:
//
//   - Count: after an append that makes a partition hold more than
//     MaxMessages, the appending node purges the subject keeping the newest
//     MaxMessages, then reads the earliest record left (another node may
//     have appended in between: a direct get per trim). drop_oldest is
//     counted: Dropped equals Earliest, since a topic's offsets start at 0
//     and records leave only by retention.
//   - Age: lazily, on Append, Read, Topic and Resolve (as the in-memory
//     engine does), using the append time from the engine's clock stored in
//     each record (Sy-Time), so a fake clock drives it. When every record
//     has expired, a trim marker (a record-less message holding the last
//     offset) replaces them, so the next offset survives an empty partition.
//   - Block: an append to a full partition waits while a group reading it
//     has not committed past the oldest record, up to BlockTimeout on the
//     engine's clock, then fails with engine.ErrBackpressure. Group
//     positions of every node reach the others through the group bucket, so
//     a block on one node is released by an ack on another.
//
// # Idempotent publish
//
// A MsgID is claimed in the <prefix>_dedupe bucket (bucket TTL: the dedupe
// window) with an atomic create holding the claim time on the engine's
// clock. The claim's revision names it: every publish of that MsgID while
// the claim lives carries Nats-Msg-Id <claim key>.<revision>, and the
// record stream's Duplicates window is the policy's DedupeWindow, so the
// server stores it at most once. When an append is confirmed the claim
// records its position, which repeats within the window return with
// Duplicate set. An append whose outcome is unknown (its context ended, or
// the connection dropped, with the publish in flight) leaves the claim
// unconfirmed, never deleted: a retry on any node publishes again at once
// under the same Nats-Msg-Id, and either stores the record (the first try
// never landed) or gets the server's duplicate acknowledgement, with the
// first record's stream sequence, and reports that record's position with
// Duplicate set. A retry whose publish is refused because the partition
// moved on (a standalone server checks the expected last sequence before
// duplicates; a cluster's leader can refuse it before the first publish is
// proposed) and then finds the record under its Nats-Msg-Id as the
// partition's last reports it with Duplicate set too: only the append
// whose own publish stored a record reports it as stored, so of the
// repeats of a MsgID at most one does. Nothing waits on an unconfirmed
// claim. Concurrent repeats on one node wait for the first in-process.
// On replicated buckets and streams a repeat on another node can find the first one's claim, or its
// publish, proposed and not yet applied (refused as existing, yet not
// found); it then waits for it with growing pauses, within its context
// and at most 10 s, and reports the first record's position. The stream's dedupe alone
// could not serve: it runs on the server's clock, while a claim expires
// with the window on the engine's (possibly fake) clock and then gets a new
// revision, so a MsgID reused after the window is stored again. An
// expired claim that was never confirmed is republished under first: its
// record may have been stored late (the stream's window starts then), and
// only a record older than the window makes way for a new claim.
//
// # Consumer groups
//
// Shared state, in the <prefix>_groups bucket: each group's definition
// (pattern, filter, start), created atomically by the first Join on any
// node, and per (group, topic incarnation, partition) a position: the
// committed offset, records skipped by retention, and the holder, the node
// currently delivering that partition. KV positions rather than durable
// JetStream consumers because the engine's semantics are per partition
// (one member at a time, offset order, MaxInFlight, skips, seeks by offset
// or time) while a durable consumer spans a filter and cannot be moved
// between members or seeked without deleting it; positions in a bucket are
// cheap, visible to every node, and updated with compare-and-set.
//
// Membership, in the <prefix>_live bucket whose keys expire after
// MemberTTL: each node's key and each member's key (naming its node),
// refreshed by a heartbeat every MemberTTL/3. Every node watches it and
// computes the same assignment from it: partitions sorted by (topic,
// partition) round-robin over members sorted by ID. A node delivers only
// the partitions assigned to its own members.
//
// Handover. To deliver a partition a node claims it: a compare-and-set of
// the position naming itself as holder, allowed only when the stored holder
// is nobody, itself, or a node whose key has expired. A node whose member
// no longer owns a partition stops delivering new records on it and, once
// nothing of it is in flight, releases it (holder cleared); only then can
// the new owner's node claim it. Within one node the in-memory engine's
// rule applies (the new member waits until the old one's leases end). A
// node that Closes releases everything at once and deletes its keys; a
// node that dies is taken over when its key expires. Leases not acked by
// then are redelivered by the next holder from the committed offset.
//
// Attempts. The position also holds, per record not yet done, the delivery
// attempts started on it, and the holder writes each attempt there before
// the record reaches its member (the write carries the commit of what was
// acked meanwhile, so a record costs one bucket write as before; delivery
// waits for it). The next holder, after a crash or a release, continues
// those counts, and a record whose every allowed attempt was used by nodes
// that died with it goes to the dead letters ("holder lost") without
// another delivery. A node dying between that write and the delivery
// counts an attempt that never reached a member: at most one per crash.
// Acks, nacks and ack timeouts are handled by the holding node. An Ack or
// Nack made on another node (a pull consumer's poll and ack behind a load
// balancer) is forwarded to the holder named in the position, as a NATS
// request on the holder's subject <prefix>.settle.<node>, and returns the
// holder's answer; a node whose watcher has not yet brought the holder's
// claim (or names a holder that has let go) reads the position from the
// bucket and forwards to the holder stored there (engine.ErrNotInFlight when the holder is gone: its
// leases ended with it, and the next holder redelivers). The holder checks
// the member named as for a local settle: a member family
// (engine.MembersOf, as the router's HTTP pull members use) matches a
// lease held by any member of the family on the holder. Committed
// offsets are written by a background committer, in rounds of at most 16
// keys at once, each write carrying every ack since the previous one; after
// a crash the next holder redelivers from the last written offset: the
// records leased and not acked, and those acked since the last write
// (about one round trip's worth). Group on another node
// shows them a moment later. Seek works from any node: the holder adopts
// a position written by someone else.
//
// Dead letters live in the <prefix>_dl stream (<prefix>.dl.ma.<group> for
// max_attempts, bounded per group and in all, see deadletter.go;
// <prefix>.dl.qf for queue_full, bounded by DeadLetterLimit). A record whose max_attempts letter cannot
// be stored (NATS unreachable) stays owed: the committed offset does not
// move past it, and the letter is tried again after the backoff until it
// is stored. At the cap a queue_full letter costs one publish: each node
// purges the subject down to the limit once per DeadLetterLimit/16 of its
// adds, counting exactly what each purge dropped (EvictedDeadLetters), and
// listings show only the newest DeadLetterLimit queue_full letters.
// Listing reads the stream; Redrive with ids looks each letter up in a set
// of the ids (O(letters + ids), no lock held), and deletes a letter before
// handing it back (restoring it if that fails), so two nodes redriving at
// once hand it back once. A letter of a group goes back in place: the
// redrive is written to the partition's position in the group bucket
// (Asked), the holder takes it up and lists it in the position's Redo
// until it is settled, so it survives restarts and works from any node
// (see redrive.go). Only with AppendToTopics is a letter that cannot go
// back in place appended to its topic again.
//
// # Availability
//
// Calls that cannot reach NATS fail with an error wrapping
// engine.ErrUnavailable, and fail at once rather than after a timeout:
// while the connection is down they are refused before any round trip
// (Topics too, so it serves as a readiness probe even with no topics), and
// round trips in progress when it drops are abandoned. An engine that dials
// its own connection sets MaxReconnects(-1) and ReconnectBufSize(-1): with
// no reconnect buffer, an append refused during an outage is never stored
// later. Records and positions are in NATS, so nothing the engine
// acknowledged is lost by an outage; an append whose reply was lost when
// the connection dropped may have been stored although it failed (a retry
// with the same MsgID is stored once).
//
// After a reconnect the ordered tail consumer resumes after the last record
// it announced, so observers and groups see every record stored meanwhile
// by other nodes, in order. The bucket watchers are recreated at once,
// resuming after the last revision each applied (the client library alone
// would notice a watcher lost with a restarted server only after two
// missed idle heartbeats, 10 to 20 s). Heartbeats resume; if the outage
// outlasted MemberTTL the node's own live keys may expire meanwhile, which
// it ignores for its own members and puts back with the next heartbeat.
// Records leased to members stay leased across an outage; commits that
// failed are retried. On a server older than 2.11 expired live keys leave
// no marker, so the heartbeat also lists the live bucket to notice dead
// nodes and members.
//
// # Concurrency
//
// An Engine is safe for concurrent use by multiple goroutines. New starts
// these goroutines, and Close stops them and waits for them: the tail
// (nats.go's consumer hands each message to the engine's tail goroutine,
// tail.go), one watcher loop per bucket (topics, groups, live), the
// connection watcher (tracks the connection's status
// for the fail-fast and watcher-resume rules above), the committer (writes
// positions, claims and releases, up to 16 keys at once from goroutines
// it waits for before its next round), the letter writer (stores max_attempts
// dead letters and settles their records) and the heartbeat; short-lived
// retry timers and group fetches (one at most per cursor, each bounded by
// 5 s); the reader of pipelined appends' acknowledgements (one at most,
// while any is in flight; it calls AppendAsync's done); and Clock timer
// callbacks (ack timeouts, backoffs, block
// timeouts).
//
// Observer.Appended is called from the tail goroutine (AppendedContext for
// an engine.ContextObserver, with a context carrying the tail's
// engine.Batch: a run ends when no further record is at hand, after 64
// records, before the tail waits for the topic bucket and when the tail
// stops), TopicDeleted from the topic watcher or from whichever goroutine first installs a newer
// incarnation of the topic (the tail, or a call such as Append), before
// any record of it. Consumer.Deliver and Consumer.Skipped are called with the
// group lock held, from the tail, a watcher, the committer, a timer, or
// inside Join, Leave, Ack, Nack and Seek. None of them may block or call
// back into the Engine.
//
// # Lock order
//
// Locks are taken only in this order (a lock may be skipped, never taken
// out of order):
//
//  1. partition.amu: one partition's appends and trims on this node (held
//     across NATS round trips, released while an append blocks).
//  2. Engine.wmu: the order of this node's pipelined publishes
//     (pipeline.go), taken under amu while one is published.
//  3. Engine.gmu: every group, the live registry, the dirty set, and each
//     partition's group cursors.
//  4. Engine.tmu: the topic map (never held while taking another lock).
//  5. partition.smu: one partition's shared view, cache and block floor.
//
// Leaf locks: the mutexes in Engine.life and Engine.observers,
// Engine.tailMu, Engine.dmu, Engine.lmu, Engine.topicsMu and Engine.connMu.
// No NATS round trip happens under gmu: records missing from the cache are
// fetched by a goroutine per cursor, dead letters are stored by the letter
// writer, and positions are written by the committer, each without it,
// taking gmu afterwards only to apply the outcome. A slow or stalled NATS
// therefore delays the cursors waiting on it, never the tail, acks, nacks
// and heartbeats of the others.
package jsengine
