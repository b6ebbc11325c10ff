package router

// Readiness that means delivery. Ready (GET /readyz, and the
// switchyard_engine_ready metric through its last result) checks that the
// engine answers, then appends a probe record to the topic $sys.ready
// (created with one record retained) and waits for the log's live tail to
// announce it back to this Router: a gateway whose engine cannot append,
// or whose tail stopped announcing (so fan-out has silently stopped), is
// not ready. The probe is bounded by the caller's context (/readyz gives
// it 2 s) and its result is kept for readyProbeEvery, so probes and
// scrapes at any rate append at most one record per interval; callers that
// arrive while a probe runs wait for its result.
//
// Probe records are never fanned out: subscribers of $sys.# do not see
// them. On JetStream every node announces every node's probes; each node
// waits only for its own (by a random token in the record).
//
// Concurrency: readiness.mu is a leaf lock, never held across an engine
// call; the wait for the announcement is a channel closed by fanOut.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// readyTopic is the topic of readiness probe records.
const readyTopic = "$sys.ready"

// readyProbeEvery is how long a probe's result answers Ready.
const readyProbeEvery = 2 * time.Second

// readiness is the Router's readiness probe state.
type readiness struct {
	created atomic.Bool               // readyTopic was made (or found)
	wait    atomic.Pointer[probeWait] // the probe awaiting its announcement

	mu      sync.Mutex    // guards the fields below; a leaf lock
	checked time.Time     // when the last probe ended
	err     error         // its result
	running chan struct{} // closed when the probe under way ends; nil: none
}

// probeWait is a probe record awaiting its announcement.
type probeWait struct {
	token []byte
	once  sync.Once
	done  chan struct{}
}

// readyAppended takes a probe record's announcement; records of other
// nodes' probes are ignored.
func (rt *Router) readyAppended(rec *engine.Record) {
	if w := rt.ready.wait.Load(); w != nil && string(rec.Data) == string(w.token) {
		w.once.Do(func() { close(w.done) })
	}
}

// probeReady returns the result of a probe no older than readyProbeEvery,
// running one when there is none.
func (rt *Router) probeReady(ctx context.Context) error {
	r := &rt.ready
	r.mu.Lock()
	if !r.checked.IsZero() && time.Since(r.checked) < readyProbeEvery {
		err := r.err
		r.mu.Unlock()
		return err
	}
	if ch := r.running; ch != nil {
		r.mu.Unlock()
		select {
		case <-ch:
			r.mu.Lock()
			defer r.mu.Unlock()
			return r.err
		case <-ctx.Done():
			return perr(codeUnavailable, "the readiness probe did not finish in time")
		}
	}
	ch := make(chan struct{})
	r.running = ch
	r.mu.Unlock()
	err := rt.appendProbe(ctx)
	r.mu.Lock()
	r.checked, r.err, r.running = time.Now(), err, nil
	r.mu.Unlock()
	close(ch)
	return err
}

// lastProbe returns the result of the last probe, nil when none ran
// within the last minute.
func (rt *Router) lastProbe() error {
	r := &rt.ready
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.checked.IsZero() || time.Since(r.checked) > time.Minute {
		return nil
	}
	return r.err
}

// appendProbe appends a probe record and waits for its announcement.
func (rt *Router) appendProbe(ctx context.Context) error {
	r := &rt.ready
	if !r.created.Load() {
		_, err := rt.eng.CreateTopic(ctx, engine.TopicConfig{Name: readyTopic, Partitions: 1, MaxMessages: 1, OnFull: engine.DropOldest})
		if err != nil && !errors.Is(err, engine.ErrTopicExists) {
			return probeErr(ctx, err)
		}
		r.created.Store(true)
	}
	w := &probeWait{token: fmt.Appendf(nil, `{"probe":%q}`, newID()), done: make(chan struct{})}
	r.wait.Store(w)
	defer r.wait.CompareAndSwap(w, nil)
	if _, err := rt.eng.Append(ctx, engine.Message{Topic: readyTopic, Data: w.token, Priority: 0}); err != nil {
		if errors.Is(err, engine.ErrUnknownTopic) {
			r.created.Store(false) // deleted: made again by the next probe
		}
		return probeErr(ctx, err)
	}
	select {
	case <-w.done:
		return nil
	case <-rt.stopBG:
		// Shutdown has begun and stops the tail: the probe's record may
		// never be announced, and the answer is known already.
		return perr(codeShuttingDown, "server is shutting down")
	case <-ctx.Done():
		return perr(codeUnavailable, "the log took a probe record but its live tail did not announce it within the readiness timeout: fan-out has stopped")
	}
}

// probeErr is the readiness error of a failed probe append.
func probeErr(ctx context.Context, err error) error {
	if ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return perr(codeUnavailable, "the log engine did not take a probe record within the readiness timeout")
	}
	if code, _, _ := classify(err); code == codeInternal {
		return perr(codeUnavailable, "the log engine cannot append a probe record")
	}
	return err
}
