package jsengine

import "github.com/nats-io/nats.go/jetstream"

// SetBeforeMemberBeat makes the heartbeat call f after it has listed this
// node's members and before it writes their live keys.
func (e *Engine) SetBeforeMemberBeat(f func()) { e.beforeMemberBeat.Store(&f) }

// MemberKey is the live bucket key of a group member.
func MemberKey(group, member string) string { return memberKey(group, member) }

// Reappends is how many refused pipelined records this engine appended
// again.
func (e *Engine) Reappends() int64 { return e.reappends.Load() }

// GroupFetches returns how many group fetches from NATS this node started.
func (e *Engine) GroupFetches() int64 { return e.groupFetches.Load() }

// OneAtATime returns how many AppendAsync calls of a pipelining partition
// were appended one at a time instead (near the partition's cap).
func (e *Engine) OneAtATime() int64 { return e.oneAtATime.Load() }

// SetBeforeGroupEvent makes the group bucket's watcher call f with a
// change's key before it applies the change.
func (e *Engine) SetBeforeGroupEvent(f func(key string)) { e.beforeGroupEvent.Store(&f) }

// WrapBuckets replaces the topic and group buckets that this engine's calls
// use (not its watchers, which keep the originals) with wrap's results.
// Call it before any other call on the engine.
func (e *Engine) WrapBuckets(wrap func(jetstream.KeyValue) jetstream.KeyValue) {
	e.topicKV, e.groupKV = wrap(e.topicKV), wrap(e.groupKV)
}

// TopicKey is the topic bucket key of a topic name.
func TopicKey(name string) string { return enc(name) }

// GroupKey is the group bucket key of a group's definition.
func GroupKey(group string) string { return defKey(group) }

// WrapDedupe replaces the dedupe bucket that this engine's calls use with
// wrap's result. Call it before any other call on the engine.
func (e *Engine) WrapDedupe(wrap func(jetstream.KeyValue) jetstream.KeyValue) {
	e.dedupKV = wrap(e.dedupKV)
}

// SetBeforeTrim makes an append that trims its partition to MaxMessages
// call f after its record is stored and before it purges.
func (e *Engine) SetBeforeTrim(f func()) { e.beforeTrim.Store(&f) }

// PartitionView returns a partition's earliest and next offsets as this
// node's view holds them (what Topics and ReadSeen start from), without a
// round trip.
func (e *Engine) PartitionView(topic string, partition int) (earliest, next int64) {
	return e.local(topic).parts[partition].view()
}

// SetBeforeClaimedPublish makes an append with a MsgID call f once it
// holds its claim, before it publishes the record.
func (e *Engine) SetBeforeClaimedPublish(f func()) { e.beforeClaimedPublish.Store(&f) }
