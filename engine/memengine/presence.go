package memengine

import (
	"context"
	"slices"
	"sort"
	"sync"

	"github.com/switchyard/switchyard/engine"
)

// Presence in memory: one node, so the registry is a map and every change
// is announced synchronously to the watchers, under presence.mu (a leaf
// lock: observers must not call back into the engine).

var _ engine.Presence = (*Engine)(nil)

type presence struct {
	mu       sync.Mutex // guards the fields below and serializes announcements
	topics   map[string]map[string]engine.PresenceMember
	watchers map[int]engine.PresenceObserver
	nextW    int
}

func (p *presence) init() {
	if p.topics == nil {
		p.topics = map[string]map[string]engine.PresenceMember{}
		p.watchers = map[int]engine.PresenceObserver{}
	}
}

// PresenceJoin implements engine.Presence.
func (e *Engine) PresenceJoin(_ context.Context, m engine.PresenceMember) error {
	if e.closed.Load() {
		return engine.ErrClosed
	}
	p := &e.pres
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	members := p.topics[m.Topic]
	if members == nil {
		members = map[string]engine.PresenceMember{}
		p.topics[m.Topic] = members
	}
	if _, ok := members[m.Session]; ok {
		return nil
	}
	m.Info = slices.Clone(m.Info)
	members[m.Session] = m
	for _, w := range p.watchers {
		w.PresenceChanged(m, true)
	}
	return nil
}

// PresenceLeave implements engine.Presence.
func (e *Engine) PresenceLeave(_ context.Context, topic, session string) error {
	p := &e.pres
	p.mu.Lock()
	defer p.mu.Unlock()
	m, ok := p.topics[topic][session]
	if !ok {
		return nil
	}
	delete(p.topics[topic], session)
	if len(p.topics[topic]) == 0 {
		delete(p.topics, topic)
	}
	for _, w := range p.watchers {
		w.PresenceChanged(m, false)
	}
	return nil
}

// PresenceList implements engine.Presence: members ordered by session id.
func (e *Engine) PresenceList(_ context.Context, topic string, limit int) ([]engine.PresenceMember, int, error) {
	p := &e.pres
	p.mu.Lock()
	defer p.mu.Unlock()
	members := p.topics[topic]
	if limit <= 0 {
		return nil, len(members), nil
	}
	out := make([]engine.PresenceMember, 0, min(limit, len(members)))
	for _, m := range members {
		if !m.Hidden {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Session < out[j].Session })
	if len(out) > limit {
		out = out[:limit]
	}
	return out, len(members), nil
}

// WatchPresence implements engine.Presence.
func (e *Engine) WatchPresence(obs engine.PresenceObserver) (stop func()) {
	p := &e.pres
	p.mu.Lock()
	defer p.mu.Unlock()
	p.init()
	id := p.nextW
	p.nextW++
	p.watchers[id] = obs
	return func() {
		p.mu.Lock()
		delete(p.watchers, id)
		p.mu.Unlock()
	}
}
