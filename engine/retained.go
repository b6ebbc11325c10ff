package engine

import (
	"context"
	"errors"
	"time"
)

// ErrRetainedFull: SetRetained would pass the store's bound in count or
// bytes.
var ErrRetainedFull = errors.New("engine: retained store full")

// Retainer is an optional capability of an Engine: a store, shared by every
// node on the same store, of at most one retained message per topic (MQTT's
// retained messages: the last value a publisher asked to keep). Routers use
// it when their engine implements it:
//
//	if r, ok := eng.(engine.Retainer); ok { ... }
//
// It is apart from the log: retention, topic deletion and groups do not
// touch it, and a retained message is not a record.
//
// An implementation owes:
//   - SetRetained replaces the topic's retained message; one with empty
//     Data removes it (a no-op when there is none), whatever the bounds.
//   - Storing a message for a topic that has none fails with an error
//     wrapping ErrRetainedFull, and changes nothing, when the store holds
//     RetainLimits.MaxCount messages or would pass MaxBytes; replacing a
//     topic's message fails so only when its growth would pass MaxBytes.
//     Across nodes, writers racing for the last room may pass a bound by
//     what they store at once.
//   - Once SetRetained has returned, Retained and RetainedStats on any
//     node (that has not lost its store) reflect it.
//
// Implementations are safe for concurrent use.
type Retainer interface {
	// SetRetained stores m as m.Topic's retained message, or removes the
	// topic's retained message when m.Data is empty.
	SetRetained(ctx context.Context, m RetainedMessage, lim RetainLimits) error
	// Retained calls fn with every retained message whose topic matches
	// pattern (the trie's syntax: "*" one segment, "#" one or more), in no
	// particular order, until fn returns false. fn must not call back into
	// the engine; the messages are copies the caller may keep.
	Retained(ctx context.Context, pattern string, fn func(RetainedMessage) bool) error
	// RetainedStats returns how many retained messages the store holds and
	// their bytes (RetainedMessage.Size).
	RetainedStats(ctx context.Context) (count int, bytes int64, err error)
}

// RetainedMessage is a topic's retained message.
type RetainedMessage struct {
	Topic   string
	Key     string
	Headers map[string]string
	Data    []byte
	// QoS is the MQTT quality of service it was published with, kept for
	// the caller and not interpreted.
	QoS uint8
	// Time is when it was stored (set by the caller).
	Time time.Time
}

// Size is what a retained message counts against RetainLimits.MaxBytes:
// its topic, key, headers and data.
func (m *RetainedMessage) Size() int64 {
	n := len(m.Topic) + len(m.Key) + len(m.Data)
	for k, v := range m.Headers {
		n += len(k) + len(v)
	}
	return int64(n)
}

// RetainLimits bound a retained store; a value <= 0 is no bound.
type RetainLimits struct {
	MaxCount int
	MaxBytes int64
}

// Admits reports whether a store holding count messages of bytes bytes
// may take m, which replaces a message of oldSize bytes (had: the topic
// has one).
func (l RetainLimits) Admits(count int, bytes int64, had bool, oldSize int64, m *RetainedMessage) bool {
	if !had && l.MaxCount > 0 && count >= l.MaxCount {
		return false
	}
	return l.MaxBytes <= 0 || bytes-oldSize+m.Size() <= l.MaxBytes
}
