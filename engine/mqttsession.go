package engine

import (
	"context"
	"errors"
	"time"
)

// Errors of an MQTTSessionStore.
var (
	// ErrMQTTSessionsFull: a new session would pass the store's bound on
	// the number of sessions.
	ErrMQTTSessionsFull = errors.New("engine: mqtt session store full")
	// ErrMQTTSessionTooLarge: the session passes the bound on one
	// session's bytes.
	ErrMQTTSessionTooLarge = errors.New("engine: mqtt session too large")
	// ErrMQTTSessionMoved: the stored session is no longer the saver's
	// (another connection claimed it, or a clean start removed it).
	ErrMQTTSessionMoved = errors.New("engine: mqtt session owned by another connection")
)

// MQTTSessionStore is an optional capability of an Engine: the persistent
// sessions of MQTT clients (clean session 0 in 3.1.1, a session expiry
// interval in MQTT 5), one record per client identifier, shared by every
// node on the same store so that a client reconnecting through any node
// resumes its session. Routers use it when their engine implements it:
//
//	if st, ok := eng.(engine.MQTTSessionStore); ok { ... }
//
// A record holds the session's subscriptions and, for the messages it has
// not delivered, positions in the log (never copies of messages): where
// each subscription goes on in each partition, and the deliveries sent and
// not acknowledged. It is apart from the log and from groups.
//
// Ownership: a record names the connection that holds it (Owner). A save
// with Claim set takes the record over whatever its owner; any other save
// applies only while the record exists and names the same owner, else it
// fails with ErrMQTTSessionMoved and changes nothing. So a connection that
// was taken over, or whose session a clean start removed, cannot write it
// back. A save with Restore set stores the record while the store holds
// none for the client id or holds it under the same owner, else fails
// with ErrMQTTSessionMoved: a live connection puts back its record that a
// sweep removed (its node found gone for a moment) without taking it from
// a connection that claimed it since.
//
// An implementation owes:
//   - SaveMQTTSession stores s under s.ClientID, subject to ownership; a
//     record over MQTTSessionLimits.MaxBytes (MQTTSession.Size) fails with
//     an error wrapping ErrMQTTSessionTooLarge; a record for a client id
//     the store does not hold fails with ErrMQTTSessionsFull when the
//     store holds MaxCount records. Failures change nothing.
//   - LoadMQTTSession returns the record of a client id; one whose
//     ExpiresAt has passed (at now) is removed and reported absent.
//   - DeleteMQTTSession removes a record (owner "": whoever holds it;
//     else only while owner holds it). Removing what is absent is no
//     error.
//   - ExpireMQTTSessions removes every record whose ExpiresAt is set and
//     before now, and every record held (ExpiresAt zero) by a Node the
//     store has found gone for at least the record's Expiry (a node lost
//     while its connections held sessions saves no expiry time for
//     them), and returns how many it removed and how many are left.
//   - Once a call has returned, every node's calls reflect it.
//
// Holds: a record whose Expiry is zero is no session to keep but a
// connection's hold on its client id (a session that ends with its
// connection, on an engine of several nodes, so that the other nodes see
// a takeover; MQTTSessionWatcher). A hold counts against neither
// MaxCount nor the sessions ExpireMQTTSessions reports left, and is never
// refused as the store being full; it is removed like any record, and
// expires like any held record once its node is gone.
//
// Implementations are safe for concurrent use.
type MQTTSessionStore interface {
	SaveMQTTSession(ctx context.Context, s MQTTSession, lim MQTTSessionLimits) error
	LoadMQTTSession(ctx context.Context, clientID string, now time.Time) (MQTTSession, bool, error)
	DeleteMQTTSession(ctx context.Context, clientID, owner string) error
	ExpireMQTTSessions(ctx context.Context, now time.Time) (removed, left int, err error)
}

// MQTTSessionWatcher is an optional capability of an MQTTSessionStore
// shared by several nodes (jsengine): it tells a node of every change to
// the store, in the store's order, so that a connection whose client id a
// connection of another node has claimed can be ended: client-id takeover
// across a cluster. (A removal is no takeover: on a store of several nodes
// every connection claims its id, clean ones by a hold; a record removed
// while its connection lives, by a sweep that found its node gone for a
// moment, is put back by its node with a Restore save.)
type MQTTSessionWatcher interface {
	// WatchMQTTSessions installs h, called for every record stored or
	// removed (owner and node "" for a removal), in the store's order, once
	// this node's view holds the change; the view holds the changes of
	// every node, so a record written before the store's first call on
	// this node is reported too. h runs on the store's goroutine, must
	// return quickly and must not call the store. stop removes h; a second
	// WatchMQTTSessions before stop replaces the first.
	WatchMQTTSessions(h func(clientID, owner, node string)) (stop func())
	// MQTTSessionHolder returns the owner and node of clientID's record as
	// this node's view holds it, with no call to the network; ok is false
	// when the view has none.
	MQTTSessionHolder(clientID string) (owner, node string, ok bool)
}

// MQTTSession is a stored MQTT session.
type MQTTSession struct {
	ClientID string
	// Owner is the connection holding the session; the caller's own
	// unique name for it.
	Owner string
	// Node is the node of that connection (Nodes.NodeID), "" when the
	// engine has one node: a session held (ExpiresAt zero) by a node that
	// is gone expires as if its connection had ended when the store found
	// the node gone.
	Node string
	// Claim, in a save, takes the record over from any owner. Not stored.
	Claim bool
	// Restore, in a save, stores the record only while the store holds
	// none of the client id or holds it under Owner (see
	// MQTTSessionStore). Not stored.
	Restore bool `json:"-"`
	// ExpiresAt is when the session ends unless its client connects
	// again; zero while a connection holds it.
	ExpiresAt time.Time
	// Expiry is how long the session lasts once its connection is gone;
	// zero for a hold (see MQTTSessionStore).
	Expiry time.Duration
	// Epoch is the engine's epoch (Engine.Epoch) the positions are of.
	Epoch string
	Subs  []MQTTSubscription
	// Released are the packet identifiers of QoS 2 deliveries the client
	// received (PUBREC) and did not complete (PUBCOMP): a resume sends
	// their PUBREL again and gives no other delivery those identifiers
	// until they complete [MQTT-4.4.0-1].
	Released []uint16
}

// MQTTSubscription is a subscription of a stored session.
type MQTTSubscription struct {
	Filter            string // as the client gave it
	QoS               byte
	NoLocal           bool
	RetainAsPublished bool
	// SubID is the MQTT 5 subscription identifier of the filter; 0: none.
	SubID int `json:",omitempty"`
	// Presence: the filter asked presence (MQTT 5, the SUBSCRIBE's user
	// property presence=true) and joins its topic's presence set again
	// when the session is restored. Absent in records of older versions:
	// false.
	Presence bool `json:",omitempty"`
	// Since is when the subscription began to track positions: a
	// partition without a position in Next goes on at its first record
	// appended at or after Since.
	Since time.Time
	// Next is, per partition its patterns matched, the next offset to
	// deliver (Position.Offset is that offset, not the last delivered).
	Next []MQTTPosition
	// InFlight are deliveries sent and not acknowledged: delivered again
	// with DUP.
	InFlight []MQTTPosition
}

// MQTTPosition is a position of one of a subscription's native patterns.
type MQTTPosition struct {
	Pattern string
	Position
	// Created is the creation time of the topic the position is of
	// (TopicInfo.Created): a topic deleted and made again under its name
	// has another, and the position is not of it. Zero: not known.
	Created time.Time `json:",omitzero"`
}

// Size is what the position counts in MQTTSession.Size.
func (p *MQTTPosition) Size() int {
	n := len(p.Pattern) + len(p.Topic) + 16
	if !p.Created.IsZero() {
		n += 8
	}
	return n
}

// Size is what a session counts against MQTTSessionLimits.MaxBytes: its
// client id and every string and position it holds.
func (s *MQTTSession) Size() int64 {
	n := len(s.ClientID) + len(s.Owner) + len(s.Node) + len(s.Epoch) + 32 + 2*len(s.Released)
	for i := range s.Subs {
		sb := &s.Subs[i]
		n += len(sb.Filter) + 32
		for _, p := range sb.Next {
			n += p.Size()
		}
		for _, p := range sb.InFlight {
			n += p.Size()
		}
	}
	return int64(n)
}

// IsHold reports whether the record is a connection's hold on its client
// id rather than a session to keep (Expiry zero; see MQTTSessionStore).
func (s *MQTTSession) IsHold() bool { return s.Expiry <= 0 }

// MQTTSessionLimits bound a session store; a value <= 0 is no bound.
type MQTTSessionLimits struct {
	MaxCount int
	MaxBytes int64
}
