// Package session runs the connection of one Switchyard client session: a
// writer that drains a bounded, prioritised outbound queue into batched
// frames, over a WebSocket (with a reader that hands each inbound text
// frame to a Handler) or over a one-way Transport such as a Server-Sent
// Events response.
//
// # Outbound queue
//
// Every outbound object is an Item. Control items (replies and errors, with a
// zero Stream) go to their own FIFO, which the writer always empties first;
// they are never dropped. Their bytes are bounded by Options.ControlBytes:
// a control item past it closes the session with 1008 (the client sends
// requests and does not read the replies). Control items and Reliable
// stream items together are bounded in count by four times
// Options.QueueMessages: past it a control item closes the session with
// 1008, a Reliable item with 1013. Stream items go to one of four
// priority lanes, the writer draining higher lanes first. While a stream
// (subscription, topic, partition) has items queued, its new items join the
// lane it is already in, so the order within a stream never changes.
//
// Message items (a non-zero Stream.Sub and a policy other than Reliable)
// count toward Options.QueueMessages. When that bound is reached, a lower
// priority message is evicted first; otherwise the incoming item's Policy
// decides: DropOld evicts the oldest DropOld message of the lowest lane that
// is not above the incoming one, DropNew drops the incoming message, and
// Disconnect closes the session with status 1013. Every dropped message is
// counted and remembered as a gap of its stream: offsets [from,to) that are
// written as one gap frame (Options.EncodeGap) before the next message of that
// stream, or at the end of the writer's current batch when the stream has
// nothing queued. Contiguous drops merge into one range. For each stream the
// delivered offsets and the gap ranges together cover exactly the offsets
// that were sent, without overlap.
// A message whose frame depends on the one before it in its stream (a delta)
// carries a Ref implementing Fallback: when gap frames of its stream go out
// just before it, or the queue dropped any message after its frame was
// chosen (Item.Dropped, Session.Dropped), its FallbackFrame, which stands
// alone, is written instead.
//
// The writer joins the frames it takes from the queue with '\n' into one
// text frame of at most Options.MaxBatchBytes (a single larger frame is
// written alone), so a busy connection costs far fewer writes than messages.
// A session accepted by Accept without compression writes that frame
// itself, the queued frames referenced, not copied, in one vectored write
// (lazyconn.go); the library then writes only control frames.
//
// # Deferred wakes
//
// SendDeferred queues an item without waking the writer until a Deferral
// is flushed; a reader flushes its session's own Deferral before each read
// of its socket, so that the messages a publisher's read fans out reach
// each subscriber's writer at once, as one batch (deferral.go). A wake is
// never deferred longer than Options.MaxDeferredWake (1 ms by default): a
// Deferral its owner does not flush in time, whatever the owner waits
// for, flushes itself.
//
// # Inbound frames
//
// Text frames of valid UTF-8 go to Handler.HandleFrame. A binary frame closes
// the connection with status 1003, invalid UTF-8 with 1007, and a frame over
// Options.ReadLimit with 1009. A message (all its fragments) must arrive
// within Options.MessageTimeout of its first frame, or the session closes
// with 1008; for a session accepted by Accept the timeout starts with the
// first byte of the frame's header, and covers control frames too, so that
// a client that stops in the middle of any frame is closed by it. A
// message is read into a small pooled buffer and, when longer, into fixed
// 64 KiB chunks: an unfinished message holds about the bytes that arrived
// (Stats.Reading), never a buffer grown by copying. A ReadBudget
// (Options.ReadBudget) shared by sessions bounds the chunks their
// unfinished messages hold together: a reader that needs a chunk past it
// waits for room, after flushing its Deferral.
//
// # Memory of an idle session
//
// An idle session accepted by Accept holds no goroutine on Linux: its
// reader parks the socket in the idle poller's epoll set, one for the
// process, watched by one goroutine that starts a reader for each burst of
// input (idlepoll_linux.go); a close of the connection resumes a parked
// reader, which ends the session. Elsewhere it holds one goroutine (the
// reader, waiting for readability on the runtime's smallest stack, 2 KiB:
// it runs nothing but that wait, each burst of input being read and
// handled on a goroutine of its own that exits once nothing more is at
// hand). It holds no writer goroutine (see Concurrency) and no buffer: the WebSocket library
// gets a small bufio pair over a reader and writer that borrow pooled
// buffers only while bytes are in hand (lazyconn.go; TCP and Unix sockets,
// not TLS). Control frames never leave its reader waiting inside the
// library's frame reader: the session answers a client's ping itself, and
// writes its keepalive pings itself and takes their pongs, wherever they
// arrive between frames (keepalive.go). Each ring of the queue gives its
// first buffer of slots back to a pool shared by all sessions as soon as
// it is empty (a ring grown past it keeps its buffer), and when its writer
// parks the queue gives back its stream state (Queue.Shrink) too.
//
// # One-way sessions
//
// NewOneWay runs the same queue and writer over a Transport instead of a
// WebSocket (the gateway's Server-Sent Events; NewOneWayConn takes the
// transport as one TransportConn value, as the gateway's MQTT sessions
// do): no inbound frames, the keepalive is whatever the transport writes,
// and Run returns once the transport is closed, which the writer does
// before it marks its own end (a one-way session's end waits for that
// step, with nothing made beside the session).
//
// # Concurrency
//
// All methods of Session are safe for concurrent use by multiple goroutines,
// except Run and Start, one of which is called once. Start runs the reader
// on goroutines of its own and returns; Run is Start and a wait for the
// end. The writer goroutine runs only while there is something to
// write or a control event to handle: it exits once it is idle and the next
// Send (or close, or keepalive) starts it again, so an idle session holds
// at most its reader's goroutine (none where it parks, above). A session that keeps its writer busy (runs in quick
// succession) keeps it waiting instead until a keepalive period passes
// quietly. At most one writer runs at a time. While a keepalive ping is in
// flight (at most one, every Options.PingInterval) a short-lived goroutine
// waits for its pong, or for the end of the connection, with which the
// session ends at once. For a session accepted by Accept, a pong timeout
// that passes while the reader is busy with input (its handler waiting)
// is not the peer's silence: the ping waits for the reader to catch up and
// then for another PongTimeout (keepalive.go). Everything Run starts has
// exited when Run returns (when Start's ended is called).
//
// Send never blocks on the network: it takes the queue's lock and may start
// the writer goroutine.
//
// Queue is safe for concurrent use. Its lock is the only lock held while
// calling the caller's code: Options.OnDrop, Options.EncodeGap and
// Options.FramePrefix run with it held and must neither block nor call back
// into the Session or Queue (Options.OnSent runs on the writer with no lock
// held). Lock order, a lock taken only under those before it:
//
//   - Queue.mu, then only what OnDrop, EncodeGap and FramePrefix take;
//   - idleWait.mu (the writer holds it around the WebSocket library's close
//     handshake, which reads), then the library's locks, then
//     lazyWriter.mu (taken under the library's writes);
//   - Session.mu (close state and the end channels; ends.go), Deferral.mu (its list of sessions to wake),
//     ReadBudget.mu and idlePoller.mu (its table of parked sessions, taken
//     under idleWait.mu when a close resumes a parked reader) are leaves: nothing is taken while they are held,
//     and none is held while the queue's lock is taken.
package session
