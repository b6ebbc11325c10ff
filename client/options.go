package client

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"time"
)

// Options configure a Client. A nil *Options, and the zero value of each
// field, mean the default stated on the field.
type Options struct {
	// Token is sent in the handshake's Authorization header ("Bearer
	// <token>", never in the URL) when the gateway requires
	// authentication. Default: none.
	Token string
	// TokenFunc, when set, is called for a token before every connection
	// attempt (so a reconnect presents a fresh one) and when the gateway
	// sends refresh_required, whose answer refreshes the open session
	// without reconnecting. It is called on a goroutine of the client's,
	// never concurrently with itself for a refresh; ctx ends with the
	// client or after RequestTimeout. It takes precedence over Token.
	// Default: none.
	TokenFunc TokenFunc
	// Header holds extra HTTP headers for the WebSocket handshake.
	// Default: none.
	Header http.Header
	// HTTPClient performs the WebSocket handshake. Default:
	// http.DefaultClient.
	HTTPClient *http.Client
	// Reconnect says whether and how fast to redial after the connection
	// drops. Default: reconnect, 250ms doubling to 10s, with jitter.
	Reconnect ReconnectPolicy
	// RequestTimeout bounds each request (publish, subscribe, ack, ...)
	// whose context has no earlier deadline, including the time spent
	// waiting for a reconnect. Default: 10s, long enough to ride out a
	// short outage at the default backoff.
	RequestTimeout time.Duration
	// PingInterval is how often the client pings the gateway to check
	// that the connection is alive. A connection that died without a close
	// (a NAT that forgot it, a laptop that slept) is noticed within
	// PingInterval plus PongTimeout, and redialed. Negative disables the
	// check. Default: 15s, so that the client notices before the gateway
	// drops its side (its ping interval plus pong timeout, 35s by default).
	PingInterval time.Duration
	// PongTimeout is how long a ping may wait for its pong before the
	// connection counts as dead. Default: 10s.
	PongTimeout time.Duration
	// Logger receives the client's logs. Default: discard.
	Logger *slog.Logger
	// OnGap is called, on the dispatcher goroutine, for every gap: records
	// that were not delivered to a subscription. Default: the gap is only
	// logged.
	OnGap func(Gap)
	// OnReset is called, on the dispatcher goroutine, when a subscription
	// could not be continued from its positions after a reconnect
	// (recovered:false): the gateway's epoch changed or records were
	// trimmed. Delivery restarts at the earliest record the log holds.
	// Default: the reset is only logged.
	OnReset func(Reset)
	// OnTopicDeleted is called, on the dispatcher goroutine, when a topic
	// a subscription read was deleted (the protocol's topic_deleted
	// frame); the subscription stays, and a topic created again under the
	// name is delivered from its start. Default: the deletion is only
	// logged.
	OnTopicDeleted func(TopicDeleted)
	// OnState is called, on the dispatcher goroutine, when the connection
	// goes down or comes back, and once with StateClosed. err is the cause
	// of a StateDisconnected. Default: none.
	OnState func(state State, err error)
	// OnError is called, on the dispatcher goroutine, with errors that no
	// request is waiting for: an error frame without an id, or a
	// subscription the gateway refused while resubscribing (that
	// subscription is then closed). Default: the error is only logged.
	OnError func(error)
	// OnPresence is called, on the dispatcher goroutine, for every join
	// and leave on the topics this client subscribed to with presence,
	// and with the list after a resync (PresenceEvent.Resync).
	// Default: none (the frames are ignored).
	OnPresence func(PresenceEvent)
}

// TokenFunc returns the token to present to the gateway.
type TokenFunc func(ctx context.Context) (string, error)

// ReconnectPolicy controls redialing after a connection loss.
type ReconnectPolicy struct {
	// Disabled turns reconnection off: after a connection loss every call
	// fails with ErrClosed and subscriptions end. Default: false.
	Disabled bool
	// MinDelay is the wait before the first redial; it doubles per failed
	// attempt. Default: 250ms.
	MinDelay time.Duration
	// MaxDelay caps the wait between redials. Default: 10s.
	MaxDelay time.Duration
	// Jitter is the fraction of each delay that is randomized, from 0 to 1,
	// so that many clients do not redial in step. Default: 0.5 (a delay
	// d becomes a random value in [d/2, d]). Negative disables jitter.
	Jitter float64
}

func (o *Options) withDefaults() Options {
	var r Options
	if o != nil {
		r = *o
	}
	if r.HTTPClient == nil {
		r.HTTPClient = http.DefaultClient
	}
	if r.Reconnect.MinDelay <= 0 {
		r.Reconnect.MinDelay = 250 * time.Millisecond
	}
	if r.Reconnect.MaxDelay <= 0 {
		r.Reconnect.MaxDelay = 10 * time.Second
	}
	if r.Reconnect.MaxDelay < r.Reconnect.MinDelay {
		r.Reconnect.MaxDelay = r.Reconnect.MinDelay
	}
	switch {
	case r.Reconnect.Jitter == 0:
		r.Reconnect.Jitter = 0.5
	case r.Reconnect.Jitter < 0:
		r.Reconnect.Jitter = 0
	case r.Reconnect.Jitter > 1:
		r.Reconnect.Jitter = 1
	}
	if r.RequestTimeout <= 0 {
		r.RequestTimeout = 10 * time.Second
	}
	if r.PingInterval == 0 {
		r.PingInterval = 15 * time.Second
	}
	if r.PongTimeout <= 0 {
		r.PongTimeout = 10 * time.Second
	}
	if r.Logger == nil {
		r.Logger = slog.New(slog.DiscardHandler)
	}
	return r
}

// State is the connection state reported to Options.OnState.
type State int

const (
	// StateConnected: a connection is up and subscriptions were resent.
	StateConnected State = iota + 1
	// StateDisconnected: the connection dropped; the client is redialing
	// unless reconnection is disabled.
	StateDisconnected
	// StateClosed: the client stopped, by Close or because reconnection is
	// disabled.
	StateClosed
)

func (s State) String() string {
	switch s {
	case StateConnected:
		return "connected"
	case StateDisconnected:
		return "disconnected"
	case StateClosed:
		return "closed"
	}
	return "unknown"
}

// OnFull is what the gateway does with a plain subscription's messages when
// the session's outbound queue is full.
type OnFull string

const (
	// DropOld drops the oldest queued messages (the gateway's default).
	DropOld OnFull = "drop_old"
	// DropNew drops the new message.
	DropNew OnFull = "drop_new"
	// Disconnect closes the connection with 1013; the client reconnects
	// and resumes from its positions.
	Disconnect OnFull = "disconnect"
)

// SubscribeOptions configure one subscription. The zero value is a plain
// subscription from the latest record.
type SubscribeOptions struct {
	// Group, when set, joins that consumer group: records are shared with
	// the group's other members and must be acknowledged. Default: a plain
	// subscription.
	Group string
	// From says where delivery starts; see Latest, Earliest, FromTime and
	// FromPositions. Default: the gateway's (latest for plain
	// subscriptions, earliest for a new group).
	From From
	// OnFull is the gateway's drop policy for a plain subscription.
	// Default: the gateway's (DropOld).
	OnFull OnFull
	// Filter delivers only records whose headers hold every given pair.
	// Default: no filter.
	Filter map[string]string
	// Presence makes this session present on the subscription's topic
	// (the pattern must be a topic; plain subscriptions only): other
	// sessions' joins and leaves on it go to Options.OnPresence.
	// Default: false.
	Presence bool
	// Delta asks the gateway for delta-compressed messages ("delta":
	// "fossil"; plain subscriptions only): after a full message of a
	// (topic, partition), messages carry the Fossil delta against the
	// previous one, which the client applies before delivery, so Data is
	// always the whole payload. The client keeps the last payload of
	// every partition of the subscription. A delta it cannot apply is
	// reported to OnError (wrapping ErrProtocol) and the client
	// reconnects, resuming from its positions with full messages.
	// Default: false.
	Delta bool
	// Buffer is the capacity of C for SubscribeChan. Default: 256.
	Buffer int
	// MaxPending bounds the deliveries received but not yet handled for
	// this subscription. When a plain subscription reaches it, the client
	// stops reading the connection until the handler makes room (up to
	// MaxPendingWait), so the gateway's queue and its OnFull policy take
	// the pressure; this holds back every subscription of the client.
	// While a request waits for its reply (a handler that publishes or
	// acks), the client keeps reading and lets up to twice MaxPending
	// wait. A plain message that finds no room is dropped and reported to
	// OnGap with reason "client_queue_full" once the handler has drained
	// what was queued before it. A group delivery beyond MaxPending is
	// nacked at once, so the gateway redelivers it later. Default: 65536.
	MaxPending int
	// MaxPendingWait bounds how long the client stops reading for a plain
	// subscription that has MaxPending deliveries waiting. When it passes,
	// the subscription's records are dropped until its handler has made
	// room. Keep it well below the gateway's pong timeout (10s), which a
	// client that reads nothing for longer may run into. Negative: never
	// wait, drop at once. Default: 5s.
	MaxPendingWait time.Duration
	// DedupeSize is how many recently acknowledged positions a group
	// subscription remembers to suppress redeliveries. Default: 4096.
	DedupeSize int
}

func (o SubscribeOptions) withDefaults() SubscribeOptions {
	if o.Buffer <= 0 {
		o.Buffer = 256
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 65536
	}
	if o.DedupeSize <= 0 {
		o.DedupeSize = 4096
	}
	if o.MaxPendingWait == 0 {
		o.MaxPendingWait = 5 * time.Second
	}
	return o
}

// From is where a subscription starts. The zero value leaves the choice to
// the gateway.
type From struct {
	kind      fromKind
	time      time.Time
	epoch     string
	positions []Position
	offset    int // fromLast: how many records back; 0 for the newest
}

type fromKind int

const (
	fromDefault fromKind = iota
	fromLatest
	fromEarliest
	fromTime
	fromPositions
	fromLast
)

// Latest starts with records appended after the subscription.
func Latest() From { return From{kind: fromLatest} }

// Earliest starts with the oldest record the log holds.
func Earliest() From { return From{kind: fromEarliest} }

// Last starts with the newest retained record of every matched topic and
// partition ("last"), then continues live with no gap and no duplicate.
// With n > 0 it starts with the newest n records of each instead
// ({"last": n}; the gateway bounds n, 100 by default).
func Last(n ...int) From {
	f := From{kind: fromLast}
	if len(n) > 0 {
		f.offset = n[0]
	}
	return f
}

// FromTime starts with the first record appended at or after t.
func FromTime(t time.Time) From { return From{kind: fromTime, time: t} }

// FromPositions continues after positions: each Position is the last offset
// already seen of its (topic, partition) in the log of epoch. Partitions
// not listed start at their earliest record.
func FromPositions(epoch string, positions ...Position) From {
	return From{kind: fromPositions, epoch: epoch, positions: append([]Position(nil), positions...)}
}

// IsZero reports whether f leaves the start to the gateway.
func (f From) IsZero() bool { return f.kind == fromDefault }

// MarshalJSON encodes f as the protocol's "from" value.
func (f From) MarshalJSON() ([]byte, error) {
	switch f.kind {
	case fromLatest:
		return []byte(`"latest"`), nil
	case fromEarliest:
		return []byte(`"earliest"`), nil
	case fromLast:
		if f.offset > 0 {
			return json.Marshal(struct {
				Last int `json:"last"`
			}{f.offset})
		}
		return []byte(`"last"`), nil
	case fromTime:
		return json.Marshal(struct {
			Time string `json:"time"`
		}{f.time.UTC().Format(time.RFC3339Nano)})
	case fromPositions:
		pos := f.positions
		if pos == nil {
			pos = []Position{}
		}
		return json.Marshal(struct {
			Epoch     string     `json:"epoch"`
			Positions []Position `json:"positions"`
		}{f.epoch, pos})
	}
	return []byte("null"), nil
}

// Position is an offset in one partition of a topic.
type Position struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
}

// PublishOption sets an optional field of a publish.
type PublishOption func(*publishReq)

// WithKey sets the record key: records with one key go to one partition,
// in order.
func WithKey(key string) PublishOption { return func(r *publishReq) { r.Key = key } }

// WithHeaders sets the record headers, which subscriptions can filter on.
func WithHeaders(h map[string]string) PublishOption {
	return func(r *publishReq) { r.Headers = h }
}

// WithMsgID makes the publish idempotent: a repeat with the same id on the
// same topic within the gateway's dedupe window is stored once and reported
// as a duplicate.
func WithMsgID(id string) PublishOption { return func(r *publishReq) { r.MsgID = id } }

// WithPriority sets the priority, 0 (lowest) to 3; the gateway's default
// is 1.
func WithPriority(p int) PublishOption { return func(r *publishReq) { r.Priority = &p } }
