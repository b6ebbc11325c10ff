package memengine

// MQTT persistent sessions in memory (engine.MQTTSessionStore): one node,
// so the store is a map by client id under mqttSessions.mu, a leaf lock.
// Records are copied in and out; nothing the caller holds is kept.

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/switchyard/switchyard/engine"
)

var _ engine.MQTTSessionStore = (*Engine)(nil)

type mqttSessions struct {
	mu    sync.Mutex // leaf; guards m and holds
	m     map[string]engine.MQTTSession
	holds int // the records of m that are holds (engine.MQTTSession.IsHold)
}

// SaveMQTTSession implements engine.MQTTSessionStore.
func (e *Engine) SaveMQTTSession(_ context.Context, s engine.MQTTSession, lim engine.MQTTSessionLimits) error {
	if e.closed.Load() {
		return engine.ErrClosed
	}
	if lim.MaxBytes > 0 && s.Size() > lim.MaxBytes {
		return fmt.Errorf("memengine: session of %d bytes, over %d: %w", s.Size(), lim.MaxBytes, engine.ErrMQTTSessionTooLarge)
	}
	st := &e.mqs
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.m == nil {
		st.m = map[string]engine.MQTTSession{}
	}
	old, had := st.m[s.ClientID]
	switch {
	case s.Restore && had && old.Owner != s.Owner:
		return engine.ErrMQTTSessionMoved
	case !s.Claim && !s.Restore && (!had || old.Owner != s.Owner):
		return engine.ErrMQTTSessionMoved
	case !s.IsHold() && (!had || old.IsHold()) && lim.MaxCount > 0 && st.count() >= lim.MaxCount:
		return fmt.Errorf("memengine: %d mqtt sessions held: %w", st.count(), engine.ErrMQTTSessionsFull)
	}
	s.Claim, s.Restore = false, false
	st.put(s)
	return nil
}

// LoadMQTTSession implements engine.MQTTSessionStore.
func (e *Engine) LoadMQTTSession(_ context.Context, clientID string, now time.Time) (engine.MQTTSession, bool, error) {
	if e.closed.Load() {
		return engine.MQTTSession{}, false, engine.ErrClosed
	}
	st := &e.mqs
	st.mu.Lock()
	defer st.mu.Unlock()
	s, ok := st.m[clientID]
	if ok && !s.ExpiresAt.IsZero() && s.ExpiresAt.Before(now) {
		st.remove(clientID)
		return engine.MQTTSession{}, false, nil
	}
	if !ok {
		return engine.MQTTSession{}, false, nil
	}
	return copySession(s), true, nil
}

// DeleteMQTTSession implements engine.MQTTSessionStore.
func (e *Engine) DeleteMQTTSession(_ context.Context, clientID, owner string) error {
	if e.closed.Load() {
		return engine.ErrClosed
	}
	st := &e.mqs
	st.mu.Lock()
	defer st.mu.Unlock()
	if s, ok := st.m[clientID]; ok && (owner == "" || s.Owner == owner) {
		st.remove(clientID)
	}
	return nil
}

// ExpireMQTTSessions implements engine.MQTTSessionStore.
func (e *Engine) ExpireMQTTSessions(_ context.Context, now time.Time) (int, int, error) {
	if e.closed.Load() {
		return 0, 0, engine.ErrClosed
	}
	st := &e.mqs
	st.mu.Lock()
	defer st.mu.Unlock()
	n := 0
	for id, s := range st.m {
		if !s.ExpiresAt.IsZero() && s.ExpiresAt.Before(now) {
			st.remove(id)
			n++
		}
	}
	return n, st.count(), nil
}

// count is how many sessions the store holds, holds left out; st.mu is
// held.
func (st *mqttSessions) count() int { return len(st.m) - st.holds }

// put stores s under its client id, keeping the count of holds; st.mu
// is held.
func (st *mqttSessions) put(s engine.MQTTSession) {
	st.remove(s.ClientID)
	if s.IsHold() {
		st.holds++
	}
	st.m[s.ClientID] = copySession(s)
}

// remove removes a client id's record, keeping the count of holds; st.mu
// is held.
func (st *mqttSessions) remove(id string) {
	if old, ok := st.m[id]; ok {
		if old.IsHold() {
			st.holds--
		}
		delete(st.m, id)
	}
}

// copySession copies a record's slices, so that the store and the caller
// share nothing writable.
func copySession(s engine.MQTTSession) engine.MQTTSession {
	s.Subs = slices.Clone(s.Subs)
	s.Released = slices.Clone(s.Released)
	for i := range s.Subs {
		s.Subs[i].Next = slices.Clone(s.Subs[i].Next)
		s.Subs[i].InFlight = slices.Clone(s.Subs[i].InFlight)
	}
	return s
}
