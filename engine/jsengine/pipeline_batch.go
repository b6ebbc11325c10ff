package jsengine

// Pipelined appends into replicated streams: atomic batches. A replicated
// stream cannot take the chain of pipeline.go (a refused
// Nats-Expected-Last-Msg-Id stops it; see that file), and refuses a second
// publish with Nats-Expected-Last-Subject-Sequence while one to the same
// subject is in flight. What it does check before proposing, and applies
// all or nothing, is an atomic batch (NATS 2.12 and later, the stream's
// allow_atomic): the records are staged, the first carries the partition's
// expected last subject sequence, and the last commits the batch, which is
// proposed as one entry and acknowledged once with its last sequence.
//
// So each partition has at most one batch in flight, and the records
// AppendAsync is given meanwhile wait in the partition's queue; when the
// batch is answered the next one takes up to maxBatchRecords of them. A
// partition takes a round trip per batch, not per record: under load the
// batches grow to what arrived during the last round trip. Offsets stay
// contiguous and unique (the first record's check covers the batch: it is
// stored whole or not at all), and records keep their AppendAsync order
// (a partition's batches go one after another, and a refused batch is
// sent again, after reloading the partition, before any later one). Two
// nodes appending to one partition refuse each other's batches: a batch
// refused more than twice waits a random pause first (batchBackoff), and
// its records fail with engine.ErrUnavailable only when it has been
// refused for batchContentionMax, or past its first record's deadline
// (appendMax from its AppendAsync call: see pipeline.go).
//
// A batch of one record is published as Append does (no staging). The
// acknowledgements are read in publish order by the ack reader of
// pipeline.go, as are the chained records'. Records with a MsgID take
// their claims ahead and go in the batches too (pipeline_msgid_batch.go).
// Everything else is as for the chain: Block topics, a partition near its
// cap or with expired records, append one at a time.
//
// Lock order: as pipeline.go (partition.amu, then Engine.wmu, which also
// guards the queues, Engine.w.bq). No network round trip is made under
// wmu; a refused batch's reload (one round trip) is made under the
// partition's amu, as Append's are.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

// maxBatchRecords bounds the records of one batch (NATS's default most is
// 1,000).
const maxBatchRecords = 256

// NATS's atomic batch headers.
const (
	hBatchID     = "Nats-Batch-Id"
	hBatchSeq    = "Nats-Batch-Sequence"
	hBatchCommit = "Nats-Batch-Commit"
)

// NATS's answers to a batch it stored nothing of and that may be sent
// again: the staged batch was dropped (incomplete), or the server had too
// many batches in flight.
const (
	jsErrBatchIncomplete jetstream.ErrorCode = 10176
	jsErrBatchTooMany    jetstream.ErrorCode = 10210
)

// batchContentionMax bounds how long a batch refused again and again
// (another node appending to its partition each time before it) is sent
// again before its records fail with engine.ErrUnavailable.
const batchContentionMax = 10 * time.Second

// batchBackoff is the pause before a refused batch is sent again: none
// after its first two refusals, then a random pause of up to 1 ms doubling
// to 16 ms, so two nodes that keep refusing each other's batches fall out
// of step. It holds the node's ack reader, never a lock.
func batchBackoff(attempt int) time.Duration {
	if attempt < 2 {
		return 0
	}
	return rand.N(time.Millisecond << min(attempt-2, 4))
}

func isBatchRetry(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jsErrBatchIncomplete || apiErr.ErrorCode == jsErrBatchTooMany)
}

// batchQueue is a partition's records waiting for its batch in flight.
type batchQueue struct {
	q      []*pend
	flying bool // a batch of the partition is in flight
}

// enableBatches lets the replicated record stream take atomic batches, and
// turns batching on when it does. A server without them (before 2.12)
// leaves the replicated streams appending one at a time.
func (e *Engine) enableBatches(ctx context.Context) {
	cfg := e.rec.CachedInfo().Config
	defer func() { e.setReplicas(max(cfg.Replicas, 1), cfg.AllowAtomicPublish) }()
	if e.replicas == 1 {
		return
	}
	if !cfg.AllowAtomicPublish {
		cfg.AllowAtomicPublish = true
		s, err := e.js.UpdateStream(ctx, cfg)
		if err != nil {
			e.log.Info("jsengine: record stream without atomic batches: replicated appends go one at a time", "err", err)
			return
		}
		e.rec = boundStream(s)
		cfg = s.CachedInfo().Config
		e.announceScale(ctx, "scaled") // other nodes take up the batches now
	}
}

// appendBatched is AppendAsync into a replicated stream, once it holds a
// slot (waitRoom).
func (e *Engine) appendBatched(ctx context.Context, t *topic, p *partition, pi int, m engine.Message, deadline time.Time, done func(engine.Appended, error)) {
	p.amu.Lock()
	if t.deleted.Load() || e.closed.Load() {
		p.amu.Unlock()
		e.freeRoom()
		e.appendSerial(ctx, m, deadline, done) // reports the topic gone or the engine closed
		return
	}
	if p.inflight == 0 && !p.known {
		if err := e.loadStateBy(ctx, p, deadline); err != nil {
			p.amu.Unlock()
			e.freeRoom()
			done(engine.Appended{}, err)
			return
		}
	}
	// Near the cap (counting every record this node may have in flight
	// or queued: maxPipelined), an append may trim: one at a time, after
	// the records in flight and queued (appendAfter waits for them).
	if e.mayTrim(t, p) {
		p.amu.Unlock()
		e.freeRoom()
		e.appendAfter(ctx, p, pi, m, "", deadline, done)
		return
	}
	x := &pend{ctx: ctx, t: t, p: p, m: m, done: done, deadline: deadline}
	x.size = recordBytes(&engine.Record{Key: m.Key, Headers: m.Headers, Data: m.Data})
	p.inflight++
	e.wmu.Lock()
	bq := e.batchQueueOf(p)
	bq.q = append(bq.q, x)
	send := !bq.flying
	e.wmu.Unlock()
	start := send && e.sendQueued(p)
	p.amu.Unlock()
	if start {
		e.startAckReader()
	}
}

// sendQueued publishes p's next batch from its queue, when it has none in
// flight, and reports whether the caller must start the ack reader once it
// has released p.amu. A batch takes the queue's records up to the first
// whose MsgID claim is not answered yet (it goes once it is) or that goes
// as by Append (handed to runQueued, which lets the queue go on after it).
// Caller holds p.amu.
func (e *Engine) sendQueued(p *partition) (start bool) {
	for {
		e.wmu.Lock()
		bq := e.w.bq[p]
		if bq == nil || bq.flying || len(bq.q) == 0 || bq.q[0].claimWait {
			if bq != nil && !bq.flying && len(bq.q) == 0 {
				delete(e.w.bq, p)
			}
			e.wmu.Unlock()
			return false
		}
		if x := bq.q[0]; x.serial {
			// Its round trips are not waited for here (the caller may be
			// the ack reader): appendQueued runs on a goroutine of its
			// own, and the queue goes on after it.
			if !e.life.Enter() { // closing: failPending answers the queue
				start = !e.w.reading
				e.w.reading = true
				e.wmu.Unlock()
				return start
			}
			bq.q = bq.q[1:]
			bq.flying = true
			e.wmu.Unlock()
			go e.runQueued(p, x) // exits once x is answered, by its deadline
			return false
		}
		n := 0
		for n < len(bq.q) && n < maxBatchRecords && !bq.q[n].claimWait && !bq.q[n].serial {
			n++
		}
		xs := bq.q[:n:n]
		bq.q = bq.q[n:]
		bq.flying = true
		e.wmu.Unlock()
		var err error
		if !p.known {
			// The batch is its records' together: no one session's
			// context ending fails the others' (its deadline bounds it).
			err = e.loadStateBy(context.WithoutCancel(xs[0].ctx), p, xs[0].deadline)
		}
		if f := e.beforeBatchSend.Load(); f != nil && err == nil && xs[0].claim != "" {
			(*f)()
		}
		if err == nil {
			start, err = e.sendBatch(p, xs, 0, time.Now())
		}
		if err != nil {
			return e.failBatch(p, xs, err)
		}
		return start
	}
}

// runQueued appends x, taken from the head of p's queue with p's batch
// marked flying, as by Append under its claim (appendQueued), then lets
// p's queue go on. It runs on a goroutine of its own, counted in the
// engine's lifecycle (Close waits for it), started by sendQueued so that
// neither the ack reader nor a holder of p.amu waits for x's round trips;
// it exits once x is answered, by x's deadline (appendMax), and at most
// one runs per partition (its batch is marked flying meanwhile).
func (e *Engine) runQueued(p *partition, x *pend) {
	defer e.life.Exit()
	e.appendQueued(x)
	p.amu.Lock()
	e.wmu.Lock()
	if bq := e.w.bq[p]; bq != nil {
		bq.flying = false
	}
	e.wmu.Unlock()
	start := e.sendQueued(p)
	p.amu.Unlock()
	if start {
		e.startAckReader()
	}
}

// failBatch answers xs with err and lets p's next batch go (see
// sendQueued for start). Caller holds p.amu; it is released while the
// answers are given.
func (e *Engine) failBatch(p *partition, xs []*pend, err error) (start bool) {
	p.known = false
	e.wmu.Lock()
	if bq := e.w.bq[p]; bq != nil {
		bq.flying = false
	}
	e.w.open += len(xs) // finish counts each one down
	e.wmu.Unlock()
	p.amu.Unlock()
	for _, x := range xs {
		e.finish(x, engine.Appended{}, err, false)
	}
	p.amu.Lock()
	return e.sendQueued(p)
}

// sendBatch publishes xs as one batch at p's next offsets, with p's last
// subject sequence expected before the first, and queues its commit for
// the ack reader (see sendQueued for start). Caller holds p.amu, with p
// known and p's batch marked flying; on an error nothing of xs is in
// flight.
func (e *Engine) sendBatch(p *partition, xs []*pend, attempt int, since time.Time) (start bool, err error) {
	switch {
	case p.t.deleted.Load():
		// Deleted while its records waited (for a claim, or for the batch
		// before): they fail, as Append's do, rather than be stored in the
		// deleted incarnation, whose partitions are purged. Not
		// errTopicGone: a record with a MsgID would be appended again to
		// the next incarnation on this goroutine, which may be the ack
		// reader.
		return false, fmt.Errorf("jsengine: topic %q was deleted: %w", p.t.name, engine.ErrUnknownTopic)
	case e.closed.Load():
		return false, closedErr()
	}
	if p.lastMark {
		// Only Append's trims leave markers, and they are not pipelined.
		return false, fmt.Errorf("jsengine: topic %q partition %d trimmed meanwhile: %w", p.t.name, p.index, engine.ErrUnavailable)
	}
	n := len(xs)
	off, cum, last := p.nextW, p.cum, p.lastTime
	rms := make([]*recMsg, n)
	msgs := make([]*nats.Msg, n)
	for i, x := range xs {
		x.off = off + int64(i)
		x.now = e.clock.Now()
		if x.now.Before(last) {
			x.now = last
		}
		last = x.now
		cum += x.size
		rms[i] = e.pendMsg(x, cum)
		msgs[i] = &rms[i].msg
		if x.claim != "" {
			rms[i].set(jetstream.MsgIDHeader, x.claim)
		}
	}
	rms[0].setUint(jetstream.ExpectedLastSubjSeqHeader, p.lastSeq)
	e.wmu.Lock()
	if n > 1 {
		e.w.n++
		id := nodeMsgID(e.node, ".b", e.w.n)
		for i, rm := range rms {
			rm.set(hBatchID, id)
			rm.setUint(hBatchSeq, uint64(i+1))
		}
		rms[n-1].set(hBatchCommit, "1")
		for _, msg := range msgs[:n-1] {
			if err := e.nc.PublishMsg(msg); err != nil {
				e.wmu.Unlock()
				return false, unavailable("append", err)
			}
		}
	}
	fut, err := e.js.PublishMsgAsync(msgs[n-1])
	if err != nil {
		e.wmu.Unlock()
		return false, unavailable("append", err)
	}
	e.batches.Add(1)
	e.pipelined.Add(int64(n))
	// The batch's context is no one session's: one's ending must not fail
	// the others' records in its reload or tail wait (its deadline bounds
	// both).
	b := &pend{ctx: context.WithoutCancel(xs[n-1].ctx), t: p.t, p: p, fut: fut, batch: xs, attempt: attempt, since: since, deadline: xs[0].deadline}
	e.w.open += n
	e.w.q = append(e.w.q, b)
	start = !e.w.reading
	e.w.reading = true
	e.wmu.Unlock()
	if p.earliestW >= p.nextW {
		p.earliestW, p.firstTime, p.baseCum = off, xs[0].now, p.cum
	}
	p.nextW, p.cum, p.lastTime, p.lastMark = off+int64(n), cum, last, false
	return start, nil
}

// settleBatch applies a batch's acknowledgement (or refusal) and answers
// its records, then lets the partition's next batch go.
func (e *Engine) settleBatch(b *pend, ack *jetstream.PubAck, err error) {
	p, xs := b.p, b.batch
	n := len(xs)
	switch {
	case err == nil && !ack.Duplicate:
		first := ack.Sequence - uint64(n) + 1
		p.amu.Lock()
		p.lastSeq = max(p.lastSeq, ack.Sequence)
		p.amu.Unlock()
		for i, x := range xs {
			e.viewStored(p, x.off, first+uint64(i))
		}
		e.waitTail(b.ctx, ack.Sequence, b.deadline)
		for _, x := range xs {
			a := engine.Appended{Partition: p.index, Offset: x.off, Time: x.now}
			if x.claim != "" {
				e.confirmClaim(x.claimKey, x.claimRev, x.claimAt, a)
			}
			e.finish(x, a, nil, false)
		}
	case claimRefused(xs, ack, err):
		// A record's Nats-Msg-Id was stored, or is being stored, by a
		// retry of its MsgID on another node: nothing of the batch was.
		e.requeueClaimed(b) // pipeline_msgid_batch.go
		return
	case (err == nil || isWrongLast(err) || isBatchRetry(err)) && time.Since(b.since) < batchContentionMax && time.Now().Before(b.deadline):
		// Refused whole (another node appended to the partition, or the
		// server had too many batches at once): send it again after
		// reloading, before anything queued after it.
		e.reappends.Add(int64(n))
		e.wmu.Lock()
		e.w.open -= n
		e.wmu.Unlock()
		rerr := e.sleep(context.Background(), batchBackoff(b.attempt))
		p.amu.Lock()
		p.known = false
		if rerr == nil {
			rerr = e.loadStateBy(b.ctx, p, b.deadline)
		}
		if f := e.beforeBatchResend.Load(); f != nil && rerr == nil {
			(*f)()
		}
		if rerr == nil {
			_, rerr = e.sendBatch(p, xs, b.attempt+1, b.since) // on the ack reader: it runs
		}
		if rerr != nil {
			e.failBatch(p, xs, rerr)
		}
		p.amu.Unlock()
		return
	default:
		// Unknown outcome (timeout, connection lost) or refused too often:
		// the partition's state is reloaded before its next batch.
		if err == nil || isWrongLast(err) || isBatchRetry(err) {
			err = fmt.Errorf("jsengine: topic %q partition %d: too much contention: %w", p.t.name, p.index, errAppendTimeout)
		} else if !errors.Is(err, engine.ErrUnavailable) {
			err = unavailable("append", err)
		}
		p.amu.Lock()
		p.known = false
		p.amu.Unlock()
		for _, x := range xs {
			e.finish(x, engine.Appended{}, err, false)
		}
	}
	p.amu.Lock()
	e.wmu.Lock()
	if bq := e.w.bq[p]; bq != nil {
		bq.flying = false
	}
	e.wmu.Unlock()
	e.sendQueued(p) // on the ack reader: it runs
	p.amu.Unlock()
}

// batchQueueOf returns partition p's batch queue, made on first use.
// Caller holds e.wmu.
func (e *Engine) batchQueueOf(p *partition) *batchQueue {
	if e.w.bq == nil {
		e.w.bq = map[*partition]*batchQueue{}
	}
	bq := e.w.bq[p]
	if bq == nil {
		bq = &batchQueue{}
		e.w.bq[p] = bq
	}
	return bq
}
