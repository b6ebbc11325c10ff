// Package jsengine is the NATS JetStream implementation of engine.Engine:
// the log, its live tail and the consumer groups live in NATS, so several
// gateway nodes sharing one Prefix serve one set of topics and groups.
// It passes the shared conformance suite in engine/enginetest with every
// feature, including an injected clock.
//
// # Mapping onto JetStream
//
// Each concept lives in one stream or bucket under the Prefix; the file
// named holds the code and the detail.
//
//   - Records: one stream, <prefix>_rec, on subject
//     <prefix>.rec.<topic>.<inc>.<partition>, inc being the topic bucket
//     revision that created the topic (topics.go). One stream, not one per
//     topic, because streams are heavy in NATS; so the engine enforces
//     per-partition retention itself (retention.go).
//   - Offsets: a header on each record, assigned without holes by publishing
//     with the subject's expected last sequence (append.go); pipelined
//     appends chain their publishes by message ID on one server
//     (pipeline.go) and go in atomic batches into replicated streams
//     (pipeline_batch.go).
//   - Reads: direct gets after a binary search over stream sequences
//     (read.go), the last 512 records of each partition in memory
//     (partcache.go), the latest values without a round trip (seen.go).
//   - Live tail: one ordered consumer per node over <prefix>.rec.> (tail.go).
//   - Topic configurations: the <prefix>_topics bucket (topics.go), listed
//     from memory (listing.go).
//   - Idempotent publish: claims in the <prefix>_dedupe bucket (dedupe.go),
//     taken ahead of their records into replicated streams
//     (pipeline_msgid_batch.go), confirmed under load by the node's
//     confirmer, off the ack reader (pipeline_confirm.go).
//   - Consumer groups: definitions and per-partition positions in the
//     <prefix>_groups bucket (group.go, cursor.go, commit.go, groupapi.go,
//     lifecycle.go; the acks above a record not yet settled: settled.go),
//     members and nodes in the <prefix>_live bucket
//     (membership.go), settles forwarded to the holding node (remote.go).
//   - Dead letters: the <prefix>_dl stream (deadletter.go, redrive.go,
//     their encoding letterenc.go; see Dead letters below).
//   - Presence: the <prefix>_presence bucket (presence.go).
//   - Retained messages: the <prefix>_retained bucket and each node's
//     view of it (retained.go).
//   - MQTT persistent sessions: the <prefix>_mqtt_sessions bucket and each
//     node's view of its keys (mqttsession.go).
//   - Replicas of every stream and bucket: replicas.go; the record
//     stream's count as it is now, which the pipeline follows:
//     replicas_live.go. Opening them and
//     the epoch: setup.go. Bucket watchers: watch.go.
//
// # Dead letters
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
// A letter is the record's data with the rest in a header, so every record
// the log accepted has a letter that fits; one that still would not is
// stored without the data, read from the log when listed or redriven
// (letterenc.go). Close waits, at most 5 s, for a letter being stored, and
// settles its record before handing the partition back.
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
// Calls that cannot reach NATS fail at once with an error wrapping
// engine.ErrUnavailable (conn.go); an append, all its round trips and waits
// together, is answered within appendMax (8 s) of its call. Over a link
// gone silent (the connection up, nothing answering) a read, a listing
// (such as DeleteGroup's of positions; DeleteTopic's, which comes once
// the topic is gone, ends there and the delete succeeds), a consumer call
// and a watcher's set-up fail unavailable after roundTripMax (5 s) per
// round trip; other writes wait as long as their caller allows, since one
// cut short may still land (bounded.go). Records and positions are in NATS, so
// nothing the engine acknowledged is lost by an outage; after a reconnect
// the tail and the bucket watchers resume where they stopped (tail.go,
// watch.go) and heartbeats resume (membership.go).
//
// # Concurrency
//
// An Engine is safe for concurrent use by multiple goroutines. New starts
// these goroutines, and Close stops them and waits for them: the tail
// (nats.go's consumer hands each message to the engine's tail goroutine,
// tail.go), one watcher loop per bucket (topics, groups, live, and retained once
// the first retained call opens it: retained.go; mqtt sessions likewise:
// mqttsession.go), the
// acknowledgement inbox's status watcher (answers chained records pending
// when the connection starts reconnecting; its subscription's handler runs
// on nats.go's subscription goroutine: pipeline_ack.go), the
// connection watcher (tracks the connection's status for the fail-fast and
// watcher-resume rules, conn.go), the committer (writes positions, claims
// and releases, up to 16 keys at once from goroutines it waits for before
// its next round), the letter writer (stores max_attempts dead letters and
// settles their records) and the heartbeat (which also restarts a tail
// that stopped behind the record stream, replacing nats.go's consumer
// and its goroutines while the tail goroutine goes on: tail_keeper.go);
// short-lived retry timers,
// group fetches and loads of a partition's state for a group cursor (one
// of each at most per cursor, each bounded by 5 s); the reader
// of pipelined appends' acknowledgements (one at most, while any is in
// flight; it calls AppendAsync's done); the claim confirmer (confirms
// batched msg_id claims off the acknowledgement reader, a queue of at most
// 1,024, pipeline_confirm.go); a goroutine per partition at most that
// appends a queued msg_id record as Append does (runQueued,
// pipeline_batch.go, ended by the record's deadline); a goroutine per
// finished listing that stops its watcher (nats.go deletes the watcher's
// consumer in a round trip of its own, at most 5 s; bounded.go's
// stopWatch, owned by the engine's lifecycle guard, which Close waits
// for); the handler of the <prefix>.replicas
// notices (on nats.go's subscription goroutine, replicas_live.go; the
// subscription ends in Close); the acknowledgement inbox's timer callbacks
// (one deadline timer for every chained record waiting, and no-responders
// retries: pipeline_ack.go, stopped when the inbox closes); and Clock timer
// callbacks (ack timeouts, backoffs, block timeouts). Close first waits, at most 5 s or its
// context, for a dead letter the letter writer is storing, so that the
// hand-back records it settled.
//
// Observer.Appended is called from the tail goroutine (AppendedContext for
// an engine.ContextObserver, with a context carrying the tail's
// engine.Batch: a run ends when no further record is at hand, after 64
// records, before the tail waits for the topic bucket and when the tail
// stops), TopicDeleted from the topic watcher or from whichever goroutine
// first installs a newer incarnation of the topic (the tail, or a call such
// as Append), before any record of it. Consumer.Deliver and
// Consumer.Skipped are called with the group lock held, from the tail, a
// watcher, the committer, a timer, or inside Join, Leave, Ack, Nack and
// Seek. None of them may block or call back into the Engine.
//
// # Lock order
//
// Engine embeds one struct per lock, declared beside the code that takes
// it. Locks are taken only in this order (a lock may be skipped, never
// taken out of order); TestLockOrderNamesEveryLock checks that this list
// names every mutex of the package:
//
//  1. partition.amu (topics.go): one partition's appends and trims on this
//     node (held across NATS round trips, released while an append blocks).
//  2. pipeline.wmu (pipeline.go): the order of this node's pipelined
//     publishes, taken under amu while one is published.
//  3. groupTable.gmu (group.go): every group, the live registry, the dirty
//     set, and each partition's group cursors.
//  4. topicTable.tmu (topics.go): the topic map (never held while taking
//     another lock).
//  5. partition.smu (topics.go): one partition's shared view, cache and
//     block floor.
//
// tailKeeper.tailCCMu (tail_keeper.go): the live tail's consumer, held
// while the heartbeat stops and makes it again (NATS round trips) and by
// shutdown; taken under no other lock, and takes only tailState.tailMu.
//
// Leaf locks, held while taking no other: tailState.tailMu (tail.go),
// connState.connMu (conn.go), dedupeCalls.dmu (dedupe.go),
// letterQueue.lmu and dlBounds.mu (deadletter.go), topicList.topicsMu
// (listing.go), ackInbox.mu (pipeline_ack.go), the mutexes in Engine.life
// and Engine.observers, and
// presence's two, taken in the order presence.notifyMu, presence.mu
// (presence.go), a mirrored bucket's two (kvmirror.go: the retained
// messages' and the MQTT sessions'), taken in the order kvMirror.startMu
// (held across the bucket's opening, once), kvMirror.mu, and
// nodeServer.mu (nodes.go: held, shared, while a node request's handler
// runs).
//
// HandBack calls a member's engine.MemberRef.Later (through AllUnsent)
// with gmu held, as every delivery to a member is made (pump), so that no
// delivery falls between the lists it hands back; Later takes only the
// caller's leaf locks and never calls into the engine.
//
// No NATS round trip happens under gmu: records missing from the cache are
// fetched by a goroutine per cursor, dead letters are stored by the letter
// writer, and positions are written by the committer, each without it,
// taking gmu afterwards only to apply the outcome. A slow or stalled NATS
// therefore delays the cursors waiting on it, never the tail, acks, nacks
// and heartbeats of the others.
package jsengine
