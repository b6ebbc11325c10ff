package engine

import "context"

// Presence is an optional capability of an Engine: a registry, shared by
// every node on the same store, of the sessions subscribed with presence to
// each topic. Routers use it when their engine implements it:
//
//	if p, ok := eng.(engine.Presence); ok { ... }
//
// An implementation owes:
//   - PresenceJoin of a (topic, session) already present renews it and is
//     not announced again; PresenceLeave of an absent one is a no-op.
//   - Every watcher is told of every join and every leave exactly once, in
//     the order of the changes of each (topic, session), wherever they were
//     made; a member whose node stops renewing it (the node died) leaves
//     after a bounded time, announced once.
//   - PresenceList counts every member, hidden ones included, and returns
//     at most limit of the visible ones.
//
// Implementations are safe for concurrent use. Observers are called on the
// engine's goroutines and must not call back into the engine.
type Presence interface {
	PresenceJoin(ctx context.Context, m PresenceMember) error
	PresenceLeave(ctx context.Context, topic, session string) error
	// PresenceList returns up to limit visible members of topic (limit
	// <= 0: none, only the count) and the number of all members.
	PresenceList(ctx context.Context, topic string, limit int) ([]PresenceMember, int, error)
	// WatchPresence calls obs for every join and leave until stop is
	// called; stop waits for a call in progress.
	WatchPresence(obs PresenceObserver) (stop func())
}

// PresenceMember is one session present on a topic.
type PresenceMember struct {
	Topic   string
	Session string
	User    string
	// Info is compact JSON the application attached to the session; nil
	// when none.
	Info []byte
	// Hidden members are counted but not listed or announced (the topic
	// was over its listing bound when they joined).
	Hidden bool
}

// PresenceObserver receives presence changes.
type PresenceObserver interface {
	// PresenceChanged reports a join (joined true) or a leave.
	PresenceChanged(m PresenceMember, joined bool)
}
