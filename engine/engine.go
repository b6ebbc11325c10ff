// Package engine defines the storage and delivery seam of Switchyard: the
// partitioned append-only log every publish lands in, its live tail, and the
// consumer groups that read it with at-least-once delivery.
//
// The package holds only the interface, its value types and sentinel errors.
// Implementations live in subpackages (engine/memengine for the embedded
// in-memory engine, engine/jsengine for NATS JetStream) and must all pass the
// shared conformance suite in engine/enginetest before they count.
//
// # What an implementation owes
//
//   - Appending a record and announcing it to observers is atomic per
//     partition: observers see every record of a partition exactly once, in
//     offset order, and never a record that Read cannot return (unless it was
//     trimmed in between).
//   - Offsets of a partition start at 0, grow by one per record and never go
//     backwards or repeat within one Epoch.
//   - A key maps to the same partition on every process and machine
//     (see KeyPartition).
//   - A group's committed offset only moves past records that were acked,
//     dead-lettered, filtered out or trimmed by retention; it never moves
//     backwards except by an explicit Seek.
//
// # Consumer groups
//
// A group is created by its first Join and fixed to that join's Pattern,
// Filter and MaxInFlight (its window: how many records of one partition may
// be leased at once; GroupPolicy.MaxInFlight for a join that does not say).
// Within a partition records are delivered in offset order, up to the
// window; acks may come in any order and the committed offset moves over
// the contiguous prefix of settled records. Each member may also have its
// own window over all its partitions (JoinRequest.MaxLeased): the engine
// holds back what it cannot take and delivers it as the member settles
// records, instead of pushing one delivery per partition at once.
//
// A lease belongs to the member it was delivered to. Ack and Nack name the
// member; a member that does not hold the lease now (a previous holder
// answering late, after a timeout or a hand-off) gets ErrNotInFlight and
// changes nothing, so a stale nack never uses up the holder's attempts.
//
// Lifecycle: a group with no member holds nothing back (a Block topic is
// trimmed past it; its member is told with Consumer.Skipped when it comes
// back) and costs an append nothing. After GroupPolicy.IdleTTL without a
// member it is deleted with its positions, as DeleteGroup does at once.
// HandBack removes a node's members in one step for a graceful shutdown:
// no record goes to another of them, and deliveries that never reached
// their member (MemberRef.Unsent) are not attempts.
//
// What can never be lost: a record is only committed past as listed above;
// a dead letter is stored before its record is. What is redelivered: every
// record leased and not acked when its member leaves, times out, is handed
// back or its node stops; after a crash, from the committed offset (an
// in-memory engine loses everything with its process).
//
// # Concurrency
//
// Every Engine method is safe for concurrent use by multiple goroutines.
// Observer and Consumer callbacks are made from goroutines owned by the
// engine or synchronously from inside an engine call (an in-memory engine
// announces a record inside Append and delivers inside Append, Ack or Join,
// with its locks held). They must return quickly, must not block and must
// not call back into the engine: hand the work to your own goroutine.
package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Sentinel errors. Implementations wrap them with %w; callers test with
// errors.Is. Only the router maps them onto protocol codes and HTTP statuses.
var (
	// ErrUnknownTopic: the topic does not exist (and the engine is strict,
	// for Append).
	ErrUnknownTopic = errors.New("engine: unknown topic")
	// ErrTopicExists: CreateTopic for a name that is taken.
	ErrTopicExists = errors.New("engine: topic exists")
	// ErrInvalidConfig: a topic configuration or request value is out of range.
	ErrInvalidConfig = errors.New("engine: invalid configuration")
	// ErrBackpressure: a block-policy topic stayed full for its block timeout.
	ErrBackpressure = errors.New("engine: backpressure")
	// ErrUnknownPartition: a partition number outside the topic.
	ErrUnknownPartition = errors.New("engine: unknown partition")
	// ErrGroupConflict: a group joined with a pattern or filter other than
	// the one it is fixed to.
	ErrGroupConflict = errors.New("engine: group conflict")
	// ErrUnknownGroup: the group does not exist.
	ErrUnknownGroup = errors.New("engine: unknown group")
	// ErrUnknownMember: the member is not (or no longer) in the group.
	ErrUnknownMember = errors.New("engine: unknown member")
	// ErrNotInFlight: an ack or nack for a record that is not currently
	// delivered to the group (already acked, never delivered, or handed on).
	ErrNotInFlight = errors.New("engine: record not in flight")
	// ErrClosed: the engine is closed.
	ErrClosed = errors.New("engine: closed")
	// ErrUnavailable: the backing store cannot be reached right now; the
	// call may succeed later.
	ErrUnavailable = errors.New("engine: unavailable")
)

// FullPolicy says what a partition does when it holds MaxMessages records.
type FullPolicy string

const (
	// DropOldest trims the oldest record to make room, counting it. Groups
	// that had not consumed it are fast-forwarded and told (Consumer.Skipped).
	DropOldest FullPolicy = "drop_oldest"
	// Block makes Append wait up to the topic's BlockTimeout for the slowest
	// group to commit past the oldest record, then fail with ErrBackpressure.
	// A partition that no group reads is trimmed as with DropOldest: plain
	// subscribers never hold a topic back.
	Block FullPolicy = "block"
)

// PartitionerKind chooses how Append picks a partition.
type PartitionerKind string

const (
	// KeyHash (the default) sends a keyed record to KeyPartition(key, n) and
	// spreads keyless records round-robin.
	KeyHash PartitionerKind = "key_hash"
	// RoundRobin ignores keys and cycles through partitions.
	RoundRobin PartitionerKind = "round_robin"
	// Sticky hashes keyed records like KeyHash and fills one partition with
	// StickyBatch keyless records before moving to the next.
	Sticky PartitionerKind = "sticky"
)

// StickyBatch is how many keyless records the Sticky partitioner puts in one
// partition before it moves on: large enough that consumers see runs, small
// enough that a quiet topic still spreads.
const StickyBatch = 64

// TopicConfig is a topic's configuration. The zero value of each field means
// "the engine's default" (see Defaults).
type TopicConfig struct {
	Name string
	// Partitions is the partition count; fixed once the topic exists.
	Partitions int
	// MaxMessages bounds each partition's retained records; 0: default.
	MaxMessages int64
	// MaxAge trims records older than this; 0: default (which may be none).
	MaxAge time.Duration
	// OnFull applies when a partition holds MaxMessages records.
	OnFull FullPolicy
	// BlockTimeout bounds how long Append waits under the Block policy.
	BlockTimeout time.Duration
	// Partitioner picks partitions for Append.
	Partitioner PartitionerKind
}

// Defaults are the values an engine uses for fields a TopicConfig leaves at
// zero, and for topics created by a first publish.
var Defaults = TopicConfig{
	Partitions: 1,
	// 100k records per partition keeps a busy topic replayable for minutes
	// while bounding an in-memory partition to tens of MiB at typical sizes.
	MaxMessages: 100_000,
	MaxAge:      0,
	// Drop-oldest never stalls publishers of an auto-created topic; topics
	// that need producers held back are created explicitly with Block.
	OnFull:       DropOldest,
	BlockTimeout: time.Second,
	Partitioner:  KeyHash,
}

// WithDefaults returns c with every zero field taken from d.
func (c TopicConfig) WithDefaults(d TopicConfig) TopicConfig {
	if c.Partitions == 0 {
		c.Partitions = d.Partitions
	}
	if c.MaxMessages == 0 {
		c.MaxMessages = d.MaxMessages
	}
	if c.MaxAge == 0 {
		c.MaxAge = d.MaxAge
	}
	if c.OnFull == "" {
		c.OnFull = d.OnFull
	}
	if c.BlockTimeout == 0 {
		c.BlockTimeout = d.BlockTimeout
	}
	if c.Partitioner == "" {
		c.Partitioner = d.Partitioner
	}
	return c
}

// Validate reports ErrInvalidConfig for values out of range. It does not
// check the name's syntax; the router does that with the trie package.
func (c TopicConfig) Validate() error {
	switch {
	case c.Partitions < 1 || c.Partitions > MaxPartitions:
		return errors.Join(ErrInvalidConfig, errors.New("partitions must be 1 to 1024"))
	case c.MaxMessages < 0:
		return errors.Join(ErrInvalidConfig, errors.New("max_messages must not be negative"))
	case c.MaxAge < 0:
		return errors.Join(ErrInvalidConfig, errors.New("max_age must not be negative"))
	case c.BlockTimeout < 0:
		return errors.Join(ErrInvalidConfig, errors.New("block timeout must not be negative"))
	}
	switch c.OnFull {
	case DropOldest, Block:
	default:
		return errors.Join(ErrInvalidConfig, errors.New(`on_full must be "block" or "drop_oldest"`))
	}
	switch c.Partitioner {
	case KeyHash, RoundRobin, Sticky:
	default:
		return errors.Join(ErrInvalidConfig, errors.New(`partitioner must be "key_hash", "round_robin" or "sticky"`))
	}
	return nil
}

// MaxPartitions bounds a topic's partition count.
const MaxPartitions = 1024

// PartitionInfo describes one partition of a topic.
type PartitionInfo struct {
	Partition int
	// Earliest is the offset of the oldest retained record (== Next when
	// the partition is empty).
	Earliest int64
	// Next is the offset the next append will get.
	Next int64
	// Bytes is the retained payload size (data, key and headers).
	Bytes int64
	// Dropped counts records trimmed by the full policy or by age.
	Dropped int64
}

// TopicInfo is a topic's configuration (defaults applied) and state.
type TopicInfo struct {
	Config  TopicConfig
	Created time.Time
	Parts   []PartitionInfo
}

// Message is what a publisher appends.
type Message struct {
	Topic string
	// Key, when not empty, picks the partition (see PartitionerKind).
	Key     string
	Headers map[string]string
	// Data is the payload, stored and returned as given (the gateway keeps
	// JSON text here). The engine does not retain the caller's slice.
	Data []byte
	// MsgID, when set, makes the append idempotent within the dedupe window.
	MsgID string
	// Priority 0 (lowest) to 3 (highest); delivery queues prefer higher.
	Priority uint8
}

// Record is a stored message. Records handed out by an engine are shared and
// must be treated as read-only.
type Record struct {
	Topic     string
	Partition int
	Offset    int64
	Key       string
	Headers   map[string]string
	Data      []byte
	Time      time.Time // append time
	Priority  uint8
}

// Appended is Append's result.
type Appended struct {
	Partition int
	Offset    int64
	Time      time.Time
	// Duplicate is true when MsgID was seen within the dedupe window; the
	// position is the first append's.
	Duplicate bool
}

// Position names one record.
type Position struct {
	Topic     string
	Partition int
	Offset    int64
}

// StartKind says where reading or a new group starts.
type StartKind int

const (
	// StartDefault: the caller's default (earliest for a new group).
	StartDefault StartKind = iota
	StartEarliest
	StartLatest
	// StartTime: the first record appended at or after Start.Time.
	StartTime
	// StartOffset: Start.Offset (clamped to what is retained).
	StartOffset
)

// Start is a starting point.
type Start struct {
	Kind   StartKind
	Time   time.Time
	Offset int64
}

// Observer receives the live tail: every append on every topic, including
// appends made through other gateway nodes sharing the same store.
type Observer interface {
	// Appended is called once per record, in offset order per partition.
	// It must not block; r is shared and read-only.
	Appended(r *Record)
	// TopicDeleted is called after a topic is deleted; no further records
	// of it (until it is created again) will follow.
	TopicDeleted(topic string)
}

// Delivery is one record handed to a group member.
type Delivery struct {
	Group   string
	Record  *Record
	Attempt int // 1 on the first delivery
}

// Consumer receives a group member's deliveries.
type Consumer interface {
	// Deliver hands over a record leased to this member until it is acked,
	// nacked, or the ack timeout passes. It must not block.
	Deliver(d Delivery)
	// Skipped reports offsets [from, to) of a partition assigned to this
	// member that retention trimmed before the group consumed them.
	Skipped(group, topic string, partition int, from, to int64)
}

// JoinRequest asks to join (and, for a new group, create) a consumer group.
type JoinRequest struct {
	Group   string
	Pattern string
	// Filter, when not empty, fixes the group to records whose headers hold
	// every pair; records it rejects are committed without delivery.
	Filter map[string]string
	// From applies only when the group is new; default earliest.
	From Start
	// Member names the member; empty means the engine makes an ID.
	Member string
	// MaxInFlight is the group's window: how many records of one partition
	// may be outstanding (leased and not yet settled) at once. It is part
	// of the group's definition: 0 takes the group's value (for a new group,
	// GroupPolicy.MaxInFlight); any other value must equal the group's or
	// the join fails with ErrGroupConflict. At most MaxGroupInFlight.
	MaxInFlight int
	// MaxLeased bounds how many records this member holds leased at once
	// over all its partitions: the engine holds back what the member's
	// window cannot take and delivers it as the member settles others.
	// 0: no bound beyond MaxInFlight per partition. It belongs to the
	// member, not the group.
	MaxLeased int
	// MaxLeasedBytes bounds, likewise, the bytes of the records leased to
	// this member at once (data, key and headers): the engine delivers
	// another only while the member holds fewer, so it may pass the bound
	// by one record. 0: no bound. It bounds the member, not the group.
	MaxLeasedBytes int64
}

// Validate reports an error wrapping ErrInvalidConfig for a join request
// out of range: an empty group name, a MaxInFlight outside 0 to
// MaxGroupInFlight, or a negative MaxLeased or MaxLeasedBytes. Both
// engines call it first in Join. It does not check the pattern's syntax;
// the engines do that with the trie package, which this package does not
// import.
func (r JoinRequest) Validate() error {
	switch {
	case r.Group == "":
		return fmt.Errorf("empty group name: %w", ErrInvalidConfig)
	case r.MaxInFlight < 0 || r.MaxInFlight > MaxGroupInFlight:
		return fmt.Errorf("max in flight %d outside 0 to %d: %w", r.MaxInFlight, MaxGroupInFlight, ErrInvalidConfig)
	case r.MaxLeased < 0:
		return fmt.Errorf("negative member window: %w", ErrInvalidConfig)
	case r.MaxLeasedBytes < 0:
		return fmt.Errorf("negative member byte window: %w", ErrInvalidConfig)
	}
	return nil
}

// AnyMember ends a member argument of Ack or Nack that names a family of
// members: "pull-" + AnyMember settles a record leased to any member whose
// ID starts with "pull-", on whichever node it is, and refuses one leased
// to any other member. Member IDs never contain it.
const AnyMember = "*"

// MembersOf returns the Ack and Nack member argument that stands for every
// member whose ID starts with prefix.
func MembersOf(prefix string) string { return prefix + AnyMember }

// LeaseOf returns the Ack and Nack member argument that stands for one
// delivery attempt of a record leased to any member whose ID starts with
// prefix: it settles the record only while that attempt is the one in
// flight, so the late ack or nack of an earlier attempt (whose lease
// timed out and moved on) gets ErrNotInFlight instead of settling the
// new lease. attempt is Delivery.Attempt, 1 or more.
func LeaseOf(prefix string, attempt int) string {
	return prefix + AnyMember + "@" + strconv.Itoa(attempt)
}

// MaxGroupInFlight bounds JoinRequest.MaxInFlight.
const MaxGroupInFlight = 1000

// MemberRef names one member of one group.
type MemberRef struct {
	Group  string
	Member string
	// Unsent lists records leased to the member that never reached it (a
	// HandBack does not count those deliveries as attempts).
	Unsent []Position
	// Later, when set, lists further unsent records: HandBack calls it with
	// the lock Consumer.Deliver runs under held, once no delivery can reach
	// the member any more, so that a delivery made after Unsent was read
	// is listed too. It must not block or call into the Engine.
	Later func() []Position
}

// AllUnsent is Unsent and what Later lists; an engine's HandBack reads it
// under the lock its Consumer.Deliver calls run under.
func (r MemberRef) AllUnsent() []Position {
	if r.Later == nil {
		return r.Unsent
	}
	return append(r.Unsent[:len(r.Unsent):len(r.Unsent)], r.Later()...)
}

// GroupPolicy holds the delivery rules an engine applies to every group.
// The zero value of each field means the default in DefaultGroupPolicy.
type GroupPolicy struct {
	AckTimeout   time.Duration
	MaxAttempts  int
	BackoffMin   time.Duration
	BackoffMax   time.Duration
	MaxInFlight  int // per (group, topic, partition): a new group's default window
	DedupeWindow time.Duration
	// DeadLetterLimit bounds the queue_full dead letters kept; the oldest
	// go first.
	DeadLetterLimit int
	// MaxGroupDeadLetters bounds the max_attempts dead letters kept per
	// group, and MaxDeadLetters and MaxDeadLetterBytes every letter kept
	// (both reasons; bytes of data, key, headers and error, or as the
	// store holds them). Past a bound the oldest letter (of the group, or
	// of all) is dropped to make room and counted (EvictedDeadLetters); a
	// negative value removes the bound.
	MaxGroupDeadLetters int
	MaxDeadLetters      int
	MaxDeadLetterBytes  int64
	// IdleTTL is how long a group with no member is kept before it is
	// deleted with its positions; a negative value keeps such groups
	// forever.
	IdleTTL time.Duration
}

// DefaultGroupPolicy follows the protocol's server defaults.
var DefaultGroupPolicy = GroupPolicy{
	AckTimeout:  30 * time.Second,
	MaxAttempts: 5,
	BackoffMin:  200 * time.Millisecond,
	BackoffMax:  10 * time.Second,
	// One in flight keeps strict offset order even across retries.
	MaxInFlight:  1,
	DedupeWindow: 2 * time.Minute,
	// Enough to inspect a burst of overflow without letting a slow
	// consumer grow memory without bound.
	DeadLetterLimit: 10_000,
	// Room for a burst of poison records in every group, while a store
	// of dead letters nobody redrives stays a small part of a log's.
	MaxGroupDeadLetters: 10_000,
	MaxDeadLetters:      100_000,
	MaxDeadLetterBytes:  256 << 20,
	// A week, like Kafka's committed offsets: a consumer that is down over
	// a weekend resumes where it stopped; abandoned groups do not pile up.
	IdleTTL: 7 * 24 * time.Hour,
}

// WithDefaults returns p with every zero field taken from d.
func (p GroupPolicy) WithDefaults(d GroupPolicy) GroupPolicy {
	p.AckTimeout = cmp.Or(p.AckTimeout, d.AckTimeout)
	p.MaxAttempts = cmp.Or(p.MaxAttempts, d.MaxAttempts)
	p.BackoffMin = cmp.Or(p.BackoffMin, d.BackoffMin)
	p.BackoffMax = cmp.Or(p.BackoffMax, d.BackoffMax)
	p.MaxInFlight = cmp.Or(p.MaxInFlight, d.MaxInFlight)
	p.DedupeWindow = cmp.Or(p.DedupeWindow, d.DedupeWindow)
	p.DeadLetterLimit = cmp.Or(p.DeadLetterLimit, d.DeadLetterLimit)
	p.IdleTTL = cmp.Or(p.IdleTTL, d.IdleTTL)
	p.MaxGroupDeadLetters = cmp.Or(p.MaxGroupDeadLetters, d.MaxGroupDeadLetters)
	p.MaxDeadLetters = cmp.Or(p.MaxDeadLetters, d.MaxDeadLetters)
	p.MaxDeadLetterBytes = cmp.Or(p.MaxDeadLetterBytes, d.MaxDeadLetterBytes)
	return p
}

// Backoff returns the wait before delivery attempt number attempt+1 after
// attempt failed: BackoffMin doubling per attempt, capped at BackoffMax.
func (p GroupPolicy) Backoff(attempt int) time.Duration {
	d := p.BackoffMin
	for i := 1; i < attempt && d < p.BackoffMax; i++ {
		d *= 2
	}
	return min(d, p.BackoffMax)
}

// MemberInfo describes one group member.
type MemberInfo struct {
	ID         string
	Partitions []Position // Offset unused: the assigned (topic, partition)s
}

// GroupPartition is a group's state on one partition.
type GroupPartition struct {
	Topic     string
	Partition int
	Member    string // "" when unassigned
	Committed int64  // next offset the group needs
	Next      int64  // the partition's next offset
	Lag       int64  // Next - Committed
	InFlight  int
	Skipped   int64 // records trimmed before the group consumed them
}

// GroupInfo describes a consumer group.
type GroupInfo struct {
	Name    string
	Pattern string
	Filter  map[string]string
	// MaxInFlight is the group's window per partition (see JoinRequest).
	MaxInFlight int
	Members     []MemberInfo
	Partitions  []GroupPartition
}

// DeadLetter reasons.
const (
	ReasonMaxAttempts = "max_attempts"
	ReasonQueueFull   = "queue_full"
)

// DeadLetter is a record a group gave up on, or one a plain subscription's
// queue dropped.
type DeadLetter struct {
	ID         string
	Reason     string
	Group      string // max_attempts
	Subscriber string // queue_full
	Record     Record
	Attempts   int
	Error      string
	Time       time.Time
}

// DeadLetterFilter selects dead letters; empty fields match all.
type DeadLetterFilter struct {
	Group  string
	Reason string
	Limit  int // 0: all
}

// RedriveRequest chooses dead letters to hand back, and how.
//
// A letter of a group (max_attempts) whose record the log still holds is
// redelivered to that group only, at its original topic, partition and
// offset, with a fresh attempt count (the first redelivery is attempt 1),
// whether or not the group has a member now: nothing is appended, and no
// other group or subscriber sees the record again. The group's committed
// offset does not move back; the redelivery is settled (acked, nacked,
// timed out, dead-lettered again) like any delivery of the group. It
// counts in the partition's window, but goes out even when the window is
// full (a redrive is out of offset order by nature); the member's own
// window (JoinRequest.MaxLeased) still applies. An engine that reads the
// record again when it redelivers it may find it trimmed by retention in
// between: it tells the member with Consumer.Skipped for that one offset.
// Seek and DeleteGroup drop a redelivery not yet settled, as they drop
// records in flight.
//
// A letter that cannot go back in place (one without a group, queue_full;
// one whose group was deleted; one whose record retention has trimmed or
// whose topic was deleted) is appended to its topic again (same key,
// headers, data and priority; a new offset, seen by every reader) when
// AppendToTopics is set, and otherwise left where it is and not counted.
type RedriveRequest struct {
	// Group, when set, restricts the request to that group's letters; with
	// no IDs it takes all of them.
	Group string
	// IDs, when not empty, names the letters (each taken once; unknown
	// ones are skipped).
	IDs []string
	// AppendToTopics appends the letters that cannot go back in place to
	// their topics again; false leaves them.
	AppendToTopics bool
}

// Engine is the log and group store behind a gateway.
type Engine interface {
	// Epoch identifies this log's history: it changes whenever offsets
	// could have restarted (a new memory engine, a recreated stream).
	Epoch() string

	CreateTopic(ctx context.Context, cfg TopicConfig) (TopicInfo, error)
	// DeleteTopic removes a topic and its records, stops its groups'
	// deliveries on it and tells observers.
	DeleteTopic(ctx context.Context, name string) error
	Topic(ctx context.Context, name string) (TopicInfo, error)
	Topics(ctx context.Context) ([]TopicInfo, error)
	// TopicsPage returns, in name order, at most limit topics (limit is
	// taken as 1 to 10,000) whose names sort after after ("" for the
	// first page), and whether topics after the last of them exist. It
	// holds no more than the page while it builds it, so a listing costs
	// each request its page, not the whole set. Paging by the last name
	// returned lists every topic that exists throughout once, in order;
	// topics created or deleted meanwhile appear or not by their name.
	TopicsPage(ctx context.Context, after string, limit int) (page []TopicInfo, more bool, err error)

	// Append stores m and announces it to observers before returning.
	// An unknown topic is created with the defaults unless the engine is
	// strict (ErrUnknownTopic).
	Append(ctx context.Context, m Message) (Appended, error)
	// Read returns up to limit records of a partition from offset from
	// (clamped up to the earliest retained) and the offset after the last
	// one returned (or the clamped from when none).
	Read(ctx context.Context, topic string, partition int, from int64, limit int) ([]*Record, int64, error)
	// Resolve turns a Start into an offset of a partition.
	Resolve(ctx context.Context, topic string, partition int, s Start) (int64, error)
	// Watch registers an observer of the live tail until stop is called.
	Watch(o Observer) (stop func())

	// Join adds a member to a group (creating the group) and starts
	// delivering to c; it returns the member ID.
	Join(ctx context.Context, req JoinRequest, c Consumer) (string, error)
	// Leave removes a member; its unacked records go back at once.
	Leave(ctx context.Context, group, member string) error
	// HandBack removes every listed member in one step, as a node does when
	// it shuts down: no record they held is delivered to another of the
	// listed members, and each record they held goes back to the group. A
	// delivery listed in MemberRef.Unsent never reached the member and is
	// not an attempt; the others count as delivered, as on Leave (a record
	// that reached members on all its attempts is dead-lettered). Members
	// that are gone already are skipped.
	HandBack(ctx context.Context, members []MemberRef) error
	// Ack settles a record leased to member. member "" settles the record
	// whoever holds it; a member ending in AnyMember (MembersOf) settles it
	// when its holder's ID starts with what precedes AnyMember, on any
	// node, and LeaseOf narrows that to one attempt; any other member that
	// does not hold the lease now (a previous holder answering late) gets
	// ErrNotInFlight and changes nothing.
	Ack(ctx context.Context, group, member string, p Position) error
	// Nack starts the record's redelivery backoff at once; after the last
	// attempt it is dead-lettered with reason as its error. member is
	// checked as for Ack: a stale nack never uses up the holder's attempts.
	Nack(ctx context.Context, group, member string, p Position, reason string) error
	// Seek moves a group's position on one partition (or every partition of
	// the topic when partition < 0); in-flight records are dropped.
	Seek(ctx context.Context, group, topic string, partition int, to Start) error
	Groups(ctx context.Context) ([]GroupInfo, error)
	// GroupsPage is TopicsPage for groups: at most limit groups named
	// after after, in name order, and whether more follow.
	GroupsPage(ctx context.Context, after string, limit int) (page []GroupInfo, more bool, err error)
	Group(ctx context.Context, name string) (GroupInfo, error)
	// DeleteGroup removes a group, its positions and its members (their
	// leases end; later acks get ErrUnknownGroup). A group that has had no
	// member for GroupPolicy.IdleTTL is deleted the same way by the engine.
	DeleteGroup(ctx context.Context, name string) error

	// AddDeadLetter records a dead letter the caller produced (queue_full).
	AddDeadLetter(ctx context.Context, dl DeadLetter) error
	DeadLetters(ctx context.Context, f DeadLetterFilter) ([]DeadLetter, error)
	// Redrive hands the chosen dead letters back (see RedriveRequest),
	// removes each one it handed back and returns how many; letters it
	// leaves stay listed. It fails with ErrInvalidConfig when the request
	// names neither a group nor ids.
	Redrive(ctx context.Context, r RedriveRequest) (int, error)

	// Close stops appends, hands back in-flight deliveries and releases
	// resources, waiting at most until ctx is done.
	Close(ctx context.Context) error
}

// Clock is the time source engines use, injectable for tests.
type Clock interface {
	Now() time.Time
	// AfterFunc calls f in its own goroutine after d.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a stoppable AfterFunc timer.
type Timer interface {
	Stop() bool
}

// SystemClock is the real clock.
type SystemClock struct{}

func (SystemClock) Now() time.Time { return time.Now() }

func (SystemClock) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }
