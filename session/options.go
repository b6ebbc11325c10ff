package session

import (
	"errors"
	"time"
)

// Policy says what the outbound queue does with a message item when the
// queue is full.
type Policy uint8

const (
	// DropOld evicts the oldest droppable queued message (the default).
	DropOld Policy = iota
	// DropNew drops the incoming message.
	DropNew
	// Disconnect closes the session with status 1013 when the queue is full.
	Disconnect
	// Reliable items (group deliveries, retention gap frames) are never
	// dropped and do not count toward QueueMessages; they may exceed the
	// bound. More than 4×QueueMessages reliable and control items queued at
	// once close the session with status 1013.
	Reliable
)

// String returns the protocol name of the policy.
func (p Policy) String() string {
	switch p {
	case DropOld:
		return "drop_old"
	case DropNew:
		return "drop_new"
	case Disconnect:
		return "disconnect"
	case Reliable:
		return "reliable"
	}
	return "unknown"
}

// Stream identifies a (subscription, topic, partition): the unit of ordering
// and gap accounting.
type Stream struct {
	Sub       uint64 // subscription ID within the session; 0 = not a stream (control frame)
	Topic     string
	Partition int
}

// Item is one outbound JSON object.
type Item struct {
	// Frame is one encoded JSON object without a trailing newline. It may be
	// shared across sessions and is never modified.
	Frame []byte
	// Stream is zero (Sub == 0) for control frames (replies, errors): they are
	// never dropped and never reordered relative to other control frames.
	Stream Stream
	// Offset is the record's offset within its partition. The offsets of one
	// stream are expected to increase from one Send to the next.
	Offset int64
	// Priority is 0..3 (larger values count as 3); across different streams
	// higher priorities are written first and dropped last.
	Priority uint8
	// Policy applies when the queue is full; ignored for control frames.
	Policy Policy
	// Ref is the caller's own reference to what the frame carries (the
	// gateway passes the log record). The queue only hands it back: to
	// OnDrop with the dropped item, and to OnSent once it was written.
	Ref any
	// Dropped, for an item whose Ref is a Fallback, is the session's drop
	// count (Session.Dropped) when its Frame was chosen: pushed after later
	// drops, it is written as its FallbackFrame, since one of them may have
	// been the message its Frame depends on, its gap written already.
	Dropped uint64
}

// Fallback is implemented by the Ref of an item whose Frame depends on the
// item of its stream before it (a delta message): when the queue dropped
// messages of the stream before the item, or dropped any message between
// the choice of its Frame and its push (Item.Dropped), it writes
// FallbackFrame, a frame that stands alone, instead of Frame.
type Fallback interface {
	FallbackFrame() []byte
}

// isMessage reports whether it counts toward the queue bound.
func (it *Item) isMessage() bool { return it.Stream.Sub != 0 && it.Policy != Reliable }

// Options configures a Session (and a Queue). The zero value of each field
// selects its default; EncodeGap is required.
type Options struct {
	// QueueMessages bounds the outbound queue in message items. Default 1024:
	// about a second of a busy subscription, small enough that a stuck client
	// costs little memory (the frames themselves are shared).
	QueueMessages int
	// ReadLimit is the largest inbound frame in bytes; past it the connection
	// is closed with 1009. Default 1 MiB (1<<20), the protocol's limit.
	ReadLimit int64
	// PingInterval is the time between keepalive pings. Default 25s, below
	// the 30s idle timeout common in proxies.
	PingInterval time.Duration
	// PongTimeout is how long a ping waits for its pong before the session
	// ends. For a session accepted by Accept it runs again from the moment
	// the reader has caught up with its input when it passed while the
	// reader was busy (a handler waiting): a pong is not read while the
	// handler runs. Default 10s.
	PongTimeout time.Duration
	// WriteTimeout bounds a single write; one taking longer ends the session.
	// Default 10s.
	WriteTimeout time.Duration
	// FlushTimeout bounds how long Close spends writing queued frames before
	// it sends the close frame. Default 5s.
	FlushTimeout time.Duration
	// MaxBatchBytes is the largest text frame the writer builds by joining
	// queued frames with '\n'. Default 64 KiB: large enough to amortise the
	// per-write cost, small enough to keep latency and buffers low.
	MaxBatchBytes int
	// ControlBytes bounds the bytes of queued control items (replies and
	// errors). A control item that would take them past it closes the
	// session with status 1008: the client keeps sending requests without
	// reading the replies. An item is always queued when no other control
	// item is. Default 1 MiB (1<<20): thousands of replies, while a client
	// that never reads costs the gateway at most that much.
	ControlBytes int
	// MessageTimeout bounds the time from the first frame of an inbound
	// message to its end; a message still unfinished then (a client parking
	// a half-sent or fragmented message) closes the session with status
	// 1008. For a session accepted by Accept it counts from the first byte
	// of the frame's header, and bounds control frames too, so that a client
	// stopping in the middle of any frame is closed by it. Default 10s: a
	// message at the 1 MiB frame limit needs about 100 KiB/s.
	MessageTimeout time.Duration
	// ReadBudget, if set, is shared by sessions to bound the read buffers
	// their unfinished inbound messages hold together (see ReadBudget).
	// nil: each session is bounded on its own only.
	ReadBudget *ReadBudget
	// WriteDelay, when positive, makes the writer coalesce writes: woken by
	// a queued message, it waits up to WriteDelay for more before writing,
	// and writes at once when WriteDelayFrames frames are queued or a
	// control item (a reply) is. Fewer, larger writes cost less CPU per
	// delivery at moderate rates, for up to WriteDelay of latency. Default
	// 0: off, every wake-up writes what is queued at once.
	WriteDelay time.Duration
	// WriteDelayFrames, with WriteDelay set, is the most frames a batch
	// holds and the queue length at which the writer stops waiting.
	// Default 64 (DefaultWriteDelayFrames). Ignored without WriteDelay.
	WriteDelayFrames int
	// MaxDeferredWake bounds how long an item the session's handler fans
	// out through the session's own Deferral (SendDeferred) waits for its
	// writer to be woken, whatever the session's reader waits for: the
	// Deferral flushes itself then (deferral.go). Default 1 ms
	// (DefaultMaxDeferredWake).
	MaxDeferredWake time.Duration
	// EncodeGap appends a gap frame for offsets [from,to) of s to dst and
	// returns it. Required. It runs on the writer goroutine with the queue's
	// lock held.
	EncodeGap func(dst []byte, s Stream, from, to int64) []byte
	// OnDrop, if set, is called for every message the queue drops, before its
	// gap is recorded, on the goroutine that called Send and with the queue's
	// lock held: it must not block, must not keep it, and must not call the
	// Session or Queue.
	OnDrop func(it *Item)
	// OnSent, if set, is called on the writer goroutine after each socket
	// write, once for every item of that write whose Ref is not nil, with
	// the time the write completed; optional; must not block.
	OnSent func(ref any, at time.Time)
	// FramePrefix, if set, appends what goes before the frame of each
	// stream item (Stream.Sub != 0) that AppendBatch takes, on a line of
	// its own: the gateway's Server-Sent Events put the item's position
	// there for their transport. It runs with the queue's lock held, may
	// be called for an item that then does not fit the batch (and again
	// for the next batch), and must not block; AppendFrames (WebSocket
	// batches) ignores it. nil: frames only.
	FramePrefix func(dst []byte, it *Item) []byte
	// NoIdlePark keeps the reader of an idle session accepted by Accept on
	// a goroutine of its own instead of parking its socket in the idle
	// poller (idlepoll_linux.go). Default false: idle sessions park where
	// the platform has epoll (Linux), and hold no goroutine there.
	NoIdlePark bool
}

// Defaults for Options.
const (
	DefaultQueueMessages  = 1024
	DefaultReadLimit      = 1 << 20
	DefaultPingInterval   = 25 * time.Second
	DefaultPongTimeout    = 10 * time.Second
	DefaultWriteTimeout   = 10 * time.Second
	DefaultFlushTimeout   = 5 * time.Second
	DefaultMaxBatchBytes  = 64 << 10
	DefaultControlBytes   = 1 << 20
	DefaultMessageTimeout = 10 * time.Second
	// DefaultWriteDelayFrames: 64 frames of a few hundred bytes fill a
	// batch of some 16 KiB, past which a larger write saves little.
	DefaultWriteDelayFrames = 64
	// DefaultMaxDeferredWake: the handling of one read of a publisher
	// takes microseconds, so its reader's own flush nearly always comes
	// first and the read's messages still reach each subscriber as one
	// batch, while a publisher stalled in some wait delays nobody's
	// deliveries by more than a millisecond.
	DefaultMaxDeferredWake = time.Millisecond
)

func (o Options) withDefaults() Options {
	if o.QueueMessages <= 0 {
		o.QueueMessages = DefaultQueueMessages
	}
	if o.ReadLimit <= 0 {
		o.ReadLimit = DefaultReadLimit
	}
	if o.PingInterval <= 0 {
		o.PingInterval = DefaultPingInterval
	}
	if o.PongTimeout <= 0 {
		o.PongTimeout = DefaultPongTimeout
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.FlushTimeout <= 0 {
		o.FlushTimeout = DefaultFlushTimeout
	}
	if o.MaxBatchBytes <= 0 {
		o.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if o.ControlBytes <= 0 {
		o.ControlBytes = DefaultControlBytes
	}
	if o.MessageTimeout <= 0 {
		o.MessageTimeout = DefaultMessageTimeout
	}
	if o.WriteDelay < 0 {
		o.WriteDelay = 0
	}
	if o.WriteDelayFrames <= 0 {
		o.WriteDelayFrames = DefaultWriteDelayFrames
	}
	if o.MaxDeferredWake <= 0 {
		o.MaxDeferredWake = DefaultMaxDeferredWake
	}
	if o.EncodeGap == nil {
		panic("session: Options.EncodeGap is required")
	}
	return o
}

// Sentinel errors returned by Run (wrapped) for the reasons a session ends.
var (
	// ErrSlowConsumer: the queue overflowed under the Disconnect policy, or
	// too many reliable and control items were queued (close status 1013).
	ErrSlowConsumer = errors.New("session: slow consumer")
	// ErrBinaryFrame: the peer sent a binary frame (close status 1003).
	ErrBinaryFrame = errors.New("session: binary frame")
	// ErrInvalidUTF8: the peer sent a text frame that is not UTF-8 (1007).
	ErrInvalidUTF8 = errors.New("session: invalid UTF-8")
	// ErrWriteTimeout: a write took longer than Options.WriteTimeout. The
	// connection is closed without a close frame (one cannot follow a
	// frame cut short), so the peer sees it end in the middle of a frame.
	ErrWriteTimeout = errors.New("session: write timeout")
	// ErrKeepalive: a keepalive ping failed: no pong within
	// Options.PongTimeout while the reader waited for the socket, or the
	// ping could not be written. The connection is closed without a close
	// frame.
	ErrKeepalive = errors.New("session: keepalive")
	// ErrControlOverflow: queued control items would exceed
	// Options.ControlBytes (close status 1008).
	ErrControlOverflow = errors.New("session: too many unread replies")
	// ErrMessageTimeout: an inbound message was not complete within
	// Options.MessageTimeout (close status 1008).
	ErrMessageTimeout = errors.New("session: message not completed in time")
	// ErrRunTwice: Run was called more than once.
	ErrRunTwice = errors.New("session: Run called twice")
)
