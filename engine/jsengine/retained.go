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
// The bucket and its watcher start with the first retained call, tracked
// by the engine's WaitGroup; the watcher exits when the engine closes.
//
// Lock order: retained.mu is a leaf lock.

import (
	"context"
	"encoding/hex"
	"encoding/json"
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
}

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
	if err := r.start(e, "retained", "_retained", func() { r.view = map[string]engine.RetainedMessage{} }, e.retainedEvent); err != nil {
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
	if old, had := r.viewByKey(ent.Key()); had {
		delete(r.view, old.Topic)
		r.bytes -= old.Size()
	}
	if put && len(v.Data) > 0 {
		m := engine.RetainedMessage{Topic: v.Topic, Key: v.Key, Headers: v.Headers, Data: v.Data, QoS: v.QoS, Time: v.Time}
		r.view[m.Topic] = m
		r.bytes += m.Size()
	}
	r.advance(ent.Revision())
}

// viewByKey finds the view's message of a bucket key.
func (r *retained) viewByKey(key string) (engine.RetainedMessage, bool) {
	b, err := hex.DecodeString(key)
	if err != nil {
		return engine.RetainedMessage{}, false
	}
	m, ok := r.view[string(b)]
	return m, ok
}

// SetRetained implements engine.Retainer.
func (e *Engine) SetRetained(ctx context.Context, m engine.RetainedMessage, lim engine.RetainLimits) error {
	r, err := e.retainedStart()
	if err != nil {
		return err
	}
	if err := r.sync(ctx); err != nil {
		return err
	}
	key := retainedKey(m.Topic)
	var rev uint64
	if len(m.Data) == 0 {
		r.mu.Lock()
		_, had := r.view[m.Topic]
		r.mu.Unlock()
		if !had {
			return nil
		}
		if err := r.kv.Delete(ctx, key); err != nil {
			return unavailable("retained delete", err)
		}
		return r.sync(ctx)
	}
	r.mu.Lock()
	old, had := r.view[m.Topic]
	n, b := len(r.view)+r.pendingN, r.bytes+r.pendingB
	ok := lim.Admits(n, b, had, old.Size(), &m)
	addN, addB := 1, int64(m.Size())
	if had {
		addN = 0
	}
	if ok {
		r.pendingN, r.pendingB = r.pendingN+addN, r.pendingB+addB
	}
	r.mu.Unlock()
	if !ok {
		return fmt.Errorf("jsengine: %d retained messages of %d bytes held: %w", n, b, engine.ErrRetainedFull)
	}
	defer func() {
		r.mu.Lock()
		r.pendingN, r.pendingB = r.pendingN-addN, r.pendingB-addB
		r.mu.Unlock()
	}()
	val, err := json.Marshal(retainedVal{Topic: m.Topic, Key: m.Key, Headers: m.Headers, Data: m.Data, QoS: m.QoS, Time: m.Time})
	if err != nil {
		return err
	}
	if rev, err = r.kv.Put(ctx, key, val); err != nil {
		return unavailable("retained put", err)
	}
	return r.waitApplied(ctx, rev)
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
