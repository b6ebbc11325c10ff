// Package client is the Go client library for Switchyard, the WebSocket
// pub/sub gateway. It speaks the gateway's wire protocol (docs/protocol.md)
// over one WebSocket connection and nothing else: it does not import any of
// the gateway's own packages.
//
// A Client publishes records, holds plain and consumer-group subscriptions,
// and keeps them alive across connection losses:
//
//   - Dial connects and reads the gateway's welcome (session, epoch, limits).
//   - Publish appends a record and returns its partition and offset.
//   - Subscribe and SubscribeChan start deliveries to a handler or a
//     channel; group deliveries are acknowledged with Message.Ack or
//     Message.Nack.
//   - A subscription whose handler falls behind holds back the reading of
//     the connection, up to a bound, before it drops records, so the
//     gateway's queue and its pacing take the pressure.
//   - A connection that dies without a close is noticed by a ping without
//     a pong (Options.PingInterval, Options.PongTimeout).
//   - When the connection drops, the client redials with jittered
//     exponential backoff, resubscribes every plain subscription from the
//     last position it delivered ({"epoch","positions"}), so nothing the log
//     still holds is lost, and makes group subscriptions rejoin their groups.
//
// # Delivery guarantees
//
// Plain subscriptions deliver each record at most once to the handler: a
// record at or below the last offset delivered for its (subscription, topic,
// partition) is dropped as a duplicate, except after the topic was deleted
// on the same connection: the new incarnation's offsets start at 0 again
// (messages of the deleted one may still follow the topic_deleted frame;
// they are delivered too). Records the gateway could not
// deliver are reported to Options.OnGap; when a resubscription could not
// continue from the positions given (the gateway restarted with another
// epoch, or the records were trimmed), Options.OnReset is called; the
// positions of the old epoch are sent again on every reconnect until a
// reply settles them, so a connection lost in between does not lose the
// reset.
//
// Group subscriptions are at-least-once on the wire; the client makes them
// effectively-once for the handler by remembering a bounded set of recently
// acknowledged positions per subscription. A redelivery of a position in
// that set is acknowledged again without running the handler.
//
// # Concurrency
//
// A Client is safe for concurrent use by multiple goroutines. Dial starts two
// goroutines: a reader, which owns the connection, reconnects and answers
// requests, and a dispatcher, which runs handlers and callbacks (OnGap,
// OnReset, OnError, OnState) one at a time, in the order the gateway sent
// the frames; so deliveries of one subscription are handled in order. While
// a connection is up, the reader runs a third goroutine beside it that
// pings the gateway (Options.PingInterval; liveness.go) and exits with the
// connection. Close
// stops both and waits for them, including a handler that is running; a
// handler must therefore not call Close. Handlers may call any other method,
// including Publish, Ack and Nack. The reader waits for the dispatcher only
// while a plain subscription has SubscribeOptions.MaxPending deliveries
// waiting and no request waits for its reply, and at most
// SubscribeOptions.MaxPendingWait (backpressure.go).
//
// Lock order: Client.mu before Subscription.mu; the dispatcher's queue lock
// is a leaf. No lock is held while writing to the connection or calling
// user code.
package client
