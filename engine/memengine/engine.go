package memengine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/groupstate"
	"github.com/switchyard/switchyard/engine/internal/lifecycle"
	"github.com/switchyard/switchyard/trie"
)

// Options configures an Engine. The zero value is ready to use: each field's
// zero value means the default stated on it.
type Options struct {
	// Clock is the time source for append times, age retention, dedupe
	// windows, ack timeouts, backoff and block timeouts.
	// Default: engine.SystemClock{}.
	Clock engine.Clock
	// NewID makes the Epoch, generated member IDs and dead-letter IDs.
	// It must be safe for concurrent use. Default: 16 random bytes in hex.
	NewID func() string
	// Defaults apply to fields a TopicConfig leaves at zero and to topics
	// created by a first Append. Default: engine.Defaults (each zero field
	// is taken from it).
	Defaults engine.TopicConfig
	// Strict makes Append to an unknown topic fail with
	// engine.ErrUnknownTopic instead of creating it. Default: false.
	Strict bool
	// Policy holds the group delivery rules and the dedupe window.
	// Default: engine.DefaultGroupPolicy (each zero field is taken from it).
	Policy engine.GroupPolicy
}

// Engine is the in-memory engine. It is safe for concurrent use by multiple
// goroutines; see the package documentation for the callback rules and the
// lock order.
type Engine struct {
	clock    engine.Clock
	newID    func() string
	defaults engine.TopicConfig
	strict   bool
	policy   engine.GroupPolicy
	epoch    string

	closed  atomic.Bool   // set once by Close; checked lock-free by Append
	closeCh chan struct{} // closed by Close: wakes blocked appenders

	life lifecycle.Guard // engine-closed flag and running timer callbacks

	pres  presence     // see presence.go
	ret   retained     // see retained.go
	mqs   mqttSessions // see mqttsession.go
	nodes nodeServer   // see nodes.go

	gmu     sync.Mutex // guards following (not the groups' own state)
	groups  map[string]*group
	index   *trie.Trie[*group]         // groups by pattern
	flights groupstate.Machine[*gpart] // set by New, then read-only

	topicsMu sync.Mutex // serialises creating and deleting topics
	topics   sync.Map   // string -> *topic; lookups take no lock
	// deleting: names whose deletion observers are being told of, each
	// with a channel closed once they were; guarded by topicsMu. A name is
	// not created again before then (see create).
	deleting map[string]chan struct{}

	observers lifecycle.Observers // copy-on-write list read by Append

	dlMu        sync.Mutex // guards following
	deadLetters letters
}

var _ engine.Engine = (*Engine)(nil)

// New returns an empty engine with a fresh Epoch. It starts no goroutine.
func New(opts Options) *Engine {
	e := &Engine{
		clock:    opts.Clock,
		newID:    opts.NewID,
		defaults: opts.Defaults.WithDefaults(engine.Defaults),
		strict:   opts.Strict,
		policy:   opts.Policy.WithDefaults(engine.DefaultGroupPolicy),
		closeCh:  make(chan struct{}),
		groups:   make(map[string]*group),
		index:    trie.New[*group](),
	}
	if e.clock == nil {
		e.clock = engine.SystemClock{}
	}
	if e.newID == nil {
		e.newID = randomID
	}
	e.epoch = e.newID()
	e.flights = e.newMachine()
	return e
}

func randomID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// Epoch returns the ID made when the engine was created: every Engine
// starts its offsets from zero.
func (e *Engine) Epoch() string { return e.epoch }

// afterFunc runs f after d on the engine's clock, unless the engine has
// been closed by then. Close waits for callbacks that are already running.
func (e *Engine) afterFunc(d time.Duration, f func()) engine.Timer {
	return e.life.AfterFunc(e.clock, d, f)
}

// Watch registers o for the live tail until stop is called; stop may be
// called more than once. Appended is called synchronously inside Append with
// the partition locked (see the package documentation).
func (e *Engine) Watch(o engine.Observer) (stop func()) {
	return e.observers.Add(o)
}

// Close stops appends (they fail with engine.ErrClosed, including appends
// blocked on a full partition), stops every timer and drops all group
// members without redelivery; records stay readable. It waits for timer
// callbacks already running, or until ctx is done (returning ctx's error).
// Calling Close again returns nil.
func (e *Engine) Close(ctx context.Context) error {
	if !e.life.Close(func() {
		e.closed.Store(true)
		close(e.closeCh)
	}) {
		return nil
	}

	e.gmu.Lock()
	gs := slices.Collect(maps.Values(e.groups))
	e.gmu.Unlock()
	for _, g := range gs {
		g.mu.Lock()
		e.disarmIdle(g)
		for _, gp := range g.parts {
			gp.Drop()
			gp.member = nil
			e.setActive(gp, false)
		}
		clear(g.members)
		g.mu.Unlock()
	}

	done := make(chan struct{})
	go func() { // exits when the running callbacks return
		e.life.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func closedErr() error { return fmt.Errorf("memengine: %w", engine.ErrClosed) }
