package memengine

// Retained messages in memory (engine.Retainer): one node, so the store is
// a map by topic under retained.mu, a leaf lock; Retained copies the
// matches out before it calls back. Every write that changes a topic
// takes the next revision of the store, kept by topic (a removed topic's
// too, so that an undo of the removal can tell it from a later store and
// removal: a few bytes by topic ever removed), which UndoRetained
// compares.

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/trie"
)

var _ engine.Retainer = (*Engine)(nil)

type retained struct {
	mu    sync.Mutex // leaf; guards the fields below
	msgs  map[string]engine.RetainedMessage
	bytes int64
	rev   uint64            // the last write's revision
	revs  map[string]uint64 // by topic, its last write's revision
}

// set makes m its topic's retained message, or removes the topic's one
// when m.Data is empty, and returns the write's revision; r.mu is held.
func (r *retained) set(m engine.RetainedMessage) uint64 {
	if r.msgs == nil {
		r.msgs, r.revs = map[string]engine.RetainedMessage{}, map[string]uint64{}
	}
	old := r.msgs[m.Topic]
	r.bytes -= old.Size()
	if len(m.Data) == 0 {
		delete(r.msgs, m.Topic)
	} else {
		m.Data = slices.Clone(m.Data)
		m.Headers = maps.Clone(m.Headers)
		r.msgs[m.Topic] = m
		r.bytes += m.Size()
	}
	r.rev++
	r.revs[m.Topic] = r.rev
	return r.rev
}

// SetRetained implements engine.Retainer.
func (e *Engine) SetRetained(_ context.Context, m engine.RetainedMessage, lim engine.RetainLimits) (engine.RetainedWrite, error) {
	if e.closed.Load() {
		return engine.RetainedWrite{}, engine.ErrClosed
	}
	r := &e.ret
	r.mu.Lock()
	defer r.mu.Unlock()
	old, had := r.msgs[m.Topic]
	w := engine.RetainedWrite{Topic: m.Topic, Prev: old, Had: had}
	if len(m.Data) == 0 && !had {
		return w, nil
	}
	if len(m.Data) > 0 && !lim.Admits(len(r.msgs), r.bytes, had, old.Size(), &m) {
		return engine.RetainedWrite{}, fmt.Errorf("memengine: %d retained messages of %d bytes held: %w", len(r.msgs), r.bytes, engine.ErrRetainedFull)
	}
	w.Rev = r.set(m)
	return w, nil
}

// UndoRetained implements engine.Retainer.
func (e *Engine) UndoRetained(_ context.Context, w engine.RetainedWrite) (bool, error) {
	if e.closed.Load() {
		return false, engine.ErrClosed
	}
	r := &e.ret
	r.mu.Lock()
	defer r.mu.Unlock()
	if w.Rev == 0 || r.revs[w.Topic] != w.Rev {
		return false, nil
	}
	prev := engine.RetainedMessage{Topic: w.Topic}
	if w.Had {
		prev = w.Prev
	}
	r.set(prev)
	return true, nil
}

// Retained implements engine.Retainer.
func (e *Engine) Retained(_ context.Context, pattern string, fn func(engine.RetainedMessage) bool) error {
	if e.closed.Load() {
		return engine.ErrClosed
	}
	r := &e.ret
	var out []engine.RetainedMessage
	r.mu.Lock()
	for t, m := range r.msgs {
		if trie.Matches(pattern, t) {
			out = append(out, m)
		}
	}
	r.mu.Unlock()
	for _, m := range out {
		m.Data = slices.Clone(m.Data)
		m.Headers = maps.Clone(m.Headers)
		if !fn(m) {
			break
		}
	}
	return nil
}

// RetainedStats implements engine.Retainer.
func (e *Engine) RetainedStats(context.Context) (int, int64, error) {
	r := &e.ret
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs), r.bytes, nil
}
