package jsengine

// The record stream's replica count as it is now, not as this node was
// started: which way pipelined appends go depends on it (pipeline.go).
//
// A node started with Options.Replicas 1 chains its pipelined records by
// message ID, which a replicated stream does not survive: the first
// refused link stops it (see replicas.go). Another node started later with
// more replicas scales the stream up in place. So the pipeline follows the
// stream's actual count (recReplicas), not Options.Replicas:
//
//   - A node about to change the record stream's replicas announces it on
//     <prefix>.replicas before the change and again after it. Every node
//     appends one at a time (with the expected-sequence check, safe on any
//     count) from the first notice until it has read the stream's new
//     configuration (at the second notice, or at a heartbeat that reads a
//     changed count; at most scaleHold after the first notice).
//   - Each heartbeat reads the record stream's configuration (one round
//     trip), so a change made without a notice (by hand, or by an earlier
//     version) is followed within a third of the member TTL; until then
//     such a change is not safe, as before.
//
// With more than one replica the node uses the atomic batches when the
// stream allows them (pipeline_batch.go), else appends one at a time.

import (
	"context"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
)

// scaleHold bounds how long a scaling notice keeps this node's pipelined
// appends one at a time without the second notice.
const scaleHold = time.Minute

func (e *Engine) replicasSubject() string { return e.prefix + ".replicas" }

// replicated reports whether pipelined appends are to go into a
// replicated record stream (as far as this node knows now).
func (e *Engine) replicated() bool { return e.recReplicas.Load() > 1 }

// scalingNow reports whether a node announced a change of the record
// stream's replicas that this node has not yet read.
func (e *Engine) scalingNow() bool {
	until := e.scaleUntil.Load()
	return until != 0 && time.Now().UnixNano() < until
}

// subscribeReplicas follows other nodes' notices of a change of the record
// stream's replicas. The callback runs on a goroutine of the NATS client,
// which shutdown ends by unsubscribing.
func (e *Engine) subscribeReplicas() error {
	sub, err := e.nc.Subscribe(e.replicasSubject(), func(msg *nats.Msg) {
		switch string(msg.Data) {
		case "scaling":
			e.scaleUntil.Store(time.Now().Add(scaleHold).UnixNano())
		case "scaled":
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			e.refreshReplicas(ctx, true)
		}
	})
	if err != nil {
		return unavailable("replicas subscription", err)
	}
	e.replicasSub = sub
	return nil
}

// announceScale tells the other nodes that this node changes the record
// stream's replicas (what is "scaling" or "scaled"), and waits until the
// server has the notice.
func (e *Engine) announceScale(ctx context.Context, what string) {
	if err := e.nc.Publish(e.replicasSubject(), []byte(what)); err == nil {
		_ = e.nc.FlushWithContext(ctx)
	}
}

// refreshReplicas reads the record stream's configuration and has the
// pipeline follow its replicas and atomic batches. It ends a scaling hold
// when told the change is made (scaled), or when it reads a count other
// than the one it had: a heartbeat between the two notices reads the
// configuration as it still is, which must not end the hold.
func (e *Engine) refreshReplicas(ctx context.Context, scaled bool) {
	if e.reachable() != nil {
		return // the heartbeat warns already
	}
	info, err := e.rec.Info(ctx)
	if err != nil {
		e.log.Warn("jsengine: record stream configuration", "err", err)
		return
	}
	if !scaled {
		e.keepTail(ctx, info.State.LastSeq) // on the heartbeat (tail_keeper.go)
	}
	n := max(info.Config.Replicas, 1)
	changed := e.recReplicas.Load() != int32(n)
	e.setReplicas(n, info.Config.AllowAtomicPublish)
	if scaled || changed {
		e.scaleUntil.Store(0)
	}
}

// setReplicas records the record stream's replicas and whether it takes
// atomic batches.
func (e *Engine) setReplicas(n int, atomicBatches bool) {
	if old := e.recReplicas.Swap(int32(n)); old != int32(n) && old != 0 {
		e.log.Info("jsengine: record stream replicas changed", "from", strconv.Itoa(int(old)), "to", n)
	}
	e.batching.Store(n > 1 && atomicBatches)
}
