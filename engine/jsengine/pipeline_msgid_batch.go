package jsengine

// Records with a MsgID into a replicated stream: claims taken ahead, the
// records in the partition's atomic batches (pipeline_batch.go).
//
// AppendAsync of a record with a MsgID into a replicated stream waits for
// no round trip. It queues the record in its partition's batch queue at
// once, in call order, and publishes its claim's create (dedupe.go) to the
// dedupe bucket without waiting: an expected last subject sequence of 0
// is what the bucket's create checks. The claim's answer is read by the
// node's ack reader, in publish order with the batches (its pend carries
// claimOf). A batch takes the queue's records up to the first whose claim
// is not answered yet, so a burst's claims overlap one another and its
// records go in batches, each record carrying its claim's Nats-Msg-Id.
// An atomic batch checks every record's Nats-Msg-Id before it is proposed
// (NATS 2.12 and later; a mismatch of Nats-Expected-Last-Msg-Id is what a
// replicated stream cannot refuse early: see pipeline.go), so a batch
// holding a MsgID another node's retry stored first, or is storing, is
// refused whole (codes 10201 and 10158) and nothing of it is stored.
//
// Every record that does not take that way goes as by Append, under its
// claim (appendClaimed: it reads the claim, reports a confirmed one's
// position as a duplicate, publishes again under an unconfirmed one),
// when it reaches the head of its partition's queue, with none of the
// partition's batches in flight (appendQueued): a record whose claim's
// create was refused (the MsgID was claimed before: a repeat or a retry)
// or had no answer, and the records with a claim of a batch refused as
// above (the others are batched again after them, in order). So records
// keep their AppendAsync order and offsets stay contiguous, and a MsgID is
// stored at most once within the window, across nodes and leader changes,
// as with Append. A batched record's claim is confirmed once the batch is
// stored (confirmClaim); an unknown outcome leaves it unconfirmed, as
// Append does.
//
// Lock order: as pipeline.go. appendQueued runs with no lock held, on a
// goroutine of the engine's of its own (runQueued, pipeline_batch.go):
// never on the ack reader, whose every wait is bounded by the deadline of
// the record at the head of its queue.

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

// jsErrBatchDuplicate is the server's refusal of an atomic batch holding a
// record whose Nats-Msg-Id is stored.
const jsErrBatchDuplicate jetstream.ErrorCode = 10201

// claimBatched is AppendAsync of m, with a MsgID, into the replicated
// topic t, under the claim key (registered in Engine.dedup by the caller;
// end answers and unregisters it).
func (e *Engine) claimBatched(ctx context.Context, m engine.Message, t *topic, key string, deadline time.Time, end func(engine.Appended, error)) {
	if t.cfg.OnFull == engine.Block && t.cfg.MaxMessages > 0 {
		e.appendClaimedBy(ctx, m, t, key, deadline, end)
		return
	}
	p := t.parts[t.partitioner.Partition(m.Key, len(t.parts))]
	if err := e.waitRoom(ctx, deadline); err != nil {
		end(engine.Appended{}, err)
		return
	}
	p.amu.Lock()
	if t.deleted.Load() || e.closed.Load() {
		p.amu.Unlock()
		e.freeRoom()
		e.appendClaimedBy(ctx, m, t, key, deadline, end) // reports the topic gone or the engine closed
		return
	}
	if p.inflight == 0 && !p.known {
		if err := e.loadStateBy(ctx, p, deadline); err != nil {
			p.amu.Unlock()
			e.freeRoom()
			end(engine.Appended{}, err)
			return
		}
	}
	if e.mayTrim(t, p) { // one at a time, after the records in flight (see appendBatched)
		p.amu.Unlock()
		e.freeRoom()
		e.oneAtATime.Add(1)
		e.appendClaimedBy(ctx, m, t, key, deadline, end)
		return
	}
	x := &pend{ctx: ctx, t: t, p: p, m: m, done: end, deadline: deadline, claimKey: key, claimWait: true}
	x.size = recordBytes(&engine.Record{Key: m.Key, Headers: m.Headers, Data: m.Data})
	x.claimAt = e.clock.Now()
	claim, _ := json.Marshal(dedupVal{At: x.claimAt})
	msg := nats.NewMsg("$KV." + e.prefix + "_dedupe." + key)
	msg.Data = claim
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
	e.wmu.Lock()
	fut, err := e.js.PublishMsgAsync(msg)
	if err != nil {
		e.wmu.Unlock()
		p.amu.Unlock()
		e.freeRoom()
		end(engine.Appended{}, unavailable("dedupe", err))
		return
	}
	p.inflight++
	bq := e.batchQueueOf(p)
	bq.q = append(bq.q, x)
	e.w.q = append(e.w.q, &pend{ctx: ctx, t: t, p: p, fut: fut, claimOf: x, deadline: deadline})
	start := !e.w.reading
	e.w.reading = true
	e.wmu.Unlock()
	p.amu.Unlock()
	if start {
		e.startAckReader()
	}
}

// settleClaim applies the answer to a queued record's claim create, on the
// ack reader, and lets the partition's next batch go.
func (e *Engine) settleClaim(c *pend, ack *jetstream.PubAck, err error) {
	x, p := c.claimOf, c.p
	p.amu.Lock()
	e.wmu.Lock()
	x.claimWait = false
	if err == nil && !ack.Duplicate {
		x.claimRev = ack.Sequence
		x.claim = x.claimKey + "." + strconv.FormatUint(ack.Sequence, 10)
		e.w.claims++ // finish counts it down
	} else {
		x.serial = true // claimed before, or no answer: the claim says what to do
	}
	e.wmu.Unlock()
	e.sendQueued(p) // on the ack reader: it runs
	p.amu.Unlock()
}

// claimRefused reports whether a batch holding records with claims was
// refused for a Nats-Msg-Id stored or being stored (a batch of one is
// acknowledged as a duplicate instead).
func claimRefused(xs []*pend, ack *jetstream.PubAck, err error) bool {
	claimed := false
	for _, x := range xs {
		claimed = claimed || x.claim != ""
	}
	if !claimed {
		return false
	}
	if err == nil {
		return ack.Duplicate
	}
	return isAPIErr(err, jsErrBatchDuplicate) || isMsgIDInProcess(err)
}

// requeueClaimed puts a refused batch's records back at the head of their
// partition's queue, those with a claim to go as by Append, and lets the
// queue go on. It runs on the ack reader.
func (e *Engine) requeueClaimed(b *pend) {
	p, xs := b.p, b.batch
	p.amu.Lock()
	p.known = false
	e.wmu.Lock()
	bq := e.w.bq[p]
	if bq == nil { // the engine closed meanwhile (failPending)
		e.wmu.Unlock()
		p.amu.Unlock()
		for _, x := range xs {
			e.finish(x, engine.Appended{}, closedErr(), true)
		}
		return
	}
	e.w.open -= len(xs) // counted again when batched, or by appendQueued
	for _, x := range xs {
		x.serial = x.claim != ""
	}
	bq.q = append(append(make([]*pend, 0, len(xs)+len(bq.q)), xs...), bq.q...)
	bq.flying = false
	e.wmu.Unlock()
	e.sendQueued(p) // on the ack reader: it runs
	p.amu.Unlock()
}

// queuedKey marks the context of appendQueued's append: its record is
// counted among its partition's records in flight, which it must not wait
// for.
type queuedKey struct{}

// queuedIn reports whether ctx is appendQueued's for partition p.
func queuedIn(ctx context.Context, p *partition) bool {
	q, _ := ctx.Value(queuedKey{}).(*partition)
	return q == p
}

// appendQueued appends x, taken from the head of its partition's queue
// with the queue's batch marked flying, as by Append under its claim, and
// answers it. No lock is held.
func (e *Engine) appendQueued(x *pend) {
	e.wmu.Lock()
	e.w.open++ // finish counts it down
	e.wmu.Unlock()
	e.oneAtATime.Add(1)
	ctx := context.WithValue(x.ctx, queuedKey{}, x.p)
	cctx, fin := e.onConn(ctx)
	bctx, cancel := appendBound(cctx, x.deadline)
	a, err := e.appendClaimed(bctx, x.t, &x.m, x.claimKey)
	if err != errTopicGone {
		err = fin(boundErr(bctx, err))
	} else {
		fin(nil)
	}
	cancel()
	e.finish(x, a, err, false)
}

// appendClaimedBy appends m under the claim key as Append does, by
// deadline, and answers end.
func (e *Engine) appendClaimedBy(ctx context.Context, m engine.Message, t *topic, key string, deadline time.Time, end func(engine.Appended, error)) {
	cctx, fin := e.onConn(ctx)
	bctx, cancel := appendBound(cctx, blockDeadline(t, deadline))
	a, err := e.appendClaimed(bctx, t, &m, key)
	if err != errTopicGone {
		err = fin(boundErr(bctx, err))
	} else {
		fin(nil)
	}
	cancel()
	end(a, err)
}

func isAPIErr(err error, code jetstream.ErrorCode) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == code
}
