package jsengine

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

// Presence on JetStream: the bucket <prefix>_presence holds one key per
// (topic, session), hex(topic) + "." + hex(session), whose value is the
// member. The node that joined a member renews its key every MemberTTL/3
// (heartbeat); every node watches the bucket and keeps the full view, so
// it announces a join when a key first appears, a leave when it is deleted,
// and a leave when a key has not been renewed for MemberTTL (its node
// died), deleting that key (other nodes then see the delete of a member
// they have already dropped, and stay silent). Each node's watchers are
// told of each change once; the router of each node fans out to its own
// sessions, so no session hears a change twice. The bucket's MaxAge (a few
// TTLs) is a backstop for keys nobody swept.
//
// The bucket and the goroutines (watch loop, heartbeat and sweep) start
// with the first presence call, tracked by the engine's WaitGroup; they
// exit when the engine closes.
//
// Lock order: presence.mu is a leaf lock except that watchers are called
// under notifyMu (taken before mu, never inside it), which keeps every
// watcher's sequence of changes in the order they were applied.

var _ engine.Presence = (*Engine)(nil)

type presence struct {
	once     sync.Once
	startErr error
	kv       jetstream.KeyValue

	notifyMu sync.Mutex // serializes announcements, taken before mu

	mu       sync.Mutex               // guards the fields below
	view     map[string]presenceEntry // key -> member, every node's
	local    map[string]localMember   // key -> member joined here
	watchers map[int]engine.PresenceObserver
	nextW    int
	applied  uint64        // last revision applied to view
	progress chan struct{} // closed and replaced when applied grows
}

// localMember is a member joined on this node and the revision of its
// key's last write, so a heartbeat cannot bring back a key deleted since.
type localMember struct {
	m   engine.PresenceMember
	rev uint64
}

type presenceEntry struct {
	m    engine.PresenceMember
	seen time.Time // when this node last saw the key written
}

type presenceVal struct {
	Topic   string          `json:"t"`
	Session string          `json:"s"`
	User    string          `json:"u,omitempty"`
	Info    json.RawMessage `json:"i,omitempty"`
	Hidden  bool            `json:"h,omitempty"`
	Node    string          `json:"n"`
}

func presenceKey(topic, session string) string {
	return hex.EncodeToString([]byte(topic)) + "." + hex.EncodeToString([]byte(session))
}

// presenceStart opens the bucket and starts the goroutines once.
func (e *Engine) presenceStart() (*presence, error) {
	p := &e.pres
	p.once.Do(func() {
		if e.closed.Load() {
			p.startErr = engine.ErrClosed
			return
		}
		p.view = map[string]presenceEntry{}
		p.local = map[string]localMember{}
		p.watchers = map[int]engine.PresenceObserver{}
		p.progress = make(chan struct{})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		kv, err := e.openKV(ctx, jetstream.KeyValueConfig{Bucket: e.prefix + "_presence", TTL: 4 * e.ttl})
		if err != nil {
			p.startErr = unavailable("presence bucket", err)
			return
		}
		p.kv = kv
		kw, err := e.watch(kv, 0)
		if err != nil {
			p.startErr = unavailable("presence watch", err)
			return
		}
		ready := make(chan struct{}, 1)
		e.wg.Add(2)
		go e.watchLoop(kv, kw, e.presenceEvent, ready) // exits when the engine closes
		go e.presenceBeat()                            // exits when the engine closes
		select {
		case <-ready:
		case <-ctx.Done():
		case <-e.closeCh:
		}
	})
	if p.startErr != nil {
		return nil, p.startErr
	}
	return p, nil
}

// presenceEvent applies one change of the bucket (watch loop goroutine).
func (e *Engine) presenceEvent(ent jetstream.KeyValueEntry, _ bool) {
	p := &e.pres
	p.notifyMu.Lock()
	defer p.notifyMu.Unlock()
	key := ent.Key()
	var announce *engine.PresenceMember
	joined := false
	p.mu.Lock()
	old, had := p.view[key]
	switch ent.Operation() {
	case jetstream.KeyValuePut:
		var v presenceVal
		if json.Unmarshal(ent.Value(), &v) == nil {
			m := engine.PresenceMember{Topic: v.Topic, Session: v.Session, User: v.User, Info: v.Info, Hidden: v.Hidden}
			p.view[key] = presenceEntry{m: m, seen: time.Now()}
			if !had {
				announce, joined = &m, true
			}
		}
	default: // delete, purge
		if had {
			delete(p.view, key)
			announce = &old.m
		}
	}
	p.applied = max(p.applied, ent.Revision())
	close(p.progress)
	p.progress = make(chan struct{})
	watchers := p.watcherList()
	p.mu.Unlock()
	if announce != nil {
		for _, w := range watchers {
			w.PresenceChanged(*announce, joined)
		}
	}
}

func (p *presence) watcherList() []engine.PresenceObserver {
	ids := make([]int, 0, len(p.watchers))
	for id := range p.watchers {
		ids = append(ids, id)
	}
	sort.Ints(ids)
	out := make([]engine.PresenceObserver, 0, len(ids))
	for _, id := range ids {
		out = append(out, p.watchers[id])
	}
	return out
}

// presenceBeat renews this node's members and sweeps members nobody renews.
func (e *Engine) presenceBeat() {
	p := &e.pres
	e.everyBeat(func(ctx context.Context) {
		p.mu.Lock()
		mine := make(map[string]localMember, len(p.local))
		for k, lm := range p.local {
			mine[k] = lm
		}
		p.mu.Unlock()
		for k, lm := range mine {
			rev, err := p.kv.Update(ctx, k, e.presenceValue(lm.m), lm.rev)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				continue // left meanwhile (or written by a newer join)
			}
			p.mu.Lock()
			if cur, ok := p.local[k]; ok && cur.rev == lm.rev {
				cur.rev = rev
				p.local[k] = cur
			}
			p.mu.Unlock()
		}
		e.presenceSweep(ctx, time.Now())
	})
}

// presenceSweep drops members not renewed for a TTL, announcing each
// leave, and deletes their keys.
func (e *Engine) presenceSweep(ctx context.Context, now time.Time) {
	p := &e.pres
	p.notifyMu.Lock()
	p.mu.Lock()
	var gone []string
	var left []engine.PresenceMember
	for k, ent := range p.view {
		if _, ours := p.local[k]; !ours && now.Sub(ent.seen) > e.ttl {
			gone = append(gone, k)
			left = append(left, ent.m)
			delete(p.view, k)
		}
	}
	watchers := p.watcherList()
	p.mu.Unlock()
	for _, m := range left {
		for _, w := range watchers {
			w.PresenceChanged(m, false)
		}
	}
	p.notifyMu.Unlock()
	for _, k := range gone {
		_ = p.kv.Delete(ctx, k)
	}
}

func (e *Engine) presenceValue(m engine.PresenceMember) []byte {
	b, _ := json.Marshal(presenceVal{Topic: m.Topic, Session: m.Session, User: m.User, Info: m.Info, Hidden: m.Hidden, Node: e.node})
	return b
}

// waitApplied waits until the view holds revision rev.
func (p *presence) waitApplied(ctx context.Context, rev uint64) {
	for {
		p.mu.Lock()
		done, ch := p.applied >= rev, p.progress
		p.mu.Unlock()
		if done {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// PresenceJoin implements engine.Presence. It returns once this node's
// view holds the member, so a list on this node that follows includes it.
func (e *Engine) PresenceJoin(ctx context.Context, m engine.PresenceMember) error {
	if e.closed.Load() {
		return engine.ErrClosed
	}
	p, err := e.presenceStart()
	if err != nil {
		return err
	}
	key := presenceKey(m.Topic, m.Session)
	rev, err := p.kv.Put(ctx, key, e.presenceValue(m))
	if err != nil {
		return unavailable("presence join", err)
	}
	p.mu.Lock()
	p.local[key] = localMember{m: m, rev: rev}
	p.mu.Unlock()
	p.waitApplied(ctx, rev)
	return nil
}

// PresenceLeave implements engine.Presence. It returns once this node's
// view no longer holds the member.
func (e *Engine) PresenceLeave(ctx context.Context, topic, session string) error {
	p, err := e.presenceStart()
	if err != nil {
		return err
	}
	key := presenceKey(topic, session)
	p.mu.Lock()
	_, ours := p.local[key]
	delete(p.local, key)
	_, known := p.view[key]
	p.mu.Unlock()
	if !ours && !known {
		return nil
	}
	if err := p.kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return unavailable("presence leave", err)
	}
	p.waitGone(ctx, key)
	return nil
}

// waitGone waits until the view no longer holds key, so that a list on
// this node after a leave returns no longer includes the member, as after
// a join it includes it.
func (p *presence) waitGone(ctx context.Context, key string) {
	for {
		p.mu.Lock()
		_, held := p.view[key]
		ch := p.progress
		p.mu.Unlock()
		if !held {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
	}
}

// PresenceList implements engine.Presence from this node's view, ordered by
// session id.
func (e *Engine) PresenceList(_ context.Context, topic string, limit int) ([]engine.PresenceMember, int, error) {
	p, err := e.presenceStart()
	if err != nil {
		return nil, 0, err
	}
	prefix := hex.EncodeToString([]byte(topic)) + "."
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	var out []engine.PresenceMember
	for k, ent := range p.view {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		n++
		if limit > 0 && !ent.m.Hidden {
			out = append(out, ent.m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Session < out[j].Session })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, n, nil
}

// WatchPresence implements engine.Presence. When the bucket cannot be
// opened the watcher is registered anyway and hears nothing until it can.
func (e *Engine) WatchPresence(obs engine.PresenceObserver) (stop func()) {
	p, err := e.presenceStart()
	if err != nil {
		e.log.Warn("jsengine: presence unavailable", "err", err)
		return func() {}
	}
	p.mu.Lock()
	id := p.nextW
	p.nextW++
	p.watchers[id] = obs
	p.mu.Unlock()
	return func() {
		p.notifyMu.Lock() // waits for an announcement in progress
		p.mu.Lock()
		delete(p.watchers, id)
		p.mu.Unlock()
		p.notifyMu.Unlock()
	}
}
