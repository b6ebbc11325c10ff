package jsengine

// The tail's keeper. The live tail is an ordered consumer, which makes
// itself again after a lost connection, missed heartbeats or a gap. It
// can still stop delivering for good: when the connection drops again
// while it starts its new consumer, the error it meets is not one it
// starts over for (the fault scenario lossy-gateway-links: a node's tail
// stopped at its first records; its subscribers, whose catch-up reads
// what the tail has seen, were sent nothing for the rest of the run).
//
// The heartbeat, which reads the record stream's state every beat
// (refreshReplicas), checks the tail against it: a tail behind the
// stream's last record that has not moved over a whole beat is started
// again, after the last record it announced (restartTail), unless the
// tail goroutine has work at hand (a slow observer holds it, not the
// consumer) or no record is left after the tail's position (the stream's
// last sequence purged before the tail saw it). The old consumer is
// stopped first, so that the tail goroutine still gets the records in
// stream order, and deleted on the server; what it had handed over and
// the new consumer hands over again is dropped as already announced
// (tailMsg). A tail that is only slow moves between beats and is left
// alone.
//
// Concurrency: tailCCMu guards tailCC and tailCons and is held while the tail's
// consumer is stopped or made (a round trip bounded by the beat's
// context); shutdown takes it, after closed is set, so no consumer is made
// once the engine closes. The keeper's fields are the heartbeat
// goroutine's; tailHandling is set by the tail goroutine.

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
)

// tailKeeper is the heartbeat's view of the tail between beats.
type tailKeeper struct {
	tailCCMu     sync.Mutex         // guards tailCC (tail.go) and tailCons
	tailCons     jetstream.Consumer // the ordered consumer of tailCC
	tailHandling atomic.Bool        // the tail goroutine is handling a message
	keepBehind   bool               // the last beat saw the tail behind the stream
	keepSeq      uint64             // the tail's sequence at that beat
	tailRestarts atomic.Int64
}

// keepTail restarts the tail when it was behind the stream's last record
// (last) at the previous beat and has not moved since. It runs on the
// heartbeat goroutine.
func (e *Engine) keepTail(ctx context.Context, last uint64) {
	e.tailMu.Lock()
	seq := e.tailSeq
	e.tailMu.Unlock()
	if seq >= last || e.tailBusy() || !e.recordAfter(ctx, seq) {
		e.keepBehind = false
		return
	}
	if !e.keepBehind || e.keepSeq != seq {
		e.keepBehind, e.keepSeq = true, seq
		return
	}
	e.keepBehind = false
	if err := e.restartTail(ctx); err != nil {
		e.log.Warn("jsengine: tail restart", "err", err)
		return
	}
	e.log.Warn("jsengine: tail restarted: it had stopped behind the record stream", "at", seq, "last", last)
}

// tailBusy reports whether the tail goroutine has work at hand: messages
// handed over and not yet handled, or one it is handling (announcing to a
// slow observer, say). The consumer is delivering then; starting it again
// would not make the tail faster.
func (e *Engine) tailBusy() bool {
	return len(e.tailQ) > 0 || e.tailHandling.Load()
}

// recordAfter reports whether the record stream holds a record after
// sequence seq: the stream's last sequence can be one that no consumer
// delivers any more (its topic purged before the tail saw it). An error
// counts as a record there (the next beat looks again).
func (e *Engine) recordAfter(ctx context.Context, seq uint64) bool {
	_, err := e.rec.GetMsg(ctx, seq+1, jetstream.WithGetMsgSubject(e.prefix+".rec.>"))
	return !errors.Is(err, jetstream.ErrMsgNotFound)
}

// restartTail stops the tail's consumer and starts another after the
// last record the tail announced.
func (e *Engine) restartTail(ctx context.Context) error {
	e.tailCCMu.Lock()
	defer e.tailCCMu.Unlock()
	if e.closed.Load() {
		return nil
	}
	if e.tailCC != nil {
		e.tailCC.Stop()
		select {
		case <-e.tailCC.Closed():
		case <-ctx.Done():
			return ctx.Err() // stopped: the next beat makes the new one
		}
		e.tailCC = nil
		// The server keeps a stopped consumer until its inactive
		// threshold (5 minutes): delete it now.
		if info := e.tailCons.CachedInfo(); info != nil {
			if err := e.rec.DeleteConsumer(ctx, info.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				e.log.Debug("jsengine: delete the tail's old consumer", "err", err)
			}
		}
	}
	e.tailMu.Lock()
	seq := e.tailSeq
	e.tailMu.Unlock()
	cons, cc, err := e.consumeTail(ctx, seq+1)
	if err != nil {
		return err
	}
	e.tailCons, e.tailCC = cons, cc
	e.tailRestarts.Add(1)
	return nil
}

// consumeTail makes the tail's ordered consumer from stream sequence
// start and has it hand its messages to the tail goroutine.
func (e *Engine) consumeTail(ctx context.Context, start uint64) (jetstream.Consumer, jetstream.ConsumeContext, error) {
	cons, err := e.rec.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{e.prefix + ".rec.>"},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    start,
	})
	if err != nil {
		return nil, nil, unavailable("tail", err)
	}
	cc, err := cons.Consume(e.tailHandoff, jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		if !e.closed.Load() {
			e.log.Debug("jsengine: tail", "err", err)
		}
	}))
	if err != nil {
		return nil, nil, unavailable("tail", err)
	}
	return cons, cc, nil
}

// stopTail stops the tail's consumer for good (shutdown).
func (e *Engine) stopTail() {
	e.tailCCMu.Lock()
	defer e.tailCCMu.Unlock()
	if e.tailCC != nil {
		e.tailCC.Stop()
		<-e.tailCC.Closed()
		e.tailCC = nil
	}
}
