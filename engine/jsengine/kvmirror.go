package jsengine

// A KV bucket mirrored in memory: the retained messages (retained.go) and
// the MQTT sessions (mqttsession.go) each keep a view of their bucket that
// a watcher brings up to date, and read it once it holds every write made
// before the read.

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

// kvMirror is what a mirrored bucket's owner embeds. mu guards applied and
// progress and whatever view the owner keeps beside them; it is a leaf
// lock, taken after startMu.
type kvMirror struct {
	// startMu is held while the bucket is opened; started says it is. A
	// failed start (NATS unreachable) is tried again by the next call.
	startMu sync.Mutex
	started bool
	kv      jetstream.KeyValue
	what    string // the bucket in errors: "retained", "mqtt session"

	mu       sync.Mutex
	applied  uint64        // the last revision applied to the view
	progress chan struct{} // closed and replaced when applied grows
}

// start opens bucket (the engine's prefix added; what names it in errors)
// and starts its watcher,
// which calls event for every change, on the first call that finds NATS
// reachable; install runs with m.mu held once the bucket is open, before
// the first event. It waits for the watcher's first pass at most 10 s.
func (m *kvMirror) start(e *Engine, what, bucket string, install func(), event func(jetstream.KeyValueEntry, bool)) error {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	if m.started {
		return nil
	}
	m.what = what
	if e.closed.Load() {
		return engine.ErrClosed
	}
	if err := e.reachable(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := e.openKV(ctx, jetstream.KeyValueConfig{Bucket: e.prefix + bucket})
	if err != nil {
		return unavailable(m.what+" bucket", err)
	}
	kw, err := e.watch(kv, 0)
	if err != nil {
		return unavailable(m.what+" watch", err)
	}
	m.mu.Lock()
	m.kv = kv
	m.progress = make(chan struct{})
	install()
	m.mu.Unlock()
	ready := make(chan struct{}, 1)
	e.wg.Add(1)
	go e.watchLoop(kv, kw, event, ready) // exits when the engine closes
	select {
	case <-ready:
	case <-ctx.Done():
	case <-e.closeCh:
	}
	m.started = true
	return nil
}

// isStarted reports whether start has opened the bucket.
func (m *kvMirror) isStarted() bool {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	return m.started
}

// advance records that the view holds revision rev; m.mu is held.
func (m *kvMirror) advance(rev uint64) {
	m.applied = max(m.applied, rev)
	close(m.progress)
	m.progress = make(chan struct{})
}

// sync waits until the view holds every write made to the bucket before
// it was called.
func (m *kvMirror) sync(ctx context.Context) error {
	st, err := m.kv.Status(ctx)
	if err != nil {
		return unavailable(m.what+" bucket status", err)
	}
	var last uint64
	if bs, ok := st.(*jetstream.KeyValueBucketStatus); ok {
		last = bs.StreamInfo().State.LastSeq
	}
	return m.waitApplied(ctx, last)
}

// waitApplied waits until the view holds revision rev.
func (m *kvMirror) waitApplied(ctx context.Context, rev uint64) error {
	for {
		m.mu.Lock()
		done, ch := m.applied >= rev, m.progress
		m.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return unavailable(m.what+" view", ctx.Err())
		}
	}
}
