package jsengine

// Replicas: Options.Replicas copies of every stream and bucket.
//
// New creates the streams and buckets with Options.Replicas replicas. One
// that already exists with another count (made by an earlier version, by a
// node started with another --nats-replicas, or by hand) is updated to the
// count: a clustered NATS server scales a stream up or down in place, adding
// or removing copies while the stream stays available. When the server
// cannot do it (a single server asked for more than 1 replica, or fewer
// servers in the cluster than replicas), New fails with an error that says
// so: wrapping engine.ErrInvalidConfig when no retry can help, and
// engine.ErrUnavailable when the servers may yet come (insufficient
// resources). Nodes that share a Prefix should use the same Replicas: the
// last one to start wins. A node started with 1 chains its pipelined
// records by message ID (pipeline.go), which a stream another node scaled
// up since would not survive (it stops at the first refused link): so the
// pipeline follows the stream's actual count, told by the scaling node and
// read at every heartbeat (replicas_live.go).
// A replicated record stream is also allowed atomic batches
// (pipeline_batch.go), which its nodes' pipelined appends use.
//
// With more than one replica, the streams and buckets allow no direct gets
// (AllowDirect false; an existing one is updated): a direct get may be
// answered by any replica, and a follower answers while it is behind (a
// restarted server already answers when it holds 90% of the log), so a read
// could miss records the leader acknowledged, and a bucket read could
// return an older committed offset. Reads then go to the stream's leader,
// which has every acknowledged record (TestNATSNodeLoss shows the
// difference: with direct gets, replays after the restart missed records).
//
// A replicated bucket also refuses a create (wrong last sequence) while
// another node's write of the same key is proposed and not yet applied, and
// a read made then does not find the key yet: "exists" and "not found" at
// once. createOrGet tries again, a bounded number of times after a short
// pause, until the create or the read succeeds, so two nodes auto-creating
// a topic (or a group) at once both see it (TestCreateWhileInProcess).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

// maxReplicas is the most replicas JetStream keeps of a stream.
const maxReplicas = 5

// JetStream API error codes (nats-server's jetstream_errors_generated.go).
const (
	errCodeInsufficientResources jetstream.ErrorCode = 10023
	errCodeReplicasNotUpdatable  jetstream.ErrorCode = 10061
	errCodeReplicasNotSupported  jetstream.ErrorCode = 10074
)

// conform updates s to e.replicas replicas, and to no direct gets when it
// has more than one, when it differs; it reports whether it changed s.
func (e *Engine) conform(ctx context.Context, s jetstream.Stream) (bool, error) {
	cfg := s.CachedInfo().Config
	have, direct := max(cfg.Replicas, 1), cfg.AllowDirect
	if have == e.replicas && (!direct || e.replicas == 1) {
		return false, nil
	}
	cfg.Replicas = e.replicas
	cfg.AllowDirect = direct && e.replicas == 1
	if have != e.replicas {
		e.announceScale(ctx, "scaling") // other nodes append one at a time meanwhile
		defer e.announceScale(ctx, "scaled")
	}
	if _, err := e.js.UpdateStream(ctx, cfg); err != nil {
		return false, createError(fmt.Sprintf("stream %s: from %d replicas to %d", cfg.Name, have, e.replicas), err)
	}
	if err := waitReplicas(ctx, s, e.replicas); err != nil {
		return false, unavailable(fmt.Sprintf("stream %s: %d replicas", cfg.Name, e.replicas), err)
	}
	e.log.Info("jsengine: stream updated", "stream", cfg.Name, "replicas_from", have, "replicas", e.replicas,
		"direct_from", direct, "direct", cfg.AllowDirect)
	return true, nil
}

// waitReplicas waits until s has a leader and n-1 current replicas: after
// a scale, the stream answers only once its new group has settled.
func waitReplicas(ctx context.Context, s jetstream.Stream, n int) error {
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 250*time.Millisecond) {
		info, err := s.Info(ctx)
		if err == nil && Settled(info.Cluster, n) {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}

// Settled reports whether a stream of n replicas whose cluster info is ci
// has settled: a leader and n-1 replicas, each current and online (always,
// for one replica). waitReplicas waits for it after a scale; the torture
// run's embedded cluster (loadtest) waits for it on every stream.
func Settled(ci *jetstream.ClusterInfo, n int) bool {
	if n == 1 {
		return true // no peers to wait for
	}
	if ci == nil || ci.Leader == "" || len(ci.Replicas) != n-1 {
		return false
	}
	for _, r := range ci.Replicas {
		if !r.Current || r.Offline {
			return false
		}
	}
	return true
}

// createTries and createPauseMax bound createOrGet: the pauses, doubling
// from a millisecond, add up to about a second, longer than a write takes
// to be applied on a loaded cluster.
const (
	createTries    = 12
	createPauseMax = 200 * time.Millisecond
)

// createOrGet creates key in kv with val, returning its revision and a nil
// entry, or returns the entry stored under key when another writer created
// it first. It fails with the bucket's error, or with an error wrapping
// engine.ErrUnavailable and jetstream.ErrKeyNotFound when the key was
// refused as existing and never seen in createTries tries (deleted each
// time in between, or a write in process that long).
func createOrGet(ctx context.Context, kv jetstream.KeyValue, key string, val []byte) (uint64, jetstream.KeyValueEntry, error) {
	pause := time.Millisecond
	for try := 1; ; try++ {
		rev, err := kv.Create(ctx, key, val)
		if !isWrongLast(err) {
			return rev, nil, err
		}
		ent, err := kv.Get(ctx, key)
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			return 0, ent, err
		}
		if try == createTries {
			return 0, nil, fmt.Errorf("key %s refused as existing %d times and never found: %w: %w", key, try, engine.ErrUnavailable, err)
		}
		// Another node's write of key is being replicated: it shows soon,
		// or (had it failed) the next create succeeds.
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, nil, ctx.Err()
		case <-t.C:
		}
		pause = min(2*pause, createPauseMax)
	}
}

// createError wraps an error of creating or updating a stream: a
// configuration the server refuses for good wraps engine.ErrInvalidConfig,
// a shortage of servers engine.ErrUnavailable (see unavailable for the rest).
func createError(op string, err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case errCodeReplicasNotSupported, errCodeReplicasNotUpdatable:
			return fmt.Errorf("jsengine: %s: %w: %w", op, engine.ErrInvalidConfig, err)
		case errCodeInsufficientResources:
			return fmt.Errorf("jsengine: %s: %w: %w (are there as many NATS servers as replicas?)", op, engine.ErrUnavailable, err)
		}
	}
	return unavailable(op, err)
}
