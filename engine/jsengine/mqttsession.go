package jsengine

// MQTT persistent sessions on JetStream (engine.MQTTSessionStore): the
// bucket <prefix>_mqtt_sessions holds one key per client id,
// hex(client id), whose value is the session record (JSON of
// engine.MQTTSession). Every node keeps a small view of the bucket, fed by
// a watcher as the retained store's is (retained.go): per key its owner,
// its expiry and its revision, never the subscriptions. The view counts
// the sessions for the bound, finds the expired ones, and gives each write
// the revision it expects (KeyValue.Update and Create), so that two nodes
// writing one client id's record cannot both win: ownership
// (engine.MQTTSessionStore) holds across nodes. A call first reads the
// bucket stream's last sequence and waits until the view has applied it,
// so it sees every write that returned before it began, on any node.
// LoadMQTTSession reads the record itself from the bucket, at least at the
// revision the view holds. The view tells the handler WatchMQTTSessions
// installed of each change it applies (client-id takeover across nodes),
// and counts the holds apart from the sessions. The view also keeps a record's node and expiry
// interval: a sweep (ExpireMQTTSessions) that finds a held record's node
// missing from the membership (membership.go) marks it, and a later sweep
// removes it once the node has been missing for the expiry interval. A
// node that writes a record of its own after a sweep found it missing is
// alive (the sweeper's view of the membership lags): its records are
// spared for MemberTTL (goneNode).
//
// The bucket and its watcher start with the first session call, tracked by
// the engine's WaitGroup; the watcher exits when the engine closes.
//
// Lock order: mqttSessions.mu is a leaf lock; startMu is taken before it.

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

var _ engine.MQTTSessionStore = (*Engine)(nil)

type mqttSessions struct {
	kvMirror // its mu guards the fields below

	view     map[string]mqttSessionMeta
	holds    int // the view's holds (engine.MQTTSession.IsHold)
	pendingN int // this node's creates of sessions on their way
	// watch is the handler WatchMQTTSessions installed, nil without one;
	// called by the watch loop after mu is let go.
	watch *func(clientID, owner, node string)
	// orphans are the keys held by a node found gone, since when
	// (ExpireMQTTSessions).
	orphans map[string]orphanMark
	// gone are the nodes a sweep found missing from the membership: when,
	// at which view revision (applied), and until when a node that wrote
	// a record since is taken as alive (ExpireMQTTSessions).
	gone map[string]goneNode
}

// goneNode is a sweep's note of a node missing from the membership.
type goneNode struct {
	rev   uint64    // the view's revision when a sweep found it missing
	spare time.Time // its records are not swept before this: it wrote one since
	held  time.Time // the last sweep that found it holding a record
}

// orphanMark is when a sweep first found a key's holding node gone, at
// the key's revision then.
type orphanMark struct {
	at  time.Time
	rev uint64
}

// mqttSessionMeta is the view's entry of a key.
type mqttSessionMeta struct {
	clientID  string
	owner     string
	node      string        // the holding connection's node
	expiry    time.Duration // the session's expiry interval
	expiresAt time.Time
	rev       uint64
}

// mqttSessionTries bounds the retries of a write that lost a race to
// another node's write of the same key.
const mqttSessionTries = 4

// mqttSessionsBucket is the store's bucket, after the engine's prefix.
const mqttSessionsBucket = "_mqtt_sessions"

func mqttSessionKey(clientID string) string { return hex.EncodeToString([]byte(clientID)) }

// mqttSessionsStart opens the bucket and starts its watcher, on the first
// call that finds NATS reachable.
func (e *Engine) mqttSessionsStart() (*mqttSessions, error) {
	r := &e.mqs
	if err := r.start(e, "mqtt session", mqttSessionsBucket, func() { r.view = map[string]mqttSessionMeta{} }, e.mqttSessionEvent); err != nil {
		return nil, err
	}
	return r, nil
}

// mqttSessionEvent applies one change of the bucket (watch loop
// goroutine), then tells the handler WatchMQTTSessions installed, with mu
// let go.
func (e *Engine) mqttSessionEvent(ent jetstream.KeyValueEntry, _ bool) {
	r := &e.mqs
	r.mu.Lock()
	var v engine.MQTTSession
	key := ent.Key()
	old, had := r.view[key]
	if had && old.expiry <= 0 {
		r.holds--
	}
	m := mqttSessionMeta{}
	if ent.Operation() == jetstream.KeyValuePut && json.Unmarshal(ent.Value(), &v) == nil {
		m = mqttSessionMeta{clientID: v.ClientID, owner: v.Owner, node: v.Node, expiry: v.Expiry, expiresAt: v.ExpiresAt, rev: ent.Revision()}
		r.view[key] = m
		if v.IsHold() {
			r.holds++
		}
	} else {
		delete(r.view, key)
		if id, err := hex.DecodeString(key); err == nil {
			m.clientID = string(id)
		}
	}
	r.advance(ent.Revision())
	h := r.watch
	r.mu.Unlock()
	if h != nil && m.clientID != "" {
		(*h)(m.clientID, m.owner, m.node)
	}
}

var _ engine.MQTTSessionWatcher = (*Engine)(nil)

// WatchMQTTSessions implements engine.MQTTSessionWatcher. The handler is
// called by the bucket's watch loop, which starts with the first session
// call.
func (e *Engine) WatchMQTTSessions(h func(clientID, owner, node string)) (stop func()) {
	r := &e.mqs
	hp := &h
	r.mu.Lock()
	r.watch = hp
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		if r.watch == hp {
			r.watch = nil
		}
		r.mu.Unlock()
	}
}

// MQTTSessionHolder implements engine.MQTTSessionWatcher from the view.
func (e *Engine) MQTTSessionHolder(clientID string) (owner, node string, ok bool) {
	r := &e.mqs
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.view[mqttSessionKey(clientID)]
	return m.owner, m.node, ok
}

// ready starts the store and syncs its view.
func (e *Engine) mqttSessionsReady(ctx context.Context) (*mqttSessions, error) {
	r, err := e.mqttSessionsStart()
	if err != nil {
		return nil, err
	}
	return r, r.sync(ctx)
}

// SaveMQTTSession implements engine.MQTTSessionStore.
func (e *Engine) SaveMQTTSession(ctx context.Context, s engine.MQTTSession, lim engine.MQTTSessionLimits) error {
	if lim.MaxBytes > 0 && s.Size() > lim.MaxBytes {
		return fmt.Errorf("jsengine: session of %d bytes, over %d: %w", s.Size(), lim.MaxBytes, engine.ErrMQTTSessionTooLarge)
	}
	r, err := e.mqttSessionsReady(ctx)
	if err != nil {
		return err
	}
	claim, restore := s.Claim, s.Restore
	s.Claim, s.Restore = false, false
	hold := s.IsHold()
	val, err := json.Marshal(s)
	if err != nil {
		return err
	}
	key := mqttSessionKey(s.ClientID)
	for try := 0; ; try++ {
		rev, err := r.put(ctx, key, val, s.Owner, claim, restore, hold, lim)
		if err == nil {
			return r.waitApplied(ctx, rev)
		}
		if !errors.Is(err, jetstream.ErrKeyExists) || try == mqttSessionTries-1 {
			return err
		}
		// Another node wrote the key since the view's revision: wait
		// for the view to hold it and decide again.
		if err := r.sync(ctx); err != nil {
			return err
		}
	}
}

// put writes one session record at the revision the view expects.
//
// A hold (hold set) counts against nothing; a session that replaces a
// hold counts as a new one. A restore (engine.MQTTSession.Restore) writes
// only over no record or owner's: a create that loses a race is retried
// by the caller and then finds the other writer's record.
func (r *mqttSessions) put(ctx context.Context, key string, val []byte, owner string, claim, restore, hold bool, lim engine.MQTTSessionLimits) (uint64, error) {
	r.mu.Lock()
	old, had := r.view[key]
	n := len(r.view) - r.holds + r.pendingN
	grows := !hold && (!had || old.expiry <= 0)
	switch {
	case restore && had && old.owner != owner,
		!claim && !restore && (!had || old.owner != owner):
		r.mu.Unlock()
		return 0, engine.ErrMQTTSessionMoved
	case grows && lim.MaxCount > 0 && n >= lim.MaxCount:
		r.mu.Unlock()
		return 0, fmt.Errorf("jsengine: %d mqtt sessions held: %w", n, engine.ErrMQTTSessionsFull)
	}
	if grows {
		r.pendingN++
		defer func() {
			r.mu.Lock()
			r.pendingN--
			r.mu.Unlock()
		}()
	}
	r.mu.Unlock()
	if !had {
		rev, err := r.kv.Create(ctx, key, val)
		return rev, mqttWriteErr("mqtt session create", err)
	}
	rev, err := r.kv.Update(ctx, key, val, old.rev)
	return rev, mqttWriteErr("mqtt session update", err)
}

// mqttWriteErr keeps jetstream.ErrKeyExists (a lost race, retried) and
// wraps the other failures as the engine's unavailability.
func mqttWriteErr(op string, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrKeyExists),
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
		return fmt.Errorf("%s: %w", op, jetstream.ErrKeyExists)
	}
	return unavailable(op, err)
}

// LoadMQTTSession implements engine.MQTTSessionStore. The view, synced,
// says whether the key exists and at which revision; the record is read
// from the bucket until the read holds that revision (a read served by a
// replica may lag behind the view), bounded by mqttSessionTries.
func (e *Engine) LoadMQTTSession(ctx context.Context, clientID string, now time.Time) (engine.MQTTSession, bool, error) {
	r, err := e.mqttSessionsReady(ctx)
	if err != nil {
		return engine.MQTTSession{}, false, err
	}
	key := mqttSessionKey(clientID)
	r.mu.Lock()
	m, had := r.view[key]
	r.mu.Unlock()
	if !had {
		return engine.MQTTSession{}, false, nil
	}
	var ent jetstream.KeyValueEntry
	for try := 0; ; try++ {
		ent, err = r.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			err = nil // removed since, or a lagging replica's answer
		}
		if err != nil {
			return engine.MQTTSession{}, false, unavailable("mqtt session get", err)
		}
		if ent != nil && ent.Revision() >= m.rev {
			break
		}
		if try == mqttSessionTries-1 {
			return engine.MQTTSession{}, false, fmt.Errorf("jsengine: mqtt session of %q: the bucket's answer lags revision %d: %w", clientID, m.rev, engine.ErrUnavailable)
		}
		select {
		case <-time.After(time.Duration(try+1) * 10 * time.Millisecond):
		case <-ctx.Done():
			return engine.MQTTSession{}, false, unavailable("mqtt session get", ctx.Err())
		}
	}
	var s engine.MQTTSession
	if err := json.Unmarshal(ent.Value(), &s); err != nil {
		return engine.MQTTSession{}, false, fmt.Errorf("jsengine: mqtt session of %q: %w", clientID, err)
	}
	if !s.ExpiresAt.IsZero() && s.ExpiresAt.Before(now) {
		// Expired: removed unless it was written again meanwhile.
		if err := r.kv.Delete(ctx, key, jetstream.LastRevision(ent.Revision())); err != nil {
			if err = mqttWriteErr("mqtt session delete", err); !errors.Is(err, jetstream.ErrKeyExists) {
				return engine.MQTTSession{}, false, err
			}
		}
		return engine.MQTTSession{}, false, nil
	}
	return s, true, nil
}

// DeleteMQTTSession implements engine.MQTTSessionStore.
func (e *Engine) DeleteMQTTSession(ctx context.Context, clientID, owner string) error {
	r, err := e.mqttSessionsReady(ctx)
	if err != nil {
		return err
	}
	key := mqttSessionKey(clientID)
	for try := 0; try < mqttSessionTries; try++ {
		r.mu.Lock()
		m, had := r.view[key]
		r.mu.Unlock()
		if !had || owner != "" && m.owner != owner {
			return nil
		}
		err := r.kv.Delete(ctx, key, jetstream.LastRevision(m.rev))
		if err == nil {
			return r.sync(ctx)
		}
		if err = mqttWriteErr("mqtt session delete", err); !errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
		if err := r.sync(ctx); err != nil {
			return err
		}
	}
	return fmt.Errorf("jsengine: mqtt session of %q changed %d times while being deleted: %w", clientID, mqttSessionTries, engine.ErrUnavailable)
}

// liveNodes returns the nodes the membership holds live.
func (e *Engine) liveNodes() map[string]bool {
	e.gmu.Lock()
	defer e.gmu.Unlock()
	live := make(map[string]bool, len(e.nodes))
	for n := range e.nodes {
		live[n] = true
	}
	return live
}

// ExpireMQTTSessions implements engine.MQTTSessionStore.
func (e *Engine) ExpireMQTTSessions(ctx context.Context, now time.Time) (int, int, error) {
	// Every gateway sweeps; one that has not opened the store yet opens it
	// only if some node made the bucket, so that a deployment without
	// persistent MQTT sessions holds no bucket and watcher for them. The
	// lookup is a read, bounded by one round trip (roundTrip); one that
	// fails otherwise fails the sweep, which would else open the bucket
	// without knowing whether some node made it.
	if !e.mqs.isStarted() {
		lctx, cancel := roundTrip(ctx)
		_, err := e.js.KeyValue(lctx, e.prefix+mqttSessionsBucket)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrBucketNotFound):
			return 0, 0, nil
		case err != nil:
			return 0, 0, unavailable("mqtt session bucket", err)
		}
	}
	r, err := e.mqttSessionsReady(ctx)
	if err != nil {
		return 0, 0, err
	}
	type expired struct {
		key string
		rev uint64
	}
	live := e.liveNodes()
	var gone []expired
	r.mu.Lock()
	if r.orphans == nil {
		r.orphans = map[string]orphanMark{}
		r.gone = map[string]goneNode{}
	}
	for n := range r.gone {
		if live[n] {
			delete(r.gone, n)
		}
	}
	// A node that wrote a record of its own after this node found it
	// missing is alive (a live connection of it put back a record a sweep
	// removed, engine.MQTTSession.Restore): this node's view of the
	// membership lags, and the node's heartbeat puts it back within
	// MemberTTL. Its records are spared that long.
	for _, m := range r.view {
		g, ok := r.gone[m.node]
		if !ok || !m.expiresAt.IsZero() {
			continue
		}
		if m.rev > g.rev {
			g = goneNode{rev: r.applied, spare: now.Add(e.ttl)}
		}
		g.held = now
		r.gone[m.node] = g
	}
	for n, g := range r.gone {
		if now.Sub(g.held) > e.ttl {
			delete(r.gone, n) // has held nothing for MemberTTL
		}
	}
	for k, o := range r.orphans {
		if m, ok := r.view[k]; !ok || m.rev != o.rev || !m.expiresAt.IsZero() || live[m.node] {
			delete(r.orphans, k) // saved again, removed, or its node is back
		}
	}
	for k, m := range r.view {
		switch {
		case !m.expiresAt.IsZero():
			if m.expiresAt.Before(now) {
				gone = append(gone, expired{k, m.rev})
			}
		case m.node != "" && !live[m.node]:
			// Held by a node that is gone: its connection's end will
			// save no expiry time, so the session expires from when
			// this node found it gone.
			g, ok := r.gone[m.node]
			if !ok {
				r.gone[m.node] = goneNode{rev: r.applied, held: now}
			}
			if now.Before(g.spare) {
				delete(r.orphans, k)
				continue
			}
			o, ok := r.orphans[k]
			if !ok {
				r.orphans[k] = orphanMark{at: now, rev: m.rev}
			} else if now.Sub(o.at) >= m.expiry {
				gone = append(gone, expired{k, m.rev})
			}
		}
	}
	r.mu.Unlock()
	n := 0
	for _, g := range gone {
		// At the revision seen: a session resumed meanwhile stays.
		err := r.kv.Delete(ctx, g.key, jetstream.LastRevision(g.rev))
		if err == nil {
			n++
			continue
		}
		if err = mqttWriteErr("mqtt session expire", err); !errors.Is(err, jetstream.ErrKeyExists) {
			return n, 0, err
		}
	}
	if err := r.sync(ctx); err != nil {
		return n, 0, err
	}
	r.mu.Lock()
	left := len(r.view) - r.holds
	r.mu.Unlock()
	return n, left, nil
}
