package jsengine

// Pipelined appends (engine.AsyncAppender). Append waits for its publish's
// acknowledgement before the next append of the partition can be
// published, so one partition takes at most one record per NATS round
// trip, and a round trip that queues behind the node's own fan-out
// (reading the reply waits for CPU) slows every publisher of it.
// AppendAsync publishes without waiting (nats.go's PublishMsgAsync) and
// keeps the guarantees of the expected-sequence scheme with a chain:
//
//   - Every pipelined record carries its own Nats-Msg-Id, <node>.<n>.
//   - A record published while this node has another pipelined record in
//     flight carries Nats-Expected-Last-Msg-Id: the id of the node's
//     previous publish to the record stream. The server stores it only if
//     that publish is the stream's last message, so a chain of records is
//     stored back to back with nothing in between, or the chain breaks at
//     the first record after something else got in, and every later record
//     of it is refused too (its predecessor was not stored).
//   - The first record of a partition in a chain (none of the partition's
//     own records in flight) also carries Nats-Expected-Last-Subject-
//     Sequence, as Append's do: it checks the partition's state this node
//     knows, and the chain carries that check to the partition's next
//     records, whose offsets follow with no round trip.
//
// So offsets stay contiguous and unique across nodes. A refused record
// (another node or another append of this node got in between) marks its
// partition broken: nothing more of it is published until its records in
// flight are all answered, and each refused one is appended again, in
// order, by the goroutine that reads the acknowledgements (reloading the
// partition's state, with the expected-sequence check, as Append does);
// the first such append anchors a new chain. Records of one partition are
// therefore stored in the order AppendAsync was called, as the interface
// requires. done is called once the tail announced the record, as Append
// returns; the acknowledgements are read in publish order by one goroutine
// at a time, which is started when a record is published with none
// running and exits when none is in flight.
//
// Replicated streams do not take the chain; records into them go in
// atomic batches instead (pipeline_batch.go), or, on a server without
// atomic batches (before NATS 2.12), as by Append. A replicated stream
// cannot take the chain: it checks
// Nats-Expected-Last-Msg-Id only as it applies a record, after proposing
// it (unlike the expected-sequence headers, checked before), and treats a
// mismatch there as a write error it cannot recover from: the first
// refused record stops the stream on every server, and nothing more is
// acknowledged or read (TestReplicatedLastMsgIDRefusalStopsTheStream, on
// nats-server 2.15). A chain on Nats-Expected-Last-Sequence, which a
// replicated stream does check before proposing, is not safe either: a
// record refused because another got in lets its successor through, as the
// other record holds the very sequence the successor expects.
//
// Records with a MsgID are pipelined once their claim is made, under the
// claim's Nats-Msg-Id (pipeline_msgid.go).
//
// Not pipelined, but appended as by Append (after the partition's records
// in flight): a repeat of a MsgID already claimed, topics with the Block
// policy (an append may wait), a MaxAge topic's
// partition whose oldest record has expired (the append trims it: see
// ageDue),
// a partition within the window of its MaxMessages plus its trim slack
// (an append may trim: see trimSlack),
// and a partition whose last message is a trim marker.
//
// Cost: every pipelined record's Nats-Msg-Id is held by the server for
// the stream's duplicates window (the policy's DedupeWindow).
//
// Lock order: partition.amu, then Engine.wmu (both held while a record is
// published, so the chain's order is the publish order); the ack reader
// takes amu then wmu as well. Neither is held while waiting for an
// acknowledgement, except by the re-append of a refused record.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

// maxPipelined bounds this node's pipelined records in flight; AppendAsync
// waits for room past it.
const maxPipelined = 1024

// jsErrWrongLastMsgID is the server's error code for a refused
// Nats-Expected-Last-Msg-Id.
const jsErrWrongLastMsgID jetstream.ErrorCode = 10070

// pipeline is the state of this node's pipelined appends: wmu orders
// their publishes; wsem bounds them.
type pipeline struct {
	wmu  sync.Mutex
	w    pipe // guarded by wmu
	wsem chan struct{}
	// reappends counts refused pipelined records appended again.
	reappends  atomic.Int64
	oneAtATime atomic.Int64 // AppendAsync calls appended as by Append (appendAfter)
	// batching: replicated streams take AppendAsync's records in atomic
	// batches (pipeline_batch.go); set by New.
	batching atomic.Bool
	// recReplicas is the record stream's replicas as last read, and
	// scaleUntil, when not 0, the time (Unix ns) until which a notice of a
	// change keeps appends one at a time (replicas_live.go).
	recReplicas atomic.Int32
	scaleUntil  atomic.Int64
	batches     atomic.Int64 // batches published (counting each sending again)
	// pipelined counts records published without waiting for the one
	// before (chained or batched), each time it is published.
	pipelined atomic.Int64
}

// pipe is the engine's pipelined records in flight, in publish order.
type pipe struct {
	q      []*pend // published, not yet answered, in publish order
	lastID string  // Nats-Msg-Id of the node's last pipelined publish
	// claims counts the records under a MsgID claim in flight: another
	// node's retry of the MsgID may store a record under the claim's
	// Nats-Msg-Id, so no record is chained meanwhile (pipeline_msgid.go).
	claims  int
	n       uint64 // ids handed out
	open    int    // pipelined records published and not yet answered
	epoch   uint64 // bumped when a re-append starts a new chain
	reading bool   // an ack reader runs
	// bq holds, by partition, the records waiting for the partition's
	// batch in flight (pipeline_batch.go).
	bq map[*partition]*batchQueue
}

// pend is one pipelined record in flight.
type pend struct {
	ctx  context.Context
	t    *topic
	p    *partition
	m    engine.Message
	off  int64
	size int64
	now  time.Time
	id   string
	// claim is the Nats-Msg-Id of the record's MsgID claim (dedupe.go),
	// "" for a record without a MsgID.
	claim string
	fut   jetstream.PubAckFuture
	done  func(engine.Appended, error)
	// A batch's commit (pipeline_batch.go): its records, and how many
	// times it was refused and sent again.
	batch   []*pend
	attempt int
	since   time.Time // when the batch was first sent
}

var _ engine.AsyncAppender = (*Engine)(nil)

// AppendAsync implements engine.AsyncAppender; see the file comment. It
// is one function of about 110 lines on purpose: it is the WebSocket
// publish path, and its checks under amu and its chain bookkeeping under
// wmu are read together.
func (e *Engine) AppendAsync(ctx context.Context, m engine.Message, done func(engine.Appended, error)) {
	if m.MsgID != "" {
		e.appendAsyncOnce(ctx, m, done) // pipeline_msgid.go
		return
	}
	if e.scalingNow() || (e.replicated() && !e.batching.Load()) {
		e.appendSerial(ctx, m, done)
		return
	}
	e.appendPipelined(ctx, m, nil, "", done)
}

// appendPipelined is AppendAsync into topic t (nil: m's topic, looked
// up) under claim, the Nats-Msg-Id of a MsgID's claim ("" for none: the
// record gets the node's own). A record under a claim falls back to
// appendUnderClaim where others fall back to Append.
func (e *Engine) appendPipelined(ctx context.Context, m engine.Message, t *topic, claim string, done func(engine.Appended, error)) {
	if e.closed.Load() {
		done(engine.Appended{}, closedErr())
		return
	}
	if err := e.reachable(); err != nil {
		done(engine.Appended{}, err)
		return
	}
	if t == nil {
		var err error
		if t, err = e.topicFor(ctx, m.Topic); err != nil {
			done(engine.Appended{}, err)
			return
		}
	}
	if t == nil || (t.cfg.OnFull == engine.Block && t.cfg.MaxMessages > 0) || (claim != "" && e.replicated()) {
		e.appendFallback(ctx, m, t, claim, done)
		return
	}
	pi := t.partitioner.Partition(m.Key, len(t.parts))
	p := t.parts[pi]
	if !e.waitRoom(ctx) {
		done(engine.Appended{}, e.ctxOrClosed(ctx))
		return
	}
	if e.replicated() {
		e.appendBatched(ctx, t, p, pi, m, done)
		return
	}
	p.amu.Lock()
	for p.broken || (!p.known && p.inflight > 0) || (p.inflight > 0 && p.chain != e.chainEpoch()) {
		// A record of p may follow p's records in flight only on the
		// chain they are on: a re-append started a new one.
		p.pcond.Wait()
	}
	if t.deleted.Load() || e.closed.Load() {
		p.amu.Unlock()
		e.freeRoom()
		e.appendFallback(ctx, m, t, claim, done) // reports the topic gone or the engine closed
		return
	}
	if !p.known {
		if err := e.loadState(ctx, p); err != nil {
			p.amu.Unlock()
			e.freeRoom()
			done(engine.Appended{}, err)
			return
		}
	}
	if p.lastMark || (t.cfg.MaxMessages > 0 && p.nextW-p.earliestW+maxPipelined >= t.cfg.MaxMessages+trimSlack(t.cfg)) || ageDue(p, e.clock.Now()) {
		p.amu.Unlock()
		e.freeRoom()
		e.appendAfter(ctx, p, pi, m, claim, done)
		return
	}
	x := &pend{ctx: ctx, t: t, p: p, m: m, off: p.nextW, claim: claim}
	x.size = recordBytes(&engine.Record{Key: m.Key, Headers: m.Headers, Data: m.Data})
	x.now = e.clock.Now()
	if x.now.Before(p.lastTime) {
		x.now = p.lastTime
	}
	msg := e.pendMsg(x, p.cum+x.size)
	e.wmu.Lock()
	if p.inflight > 0 && p.chain != e.w.epoch {
		// A re-append started a new chain since the check above (it
		// holds wmu, not amu): start over, to wait for p's records in
		// flight.
		e.wmu.Unlock()
		p.amu.Unlock()
		e.freeRoom()
		e.appendPipelined(ctx, m, t, claim, done)
		return
	}
	if p.inflight > 0 && e.w.claims > 0 {
		// Chaining on a claim's Nats-Msg-Id, or on a record chained on
		// one, could pass after another node's retry of that MsgID,
		// stored elsewhere in its partition, and put this record at an
		// offset another record holds: it is appended once p's records in
		// flight are answered.
		e.wmu.Unlock()
		p.amu.Unlock()
		e.freeRoom()
		e.appendAfter(ctx, p, pi, m, claim, done)
		return
	}
	x.id = claim
	if claim == "" {
		e.w.n++
		x.id = e.node + "." + strconv.FormatUint(e.w.n, 10)
	}
	msg.Header.Set(jetstream.MsgIDHeader, x.id)
	if p.inflight == 0 {
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(p.lastSeq, 10))
	}
	if e.w.open > 0 {
		// Chained: p.inflight > 0 implies this, so every record of p after
		// its first in flight is checked through the chain.
		msg.Header.Set(jetstream.ExpectedLastMsgIDHeader, e.w.lastID)
	}
	if f := e.beforePipelinedPublish.Load(); f != nil {
		(*f)()
	}
	fut, err := e.js.PublishMsgAsync(msg)
	if err != nil {
		e.wmu.Unlock()
		p.amu.Unlock()
		e.freeRoom()
		done(engine.Appended{}, unavailable("append", err))
		return
	}
	x.fut, x.done = fut, done
	e.pipelined.Add(1)
	p.chain = e.w.epoch
	e.w.lastID = x.id
	if claim != "" {
		e.w.claims++
	}
	e.w.open++
	e.w.q = append(e.w.q, x)
	start := !e.w.reading
	e.w.reading = true
	e.wmu.Unlock()
	// The writer's state runs ahead of the acknowledgements; a refusal
	// reloads it.
	if p.earliestW >= p.nextW {
		p.earliestW, p.firstTime, p.baseCum = x.off, x.now, p.cum
	}
	p.nextW, p.cum, p.lastTime, p.lastMark = x.off+1, p.cum+x.size, x.now, false
	p.inflight++
	p.amu.Unlock()
	if start {
		e.startAckReader()
	}
}

// pendMsg builds x's NATS message; cum is the partition's bytes with x.
func (e *Engine) pendMsg(x *pend, cum int64) *nats.Msg {
	msg := &nats.Msg{Subject: x.p.subject, Data: x.m.Data, Header: header(x.off, x.now, cum)}
	if meta := metaOf(&x.m); meta != nil {
		msg.Header.Set(hMeta, string(meta))
	}
	return msg
}

// appendSerial appends m as Append does, once the partition it goes to has
// no pipelined records in flight (Append waits for those itself).
func (e *Engine) appendSerial(ctx context.Context, m engine.Message, done func(engine.Appended, error)) {
	done(e.Append(ctx, m))
}

// appendAfter appends m to partition pi of p's topic as Append does
// (under claim, when set: see appendPipelined).
func (e *Engine) appendAfter(ctx context.Context, p *partition, pi int, m engine.Message, claim string, done func(engine.Appended, error)) {
	e.oneAtATime.Add(1)
	ctx, fin := e.onConn(ctx)
	a, seq, err := e.appendToPart(ctx, p.t, &m, claim, pi)
	if err == errTopicGone {
		fin(nil)
		if claim != "" {
			done(engine.Appended{}, errTopicGone) // the claim's owner appends again
			return
		}
		done(e.Append(ctx, m))
		return
	}
	err = fin(err)
	if err == nil {
		e.waitTail(ctx, seq)
	}
	done(a, err)
}

func (e *Engine) ctxOrClosed(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return closedErr()
}

// waitRoom takes a slot of the node's pipelined records in flight.
func (e *Engine) waitRoom(ctx context.Context) bool {
	select {
	case e.wsem <- struct{}{}:
		return true
	case <-ctx.Done():
	case <-e.closeCh:
	}
	return false
}

func (e *Engine) freeRoom() { <-e.wsem }

// startAckReader starts the goroutine that reads acknowledgements; it
// exits once none is in flight.
func (e *Engine) startAckReader() {
	if !e.life.Enter() {
		e.failPending(closedErr())
		return
	}
	go func() { // exits when no pipelined record is in flight
		defer e.life.Exit()
		e.readAcks()
	}()
}

// failPending answers every record in flight, and every one waiting for
// a batch, with err (the engine closed).
func (e *Engine) failPending(err error) {
	for {
		e.wmu.Lock()
		var xs []*pend
		switch {
		case len(e.w.q) > 0:
			x := e.w.q[0]
			e.w.q = e.w.q[1:]
			xs = []*pend{x}
			if x.batch != nil {
				xs = x.batch
			}
		default:
			for p, bq := range e.w.bq {
				xs = bq.q
				e.w.open += len(xs) // finish counts each one down
				delete(e.w.bq, p)
				break
			}
		}
		if len(xs) == 0 {
			e.w.reading = false
			e.wmu.Unlock()
			return
		}
		e.wmu.Unlock()
		for _, x := range xs {
			e.finish(x, engine.Appended{}, err, true)
		}
	}
}

// readAcks answers the records in flight in publish order.
func (e *Engine) readAcks() {
	for {
		e.wmu.Lock()
		if len(e.w.q) == 0 {
			e.w.reading = false
			e.wmu.Unlock()
			return
		}
		x := e.w.q[0]
		e.wmu.Unlock()
		var ack *jetstream.PubAck
		var err error
		select {
		case ack = <-x.fut.Ok():
		case err = <-x.fut.Err():
		case <-e.closeCh:
			e.failPending(closedErr())
			return
		}
		e.wmu.Lock()
		e.w.q = e.w.q[1:]
		e.wmu.Unlock()
		e.settlePend(x, ack, err)
	}
}

// settlePend applies one acknowledgement (or refusal) and answers x.
func (e *Engine) settlePend(x *pend, ack *jetstream.PubAck, err error) {
	if f := e.beforeSettle.Load(); f != nil {
		(*f)()
	}
	if x.batch != nil {
		e.settleBatch(x, ack, err)
		return
	}
	p := x.p
	switch {
	case err == nil && ack.Duplicate && x.claim != "":
		// Stored before under the claim (a retry of the MsgID on another
		// node got in first): that record is the MsgID's. This one is not
		// stored, so the chain after it breaks and is appended again.
		p.amu.Lock()
		p.broken, p.known = true, false
		p.amu.Unlock()
		a, serr := e.storedAt(x.ctx, x.t, ack.Sequence)
		if serr == nil {
			e.waitTail(x.ctx, ack.Sequence)
		}
		e.finish(x, a, serr, false)
	case err == nil && !ack.Duplicate:
		p.amu.Lock()
		p.lastSeq = max(p.lastSeq, ack.Sequence)
		p.amu.Unlock()
		e.viewStored(p, x.off, ack.Sequence)
		e.waitTail(x.ctx, ack.Sequence)
		e.finish(x, engine.Appended{Partition: p.index, Offset: x.off, Time: x.now}, nil, false)
	case err == nil || isWrongLast(err) || isWrongLastID(err):
		// Refused (a duplicate id cannot be ours: ids are unique, so it is
		// treated as a refusal): append it again, in order.
		e.reappends.Add(1)
		p.amu.Lock()
		p.broken, p.known = true, false
		a, seq, rerr := e.reappend(x)
		p.amu.Unlock()
		if rerr == nil {
			e.waitTail(x.ctx, seq)
		}
		e.finish(x, a, rerr, false)
	default:
		// Unknown outcome (timeout, connection lost): the record may be
		// stored; the partition's state is reloaded before its next append.
		p.amu.Lock()
		p.broken, p.known = true, false
		p.amu.Unlock()
		e.finish(x, engine.Appended{}, unavailable("append", err), false)
	}
}

// finish answers x and frees its slot. done runs first, so the done calls
// of a partition keep its order even with an Append waiting in quiesce.
func (e *Engine) finish(x *pend, a engine.Appended, err error, closing bool) {
	if closing && err == nil {
		err = closedErr()
	}
	x.done(a, err)
	p := x.p
	p.amu.Lock()
	e.wmu.Lock()
	e.w.open--
	if x.claim != "" {
		e.w.claims--
	}
	e.wmu.Unlock()
	p.inflight--
	if p.inflight == 0 {
		p.broken = false
	}
	p.pcond.Broadcast()
	p.amu.Unlock()
	e.freeRoom()
}

// reappend stores a refused record again with the expected-sequence check,
// reloading the partition's state first, and anchors a new chain on it.
// Caller holds p.amu; reappend takes Engine.wmu for its publish, so no
// pipelined record is published meanwhile.
func (e *Engine) reappend(x *pend) (engine.Appended, uint64, error) {
	p, t := x.p, x.t
	e.wmu.Lock()
	defer e.wmu.Unlock()
	for attempt := 0; ; attempt++ {
		switch {
		case t.deleted.Load():
			return engine.Appended{}, 0, fmt.Errorf("jsengine: topic %q was deleted: %w", t.name, engine.ErrUnknownTopic)
		case e.closed.Load():
			return engine.Appended{}, 0, closedErr()
		case attempt > 100:
			return engine.Appended{}, 0, fmt.Errorf("jsengine: topic %q partition %d: too much contention: %w", t.name, p.index, engine.ErrUnavailable)
		}
		if err := e.reachable(); err != nil {
			return engine.Appended{}, 0, err
		}
		if err := e.loadState(x.ctx, p); err != nil {
			return engine.Appended{}, 0, err
		}
		if p.lastMark {
			// Only Append's trims leave markers, and they are not pipelined.
			return engine.Appended{}, 0, fmt.Errorf("jsengine: topic %q partition %d trimmed meanwhile: %w", t.name, p.index, engine.ErrUnavailable)
		}
		x.off = p.nextW
		now := e.clock.Now()
		if now.Before(p.lastTime) {
			now = p.lastTime
		}
		x.now = now
		msg := e.pendMsg(x, p.cum+x.size)
		id := x.claim
		if id == "" {
			e.w.n++
			id = e.node + "." + strconv.FormatUint(e.w.n, 10)
		}
		msg.Header.Set(jetstream.MsgIDHeader, id)
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(p.lastSeq, 10))
		ack, err := e.js.PublishMsg(x.ctx, msg)
		if isWrongLast(err) {
			continue
		}
		if err != nil {
			return engine.Appended{}, 0, unavailable("append", err)
		}
		if ack.Duplicate && x.claim != "" {
			// Stored before under the claim: that record is the MsgID's.
			p.known = false
			a, err := e.storedAt(x.ctx, t, ack.Sequence)
			return a, ack.Sequence, err
		}
		e.w.lastID = id
		e.w.epoch++ // a new chain: records in flight are not on it
		if p.earliestW >= p.nextW {
			p.earliestW, p.firstTime, p.baseCum = x.off, now, p.cum
		}
		p.lastSeq, p.lastMark, p.nextW, p.cum, p.lastTime = ack.Sequence, false, x.off+1, p.cum+x.size, now
		p.known = true
		e.updateView(p)
		return engine.Appended{Partition: p.index, Offset: x.off, Time: now}, ack.Sequence, nil
	}
}

func isWrongLastID(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrWrongLastMsgID
}

// quiesce waits until none of p's pipelined records is in flight, so p's
// state is what NATS holds as far as this node knows. Caller holds p.amu.
func (p *partition) quiesce() {
	for p.inflight > 0 {
		p.pcond.Wait()
	}
}

// viewStored brings p's shared view up to a pipelined record stored at
// offset off, stream sequence seq (the writer's state may be ahead).
func (e *Engine) viewStored(p *partition, off int64, seq uint64) {
	p.smu.Lock()
	p.next = max(p.next, off+1)
	p.seen = max(p.seen, seq)
	p.smu.Unlock()
}

// pipelineAckTimeout bounds the wait for a pipelined record's
// acknowledgement; past it the outcome is unknown (as for an Append whose
// context ended mid-publish).
const pipelineAckTimeout = 5 * time.Second

// chainEpoch returns the current chain's number.
func (e *Engine) chainEpoch() uint64 {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	return e.w.epoch
}
