package jsengine

// Pipelined appends (engine.AsyncAppender). Append waits for its publish's
// acknowledgement before the next append of the partition can be
// published, so one partition takes at most one record per NATS round
// trip, and a round trip that queues behind the node's own fan-out
// (reading the reply waits for CPU) slows every publisher of it.
// AppendAsync publishes without waiting (with its own reply subscription:
// pipeline_ack.go) and
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
// claim's Nats-Msg-Id (pipeline_msgid.go); into a replicated stream, their
// claims are taken ahead and the records batched (pipeline_msgid_batch.go).
//
// A pipelined record is answered within appendMax of its AppendAsync call,
// as Append is (conn.go): its deadline, a time in its pend (no context is
// made for it), bounds the wait for room and for its partition, the wait
// for its acknowledgement (the ack reader's one reused timer), its
// re-append and the wait for the tail; past it the record fails with an
// error wrapping engine.ErrUnavailable (its outcome unknown: it may be
// stored), or, stored, is answered without waiting longer for the tail.
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
	"sync"
	"sync/atomic"
	"time"

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
	// confirmsDropped counts claim confirmations dropped past the
	// confirmer's bound or on Close (pipeline_confirm.go).
	confirmsDropped atomic.Int64
}

// pipe is the engine's pipelined records in flight, in publish order.
type pipe struct {
	q      []*pend // published, not yet answered, in publish order
	lastID string  // Nats-Msg-Id of the node's last pipelined publish
	// claims counts the records under a MsgID claim in flight: another
	// node's retry of the MsgID may store a record under the claim's
	// Nats-Msg-Id, so no record is chained meanwhile (pipeline_msgid.go).
	claims int
	// ackTimer bounds the ack reader's wait for the record at the head
	// of q (its deadline); made by the first reader, used by the one
	// running.
	ackTimer *time.Timer
	n        uint64 // ids handed out
	open     int    // pipelined records published and not yet answered
	epoch    uint64 // bumped when a re-append starts a new chain
	reading  bool   // an ack reader runs
	// bq holds, by partition, the records waiting for the partition's
	// batch in flight (pipeline_batch.go).
	bq map[*partition]*batchQueue
	// confirms are the claim confirmations waiting for the confirmer,
	// which runs while confirming is set (pipeline_confirm.go).
	confirms   []confirmReq
	confirming bool
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
	// deadline is when the record must be answered (its AppendAsync call
	// plus appendMax); a batch's is its first record's.
	deadline time.Time
	// A record with a MsgID batched into a replicated stream
	// (pipeline_msgid_batch.go): its claim's key, revision and time;
	// claimOf, on the pend of a claim's create in flight, is its record.
	claimKey string
	claimRev uint64
	claimAt  time.Time
	claimOf  *pend
	// claimWait: the record's claim is not answered yet; serial: it is
	// appended as by Append, under its claim, when it reaches the head of
	// its partition's queue. Guarded by wmu.
	claimWait, serial bool
	// A chained record's message and the future of its acknowledgement
	// (appendPipelined), made with it in one allocation.
	rm recMsg
	af ackFuture
}

var _ engine.AsyncAppender = (*Engine)(nil)

// AppendAsync implements engine.AsyncAppender; see the file comment.
func (e *Engine) AppendAsync(ctx context.Context, m engine.Message, done func(engine.Appended, error)) {
	deadline := time.Now().Add(appendMax)
	if m.MsgID != "" {
		e.appendAsyncOnce(ctx, m, deadline, done) // pipeline_msgid.go
		return
	}
	if e.scalingNow() || (e.replicated() && !e.batching.Load()) {
		e.appendSerial(ctx, m, deadline, done)
		return
	}
	e.appendPipelined(ctx, m, nil, "", deadline, done)
}

// appendPipelined is AppendAsync into topic t (nil: m's topic, looked
// up) under claim, the Nats-Msg-Id of a MsgID's claim ("" for none: the
// record gets the node's own), answered by deadline. A record under a
// claim falls back to appendUnderClaim where others fall back to Append.
// It is one function
// of about 140 lines on purpose: it is the WebSocket publish path, and
// its checks under amu and its chain bookkeeping under wmu are read
// together.
func (e *Engine) appendPipelined(ctx context.Context, m engine.Message, t *topic, claim string, deadline time.Time, done func(engine.Appended, error)) {
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
		if t, err = e.topicBy(ctx, m.Topic, deadline); err != nil {
			done(engine.Appended{}, err)
			return
		}
	}
	if t == nil || (t.cfg.OnFull == engine.Block && t.cfg.MaxMessages > 0) || (claim != "" && e.replicated()) {
		e.appendFallback(ctx, m, t, claim, deadline, done)
		return
	}
	pi := t.partitioner.Partition(m.Key, len(t.parts))
	p := t.parts[pi]
	if err := e.waitRoom(ctx, deadline); err != nil {
		done(engine.Appended{}, err)
		return
	}
	if e.replicated() {
		e.appendBatched(ctx, t, p, pi, m, deadline, done)
		return
	}
	p.amu.Lock()
	for p.broken || (!p.known && p.inflight > 0) || (p.inflight > 0 && p.chain != e.chainEpoch()) {
		// A record of p may follow p's records in flight only on the
		// chain they are on: a re-append started a new one. They are
		// answered by their deadlines, which are before this one's.
		p.pcond.Wait()
	}
	if t.deleted.Load() || e.closed.Load() {
		p.amu.Unlock()
		e.freeRoom()
		e.appendFallback(ctx, m, t, claim, deadline, done) // reports the topic gone or the engine closed
		return
	}
	if err := pastBound(deadline); err != nil {
		p.amu.Unlock()
		e.freeRoom()
		done(engine.Appended{}, err)
		return
	}
	if !p.known {
		if err := e.loadStateBy(ctx, p, deadline); err != nil {
			p.amu.Unlock()
			e.freeRoom()
			done(engine.Appended{}, err)
			return
		}
	}
	if e.mayTrim(t, p) {
		p.amu.Unlock()
		e.freeRoom()
		e.appendAfter(ctx, p, pi, m, claim, deadline, done)
		return
	}
	x := &pend{ctx: ctx, t: t, p: p, m: m, off: p.nextW, claim: claim, deadline: deadline}
	x.size = recordBytes(&engine.Record{Key: m.Key, Headers: m.Headers, Data: m.Data})
	x.now = e.clock.Now()
	if x.now.Before(p.lastTime) {
		x.now = p.lastTime
	}
	msg := &x.rm
	e.initPendMsg(x, msg, p.cum+x.size)
	e.wmu.Lock()
	if p.inflight > 0 && p.chain != e.w.epoch {
		// A re-append started a new chain since the check above (it
		// holds wmu, not amu): start over, to wait for p's records in
		// flight.
		e.wmu.Unlock()
		p.amu.Unlock()
		e.freeRoom()
		e.appendPipelined(ctx, m, t, claim, deadline, done)
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
		e.appendAfter(ctx, p, pi, m, claim, deadline, done)
		return
	}
	x.id = claim
	if claim == "" {
		e.w.n++
		x.id = nodeMsgID(e.node, ".", e.w.n)
	}
	msg.set(jetstream.MsgIDHeader, x.id)
	if p.inflight == 0 {
		msg.setUint(jetstream.ExpectedLastSubjSeqHeader, p.lastSeq)
	}
	if e.w.open > 0 {
		// Chained: p.inflight > 0 implies this, so every record of p after
		// its first in flight is checked through the chain.
		msg.set(jetstream.ExpectedLastMsgIDHeader, e.w.lastID)
	}
	if f := e.beforePipelinedPublish.Load(); f != nil {
		(*f)()
	}
	fut, err := e.acks.publishWith(&x.af, &msg.msg) // pipeline_ack.go
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
func (e *Engine) pendMsg(x *pend, cum int64) *recMsg {
	msg := &recMsg{}
	e.initPendMsg(x, msg, cum)
	return msg
}

// initPendMsg makes msg, which must be new, pendMsg's message.
func (e *Engine) initPendMsg(x *pend, msg *recMsg, cum int64) {
	msg.init(x.p.subject, x.m.Data, x.off, x.now, cum) // recmsg.go
	if meta := metaOf(&x.m); meta != "" {
		msg.set(hMeta, meta)
	}
}

// appendSerial appends m as Append does, by deadline, once the partition
// it goes to has no pipelined records in flight (Append waits for those
// itself).
func (e *Engine) appendSerial(ctx context.Context, m engine.Message, deadline time.Time, done func(engine.Appended, error)) {
	done(e.appendBy(ctx, m, deadline))
}

// appendAfter appends m to partition pi of p's topic as Append does, by
// deadline (under claim, when set: see appendPipelined).
func (e *Engine) appendAfter(ctx context.Context, p *partition, pi int, m engine.Message, claim string, deadline time.Time, done func(engine.Appended, error)) {
	e.oneAtATime.Add(1)
	cctx, fin := e.onConn(ctx)
	bctx, cancel := appendBound(cctx, deadline)
	defer cancel()
	a, seq, err := e.appendToPart(bctx, p.t, &m, claim, pi)
	if err == errTopicGone {
		fin(nil)
		if claim != "" {
			done(engine.Appended{}, errTopicGone) // the claim's owner appends again
			return
		}
		done(e.appendBy(ctx, m, deadline))
		return
	}
	err = fin(boundErr(bctx, err))
	if err == nil {
		e.waitTail(bctx, seq, deadline)
	}
	done(a, err)
}

// loadStateBy is loadState with its round trip bounded by an append's
// deadline.
func (e *Engine) loadStateBy(ctx context.Context, p *partition, deadline time.Time) error {
	bctx, cancel := appendBound(ctx, deadline)
	defer cancel()
	return boundErr(bctx, e.loadState(bctx, p))
}

// waitRoom takes a slot of the node's pipelined records in flight,
// waiting at most until deadline for one.
func (e *Engine) waitRoom(ctx context.Context, deadline time.Time) error {
	select {
	case e.wsem <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case e.wsem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.closeCh:
		return closedErr()
	case <-t.C:
		return fmt.Errorf("jsengine: %w", errAppendTimeout)
	}
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
			if x.claimOf != nil { // its record waits in its partition's queue
				e.wmu.Unlock()
				continue
			}
			xs = []*pend{x}
			if x.batch != nil {
				xs = x.batch
			}
		default:
			// Every partition's queue, those with only a batch in
			// flight (nothing queued) too: none is left behind.
			for p, bq := range e.w.bq {
				xs = append(xs, bq.q...)
				delete(e.w.bq, p)
			}
			e.w.open += len(xs) // finish counts each one down
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
		if e.closed.Load() {
			// Closing: every record in flight or queued is answered,
			// those queued behind a claim or a serial append too.
			e.failPending(closedErr())
			return
		}
		e.wmu.Lock()
		if len(e.w.q) == 0 {
			e.w.reading = false
			e.wmu.Unlock()
			return
		}
		x := e.w.q[0]
		ack, err, ok := answerOf(x.fut) // pipeline_ack.go
		if !ok {
			// The wait ends at the earliest deadline in flight: a batch is
			// published after its records' calls, so it may follow claims
			// or batches whose deadlines are later than its own. Only those
			// are answered out of order (settleOverdue), so only theirs
			// count.
			at := x.deadline
			for _, y := range e.w.q[1:] {
				if (y.batch != nil || y.claimOf != nil) && y.deadline.Before(at) {
					at = y.deadline
				}
			}
			timer := e.w.ackTimer
			if timer == nil {
				timer = time.NewTimer(time.Until(at))
				e.w.ackTimer = timer
			} else {
				timer.Reset(time.Until(at))
			}
			e.wmu.Unlock()
			// A chained record's future signals its inbox's wake channel
			// when answered; others answer on their own channels.
			var okc <-chan *jetstream.PubAck
			var errc <-chan error
			var wake <-chan struct{}
			if f, is := x.fut.(*ackFuture); is {
				wake = f.in.wake
			} else {
				okc, errc = x.fut.Ok(), x.fut.Err()
			}
			select {
			case ack = <-okc:
			case err = <-errc:
			case <-wake:
				timer.Stop()
				continue // an answer came: perhaps x's
			case <-timer.C:
				// Not answered in time: its outcome is unknown, as after
				// the client's own timeout. An answer that came meanwhile
				// still counts.
				if ack, err, ok = answerOf(x.fut); !ok {
					if time.Now().Before(x.deadline) {
						e.settleOverdue() // another's deadline came first
						continue
					}
					err = errAppendTimeout
				}
			case <-e.closeCh:
				timer.Stop()
				e.failPending(closedErr())
				return
			}
			timer.Stop()
			e.wmu.Lock()
		}
		e.w.q = e.w.q[1:]
		e.wmu.Unlock()
		e.settlePend(x, ack, err)
	}
}

// settleOverdue answers, on the ack reader, the batches and claims in
// flight behind the head of the queue whose deadline has passed: as at
// the head, their outcome is unknown (an answer that came meanwhile still
// counts). Only batches (one per partition in flight) and claims (each
// its own record's) are taken out of publish order: a chained record's
// order is its chain's.
func (e *Engine) settleOverdue() {
	now := time.Now()
	e.wmu.Lock()
	var due []*pend
	keep := e.w.q[:1]
	for _, y := range e.w.q[1:] {
		if (y.batch != nil || y.claimOf != nil) && !now.Before(y.deadline) {
			due = append(due, y)
			continue
		}
		keep = append(keep, y)
	}
	clear(e.w.q[len(keep):])
	e.w.q = keep
	e.wmu.Unlock()
	for _, y := range due {
		var ack *jetstream.PubAck
		var err error
		select {
		case ack = <-y.fut.Ok():
		case err = <-y.fut.Err():
		default:
			err = errAppendTimeout
		}
		e.settlePend(y, ack, err)
	}
}

// settlePend applies one acknowledgement (or refusal) and answers x.
func (e *Engine) settlePend(x *pend, ack *jetstream.PubAck, err error) {
	if f := e.beforeSettle.Load(); f != nil {
		(*f)()
	}
	if x.claimOf != nil {
		e.settleClaim(x, ack, err) // pipeline_msgid_batch.go
		return
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
		bctx, cancel := appendBound(x.ctx, x.deadline)
		a, serr := e.storedAt(bctx, x.t, ack.Sequence)
		serr = boundErr(bctx, serr)
		cancel()
		if serr == nil {
			e.waitTail(x.ctx, ack.Sequence, x.deadline)
		}
		e.finish(x, a, serr, false)
	case err == nil && !ack.Duplicate:
		p.amu.Lock()
		p.lastSeq = max(p.lastSeq, ack.Sequence)
		p.amu.Unlock()
		e.viewStored(p, x.off, ack.Sequence)
		e.waitTail(x.ctx, ack.Sequence, x.deadline)
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
			e.waitTail(x.ctx, seq, x.deadline)
		}
		e.finish(x, a, rerr, false)
	default:
		// Unknown outcome (timeout, connection lost): the record may be
		// stored; the partition's state is reloaded before its next append.
		p.amu.Lock()
		p.broken, p.known = true, false
		p.amu.Unlock()
		if !errors.Is(err, engine.ErrUnavailable) {
			err = unavailable("append", err)
		}
		e.finish(x, engine.Appended{}, err, false)
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
// reloading the partition's state first, and anchors a new chain on it,
// by x's deadline. Caller holds p.amu; reappend takes Engine.wmu for its
// publish, so no pipelined record is published meanwhile.
func (e *Engine) reappend(x *pend) (_ engine.Appended, _ uint64, err error) {
	ctx, cancel := appendBound(x.ctx, x.deadline)
	defer func() {
		err = boundErr(ctx, err)
		cancel()
	}()
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
		if err := e.loadState(ctx, p); err != nil {
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
			id = nodeMsgID(e.node, ".", e.w.n)
		}
		msg.set(jetstream.MsgIDHeader, id)
		msg.setUint(jetstream.ExpectedLastSubjSeqHeader, p.lastSeq)
		ack, err := e.js.PublishMsg(ctx, &msg.msg)
		if isWrongLast(err) {
			continue
		}
		if err != nil {
			return engine.Appended{}, 0, unavailable("append", err)
		}
		if ack.Duplicate && x.claim != "" {
			// Stored before under the claim: that record is the MsgID's.
			p.known = false
			a, err := e.storedAt(ctx, t, ack.Sequence)
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
