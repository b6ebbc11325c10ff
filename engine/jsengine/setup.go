package jsengine

// Set-up: New creates or opens the streams and buckets under the Prefix
// and loads the topics, groups and live members.
//
// Epoch. The node that creates the record stream stores a random epoch in
// the stream's metadata; every node reads it from there. A recreated
// stream (and so a restarted offset space) has a new epoch. On a server
// without stream metadata (before NATS 2.10) the epoch is derived from the
// stream's creation time and name.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// setup opens the streams and buckets, registers this node, and starts
// the bucket watchers, the tail, the settle subscription, the committer,
// the heartbeat and the letter writer. On an error New shuts down what it
// started.
func (e *Engine) setup(ctx context.Context) error {
	js, err := jetstream.New(e.nc, jetstream.WithPublishAsyncMaxPending(2*maxPipelined), jetstream.WithPublishAsyncTimeout(pipelineAckTimeout))
	if err != nil {
		return unavailable("jetstream", err)
	}
	e.js = js
	if e.acks, err = newAckInbox(e.nc); err != nil {
		return unavailable("ack inbox", err)
	}
	e.wg.Add(1)
	go func() { // exits when shutdown closes the inbox
		defer e.wg.Done()
		e.acks.watch()
	}()
	if err := e.openStores(ctx); err != nil {
		return err
	}
	if _, err := e.liveKV.Put(ctx, "n."+e.node, []byte("1")); err != nil {
		return unavailable("register node", err)
	}
	e.nodes[e.node] = true

	if err := e.startWatchers(ctx); err != nil {
		return err
	}
	if err := e.startTail(ctx); err != nil {
		return err
	}
	if err := e.subscribeSettle(); err != nil {
		return err
	}
	if err := e.subscribeReplicas(); err != nil {
		return err
	}
	e.wg.Add(3)
	go e.committer()    // exits when closeCh is closed
	go e.heartbeat()    // exits when closeCh is closed
	go e.letterWriter() // exits when closeCh is closed
	return nil
}

// openStores creates or opens the record and dead-letter streams and the
// four buckets, and reads the record stream's epoch.
func (e *Engine) openStores(ctx context.Context) error {
	var err error
	epoch := randomID()
	e.rec, err = e.openStream(ctx, jetstream.StreamConfig{
		Name:        e.prefix + "_rec",
		Subjects:    []string{e.prefix + ".rec.>"},
		Storage:     jetstream.FileStorage,
		Duplicates:  e.policy.DedupeWindow,
		AllowDirect: true,
		Metadata:    map[string]string{"switchyard_epoch": epoch},
	})
	if err != nil {
		return err
	}
	e.enableBatches(ctx)
	e.epoch = e.rec.CachedInfo().Config.Metadata["switchyard_epoch"]
	if e.epoch == "" { // a stream made by someone else: tie the epoch to its creation
		ci := e.rec.CachedInfo()
		e.epoch = strconv.FormatInt(ci.Created.UnixNano(), 36) + "-" + ci.Config.Name
	}
	e.dl, err = e.openStream(ctx, jetstream.StreamConfig{
		Name:        e.prefix + "_dl",
		Subjects:    []string{e.prefix + ".dl.>"},
		Storage:     jetstream.FileStorage,
		AllowDirect: true,
	})
	if err != nil {
		return err
	}
	if e.topicKV, err = e.openKV(ctx, jetstream.KeyValueConfig{Bucket: e.prefix + "_topics"}); err != nil {
		return err
	}
	if e.groupKV, err = e.openKV(ctx, jetstream.KeyValueConfig{Bucket: e.prefix + "_groups"}); err != nil {
		return err
	}
	liveCfg := jetstream.KeyValueConfig{Bucket: e.prefix + "_live", TTL: e.ttl, LimitMarkerTTL: e.ttl}
	e.liveMarkers = true
	if e.liveKV, err = e.openKV(ctx, liveCfg); errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
		// Before NATS 2.11 expired keys vanish silently: the heartbeat
		// lists the bucket to notice them (see reconcileLive).
		liveCfg.LimitMarkerTTL, e.liveMarkers = 0, false
		e.liveKV, err = e.openKV(ctx, liveCfg)
	}
	if err != nil {
		return err
	}
	if e.dedupKV, err = e.openKV(ctx, jetstream.KeyValueConfig{Bucket: e.prefix + "_dedupe", TTL: e.policy.DedupeWindow}); err != nil {
		return err
	}
	return nil
}

// startWatchers starts one watcher loop per bucket (topics, groups, live).
// Each delivers the current values, then a nil marker, then updates; it
// waits for all three markers so New returns with full state.
func (e *Engine) startWatchers(ctx context.Context) error {
	ready := make(chan struct{}, 3)
	for _, w := range []struct {
		kv jetstream.KeyValue
		fn func(jetstream.KeyValueEntry, bool)
	}{{e.topicKV, e.topicEvent}, {e.groupKV, e.groupEvent}, {e.liveKV, e.liveEvent}} {
		kw, err := e.watch(w.kv, 0)
		if err != nil {
			return unavailable("watch", err)
		}
		e.wg.Add(1)
		go e.watchLoop(w.kv, kw, w.fn, ready) // exits when the engine closes
	}
	for range 3 {
		select {
		case <-ready:
		case <-ctx.Done():
			return unavailable("initial watch", ctx.Err())
		}
	}
	return nil
}

// startTail starts the live tail after the last record stored now: the
// ordered consumer and the tail goroutine it hands messages to.
func (e *Engine) startTail(ctx context.Context) error {
	info, err := e.rec.Info(ctx)
	if err != nil {
		return unavailable("stream info", err)
	}
	e.tailSeq = info.State.LastSeq
	e.wg.Add(1)
	go e.tailLoop() // exits when shutdown closes tailStop
	cons, cc, err := e.consumeTail(ctx, info.State.LastSeq+1)
	if err != nil {
		return err
	}
	e.tailCCMu.Lock()
	e.tailCons, e.tailCC = cons, cc
	e.tailCCMu.Unlock()
	return nil
}

// openStream creates or binds the stream of cfg; its handle's round trips
// are bounded (bounded.go).
func (e *Engine) openStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	s, err := e.openStreamUnbounded(ctx, cfg)
	return boundStream(s), err
}

func (e *Engine) openStreamUnbounded(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	cfg.Replicas = e.replicas
	cfg.AllowDirect = cfg.AllowDirect && e.replicas == 1 // see replicas.go
	var f finding
	for {
		s, err := e.js.CreateStream(ctx, cfg)
		if err == nil {
			return s, nil
		}
		s, err2 := e.js.Stream(ctx, cfg.Name)
		if err2 == nil {
			if _, err := e.conform(ctx, s); err != nil {
				return nil, err
			}
			return e.js.Stream(ctx, cfg.Name)
		}
		if !errors.Is(err2, jetstream.ErrStreamNotFound) || !f.again(ctx) {
			return nil, createError("stream "+cfg.Name, fmt.Errorf("%w (and not found: %w)", err, err2))
		}
	}
}

// openKV creates or binds the bucket of cfg; its handle's round trips
// are bounded (bounded.go).
func (e *Engine) openKV(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := e.openKVUnbounded(ctx, cfg)
	return boundKV(kv, &e.life), err
}

func (e *Engine) openKVUnbounded(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	cfg.Replicas = e.replicas
	var f finding
	var kv jetstream.KeyValue
	for {
		var err error
		kv, err = e.js.CreateKeyValue(ctx, cfg)
		if err == nil {
			break
		}
		if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
			return nil, err
		}
		var err2 error
		if kv, err2 = e.js.KeyValue(ctx, cfg.Bucket); err2 == nil {
			break
		}
		if !errors.Is(err2, jetstream.ErrBucketNotFound) || !f.again(ctx) {
			return nil, createError("bucket "+cfg.Bucket, fmt.Errorf("%w (and not found: %w)", err, err2))
		}
	}
	var s jetstream.Stream
	for {
		var err error
		if s, err = e.js.Stream(ctx, "KV_"+cfg.Bucket); err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) || !f.again(ctx) {
			return nil, unavailable("bucket "+cfg.Bucket, err)
		}
	}
	changed, err := e.conform(ctx, s)
	if err != nil || !changed {
		return kv, err
	}
	// Bind again: the handle reads with direct gets when the stream
	// allowed them as it bound.
	if kv, err = e.js.KeyValue(ctx, cfg.Bucket); err != nil {
		return nil, unavailable("bucket "+cfg.Bucket, err)
	}
	return kv, nil
}

// Bounds of the wait for a stream or bucket that its create did not
// return and a lookup did not find (see finding).
const (
	findPauseMin = 5 * time.Millisecond
	findPauseMax = 250 * time.Millisecond
	findWaitMax  = 5 * time.Second
)

// finding paces openStream's and openKV's tries while a stream or bucket
// is neither created nor found. On a cluster both can happen while
// another node's create of it is under way (or the server had its own
// create refused, as by a leader election): a lookup answered by a
// replica that has not made the stream yet says "not found" (nats-server
// waits 10 ms for it, no more), and a create of it in process may be
// refused. So the create and the lookup are tried again, after pauses
// doubling from findPauseMin to findPauseMax, for at most findWaitMax
// and within ctx. The zero value is ready; it is used by one open.
type finding struct {
	pause  time.Duration
	giveUp time.Time
}

// again pauses before the next try and reports whether to make it.
func (f *finding) again(ctx context.Context) bool {
	if f.pause == 0 {
		f.pause, f.giveUp = findPauseMin, time.Now().Add(findWaitMax)
	} else {
		f.pause = min(2*f.pause, findPauseMax)
	}
	if time.Now().Add(f.pause).After(f.giveUp) {
		return false
	}
	t := time.NewTimer(f.pause)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
