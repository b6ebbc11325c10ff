package memengine

// Retained messages in memory (engine.Retainer): one node, so the store is
// a map by topic under retained.mu, a leaf lock; Retained copies the
// matches out before it calls back.

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
}

// SetRetained implements engine.Retainer.
func (e *Engine) SetRetained(_ context.Context, m engine.RetainedMessage, lim engine.RetainLimits) error {
	if e.closed.Load() {
		return engine.ErrClosed
	}
	r := &e.ret
	r.mu.Lock()
	defer r.mu.Unlock()
	old, had := r.msgs[m.Topic]
	if len(m.Data) == 0 {
		if had {
			delete(r.msgs, m.Topic)
			r.bytes -= old.Size()
		}
		return nil
	}
	if !lim.Admits(len(r.msgs), r.bytes, had, old.Size(), &m) {
		return fmt.Errorf("memengine: %d retained messages of %d bytes held: %w", len(r.msgs), r.bytes, engine.ErrRetainedFull)
	}
	if r.msgs == nil {
		r.msgs = map[string]engine.RetainedMessage{}
	}
	m.Data = slices.Clone(m.Data)
	m.Headers = maps.Clone(m.Headers)
	r.msgs[m.Topic] = m
	r.bytes += m.Size() - old.Size()
	return nil
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
