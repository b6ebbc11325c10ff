package jsengine

// Retained messages on JetStream (engine.Retainer): the bucket
// <prefix>_retained holds one key per topic, hex(topic), whose value is
// the message (retainedVal), and every node keeps the bucket's view in
// memory, fed by a watcher, as presence does: the view answers Retained
// and RetainedStats and checks the bounds. A call first reads the bucket
// stream's last sequence and waits until the view has applied it, so it
// sees every write that returned before it began, on any node. The view
// holds at most the store's bound of bytes (RetainLimits.MaxBytes), on
// every node.
//
// A removal is a put of an empty message (the view drops the topic), so
// that every write has a revision, and every write is an update that NATS
// accepts only if the key's last revision is the one the view holds for
// it (revs, which keeps the revision of removed topics too: a few bytes
// by topic ever removed, as the bucket keeps their empty messages). So
// the message a write replaces is exactly the view's, and SetRetained
// returns it with the write's revision; a write that finds the key
// changed under it syncs the view and tries again (retainedTries).
// UndoRetained writes the previous message back with an update that
// expects the write's revision, so an undo never replaces another node's
// later write. (The watcher cannot say what a put replaced: with one
// revision kept by key, a watcher that lags misses the revisions replaced
// meanwhile.)
//
// The bucket and its watcher start with the first retained call, tracked
// by the engine's WaitGroup; the watcher exits when the engine closes.
//
// Lock order: retained.mu is a leaf lock.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/trie"
)

var _ engine.Retainer = (*Engine)(nil)

type retained struct {
	kvMirror // its mu guards the fields below

	view  map[string]engine.RetainedMessage
	bytes int64
	// pendingN and pendingB are this node's puts on their way: the bound
	// counts them, so writers of one node cannot pass it together.
	pendingN int
	pendingB int64
	// revs is the last revision of every key the view has seen, by
	// topic (removed topics too).
	revs map[string]uint64
}

// retainedTries bounds the updates of one SetRetained that find the key
// changed since the view's revision (each another writer's success).
const retainedTries = 16

type retainedVal struct {
	Topic   string            `json:"t"`
	Key     string            `json:"k,omitempty"`
	Headers map[string]string `json:"h,omitempty"`
	Data    []byte            `json:"d"`
	QoS     uint8             `json:"q,omitempty"`
	Time    time.Time         `json:"ts"`
}

func retainedKey(topic string) string { return hex.EncodeToString([]byte(topic)) }

// retainedStart opens the bucket and starts its watcher, on the first
// call that finds NATS reachable; while it is not, calls fail at once.
func (e *Engine) retainedStart() (*retained, error) {
	r := &e.ret
	if err := r.start(e, "retained", "_retained", func() {
		r.view = map[string]engine.RetainedMessage{}
		r.revs = map[string]uint64{}
	}, e.retainedEvent); err != nil {
		return nil, err
	}
	return r, nil
}

// retainedEvent applies one change of the bucket (watch loop goroutine).
func (e *Engine) retainedEvent(ent jetstream.KeyValueEntry, _ bool) {
	r := &e.ret
	r.mu.Lock()
	defer r.mu.Unlock()
	var v retainedVal
	put := ent.Operation() == jetstream.KeyValuePut && json.Unmarshal(ent.Value(), &v) == nil
	b, err := hex.DecodeString(ent.Key())
	topic := string(b)
	old, had := r.view[topic]
	if err == nil && had {
		delete(r.view, topic)
		r.bytes -= old.Size()
	}
	if err == nil {
		r.revs[topic] = ent.Revision()
	}
	if put && len(v.Data) > 0 {
		m := engine.RetainedMessage{Topic: v.Topic, Key: v.Key, Headers: v.Headers, Data: v.Data, QoS: v.QoS, Time: v.Time}
		r.view[m.Topic] = m
		r.bytes += m.Size()
	}
	r.advance(ent.Revision())
}

// SetRetained implements engine.Retainer.
func (e *Engine) SetRetained(ctx context.Context, m engine.RetainedMessage, lim engine.RetainLimits) (engine.RetainedWrite, error) {
	r, err := e.retainedStart()
	if err != nil {
		return engine.RetainedWrite{}, err
	}
	val, err := json.Marshal(retainedVal{Topic: m.Topic, Key: m.Key, Headers: m.Headers, Data: m.Data, QoS: m.QoS, Time: m.Time})
	if err != nil {
		return engine.RetainedWrite{}, err
	}
	for range retainedTries {
		if err := r.sync(ctx); err != nil {
			return engine.RetainedWrite{}, err
		}
		w, done, err := r.trySet(ctx, &m, val, lim)
		if done || err != nil {
			return w, err
		}
	}
	return engine.RetainedWrite{}, unavailable("retained put", fmt.Errorf("the key changed under %d tries", retainedTries))
}

// trySet writes m (encoded as val) if the key is still at the view's
// revision; done is false when it was not.
func (r *retained) trySet(ctx context.Context, m *engine.RetainedMessage, val []byte, lim engine.RetainLimits) (w engine.RetainedWrite, done bool, err error) {
	r.mu.Lock()
	old, had := r.view[m.Topic]
	last := r.revs[m.Topic]
	w = engine.RetainedWrite{Topic: m.Topic, Prev: old, Had: had}
	if len(m.Data) == 0 && !had {
		r.mu.Unlock()
		return w, true, nil
	}
	var addN int
	var addB int64
	if len(m.Data) > 0 {
		n, b := len(r.view)+r.pendingN, r.bytes+r.pendingB
		if !lim.Admits(n, b, had, old.Size(), m) {
			r.mu.Unlock()
			return engine.RetainedWrite{}, true, fmt.Errorf("jsengine: %d retained messages of %d bytes held: %w", n, b, engine.ErrRetainedFull)
		}
		addB = m.Size()
		if !had {
			addN = 1
		}
	}
	r.pendingN, r.pendingB = r.pendingN+addN, r.pendingB+addB
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		r.pendingN, r.pendingB = r.pendingN-addN, r.pendingB-addB
		r.mu.Unlock()
	}()
	rev, err := r.kv.Update(ctx, retainedKey(m.Topic), val, last)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return engine.RetainedWrite{}, false, nil // written since the view's revision
	}
	if err != nil {
		return engine.RetainedWrite{}, true, unavailable("retained put", err)
	}
	w.Rev = rev
	if err := r.waitApplied(ctx, rev); err != nil {
		return w, true, err // made, but not seen by the view in time: the caller may undo it
	}
	return w, true, nil
}

// UndoRetained implements engine.Retainer.
func (e *Engine) UndoRetained(ctx context.Context, w engine.RetainedWrite) (bool, error) {
	if w.Rev == 0 {
		return false, nil
	}
	r, err := e.retainedStart()
	if err != nil {
		return false, err
	}
	v := retainedVal{Topic: w.Topic}
	if w.Had {
		p := &w.Prev
		v = retainedVal{Topic: w.Topic, Key: p.Key, Headers: p.Headers, Data: p.Data, QoS: p.QoS, Time: p.Time}
	}
	val, err := json.Marshal(v)
	if err != nil {
		return false, err
	}
	rev, err := r.kv.Update(ctx, retainedKey(w.Topic), val, w.Rev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return false, nil // written since
	}
	if err != nil {
		return false, unavailable("retained undo", err)
	}
	return true, r.waitApplied(ctx, rev)
}

// Retained implements engine.Retainer.
func (e *Engine) Retained(ctx context.Context, pattern string, fn func(engine.RetainedMessage) bool) error {
	r, err := e.retainedStart()
	if err != nil {
		return err
	}
	if err := r.sync(ctx); err != nil {
		return err
	}
	var out []engine.RetainedMessage
	r.mu.Lock()
	for t, m := range r.view {
		if trie.Matches(pattern, t) {
			out = append(out, m)
		}
	}
	r.mu.Unlock()
	for _, m := range out {
		// The view's messages are never changed in place (an event
		// replaces them), so handing them out shares nothing writable
		// but the caller's own copy of the maps and slices.
		m.Data = append([]byte(nil), m.Data...)
		if m.Headers != nil {
			h := make(map[string]string, len(m.Headers))
			for k, v := range m.Headers {
				h[k] = v
			}
			m.Headers = h
		}
		if !fn(m) {
			break
		}
	}
	return nil
}

// RetainedStats implements engine.Retainer.
func (e *Engine) RetainedStats(ctx context.Context) (int, int64, error) {
	r, err := e.retainedStart()
	if err != nil {
		return 0, 0, err
	}
	if err := r.sync(ctx); err != nil {
		return 0, 0, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.view), r.bytes, nil
}
