package jsengine

// Bucket watchers: one loop per bucket (topics, groups, live). After a
// reconnect the watchers are recreated at once, resuming after the last
// revision each applied (the client library alone would notice a watcher
// lost with a restarted server only after two missed idle heartbeats, 10
// to 20 s).

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

// kvWatch is a bucket watcher that lives until stop.
type kvWatch struct {
	kw     jetstream.KeyWatcher
	cancel context.CancelFunc
}

// watch starts a watcher of every key of kv: from revision from on, or,
// when from is 0, the current values, a nil marker, then updates.
func (e *Engine) watch(kv jetstream.KeyValue, from uint64) (*kvWatch, error) {
	var opts []jetstream.WatchOpt
	if from > 0 {
		opts = append(opts, jetstream.ResumeFromRevision(from))
	}
	// The watcher's subscription ends when ctx does, so ctx must outlive
	// it; the timer bounds only its creation, one round trip (which a
	// link gone silent never answers). A watcher made after the timer
	// fired is stopped here; its consumer, made late by the server, is
	// ephemeral and removed by the server once nothing subscribes to it.
	ctx, cancel := context.WithCancel(context.Background())
	t := time.AfterFunc(roundTripMax, cancel)
	kw, err := kv.WatchAll(ctx, opts...)
	if !t.Stop() {
		if err == nil {
			stopWatch(&e.life, &kvWatch{kw, cancel})
			err = errWatchStalled
		} else {
			err = fmt.Errorf("%w: %w", errWatchStalled, err)
		}
	}
	if err != nil {
		cancel()
		return nil, err
	}
	return &kvWatch{kw, cancel}, nil
}

// errWatchStalled is wrapped by the error of a watcher whose set-up was
// not answered within roundTripMax (watch).
var errWatchStalled = fmt.Errorf("watch not set up within %v: %w", roundTripMax, engine.ErrUnavailable)

// stop ends the watcher and drains what it had queued, so its callback,
// which blocks while the queue is full, can return (bounded: 5 s).
func (w *kvWatch) stop() {
	_ = w.kw.Stop()
	w.cancel()
	timeout := time.NewTimer(5 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case _, ok := <-w.kw.Updates():
			if !ok {
				return
			}
		case <-timeout.C:
			return
		}
	}
}

// watchLoop feeds one bucket's changes to fn, with initial true until the
// watcher's end-of-initial-values marker, which it reports on ready. When
// the connection comes back after a loss it replaces the watcher with one
// resuming after the last revision it applied: the client library would
// notice a watcher lost with a restarted server only after two missed idle
// heartbeats (10 to 20 s). It exits when the engine closes.
func (e *Engine) watchLoop(kv jetstream.KeyValue, w *kvWatch, fn func(jetstream.KeyValueEntry, bool), ready chan<- struct{}) {
	defer e.wg.Done()
	defer func() {
		if w != nil { // nil when the engine closed while resuming the watch
			w.stop()
		}
	}()
	initial := true
	var last uint64 // revision of the last change applied
	for {
		e.connMu.Lock()
		back := e.back
		e.connMu.Unlock()
		select {
		case <-e.closeCh:
			return
		case <-back:
			if initial {
				continue // New is still waiting for the marker and will fail
			}
			w.stop()
			if w = e.rewatch(kv, last+1); w == nil {
				return
			}
		case ent, ok := <-w.kw.Updates():
			if !ok {
				if e.closed.Load() {
					return
				}
				// Ended under us (its subscription was closed): resume.
				w.stop()
				if w = e.rewatch(kv, last+1); w == nil {
					return
				}
				continue
			}
			if ent == nil {
				if initial {
					initial = false
					ready <- struct{}{}
				}
				continue
			}
			last = max(last, ent.Revision())
			fn(ent, initial)
		}
	}
}

// rewatch starts a watcher of kv from revision from, retrying with backoff
// until it succeeds; nil when the engine closes first.
func (e *Engine) rewatch(kv jetstream.KeyValue, from uint64) *kvWatch {
	for delay := 100 * time.Millisecond; ; delay = min(2*delay, 5*time.Second) {
		w, err := e.watch(kv, from)
		if err == nil {
			return w
		}
		if e.closed.Load() {
			return nil
		}
		e.log.Warn("jsengine: resume watch", "bucket", kv.Bucket(), "err", err)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-e.closeCh:
			t.Stop()
			return nil
		}
	}
}
