package jsengine

// Appends. Each record carries its partition offset in a header (Sy-Off)
// and is published with Nats-Expected-Last-Subject-Sequence set to the
// subject's last sequence as this node knows it. The server accepts it
// only if no other node appended to the partition meanwhile; otherwise
// the publish fails, the node reloads the subject's last message and
// retries. That assigns offsets 0, 1, 2, ... without holes or repeats,
// across any number of nodes, without a central lock or counter; on one
// node, appends to a partition are serialised locally (partition.amu) so
// they never conflict with each other. Offsets are stable: they are
// stored in the records themselves.
//
// Append returns after this node's tail has announced the record (or
// after five seconds, if the tail lags: the record is stored either way).
// Once an append gave up on the tail, the node's appends return without
// waiting until the tail reaches that append's record, so a stalled tail
// delays them by five seconds in all, not five seconds each (waitTail).
//
// The whole of one append, every round trip, reload, retry and wait of it,
// is bounded by appendMax from its call (appendBound, conn.go): past it the
// append fails with an error wrapping engine.ErrUnavailable, or returns
// (stored) without waiting longer for the tail.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/lifecycle"
)

func recordBytes(r *engine.Record) int64 {
	b := len(r.Data) + len(r.Key)
	for k, v := range r.Headers {
		b += len(k) + len(v)
	}
	return int64(b)
}

// topicFor returns the topic an append to name goes to: the current
// incarnation, or, for an unknown topic on an engine that is not strict,
// one created with the defaults. A nil topic with a nil error means the
// topic changed under the call (see create); the caller looks it up again.
func (e *Engine) topicFor(ctx context.Context, name string) (*topic, error) {
	t, err := e.lookup(ctx, name)
	if errors.Is(err, engine.ErrUnknownTopic) && !e.strict {
		cfg := e.defaults
		cfg.Name = name
		t, _, err = e.create(ctx, cfg)
	}
	return t, err
}

// Append stores m and returns once this node's observers have seen it. An
// unknown topic is created with the defaults unless the engine is strict.
// With a MsgID, a repeat within the dedupe window (on the engine's clock)
// returns the first append's position with Duplicate set. Under the Block
// policy it waits (see engine.Block) and fails with an error wrapping
// engine.ErrBackpressure, ctx's error, or engine.ErrClosed.
func (e *Engine) Append(ctx context.Context, m engine.Message) (engine.Appended, error) {
	return e.appendBy(ctx, m, time.Now().Add(appendMax))
}

// appendBy is Append answered by deadline (see appendMax), later by a
// Block topic's BlockTimeout (blockDeadline).
func (e *Engine) appendBy(ctx context.Context, m engine.Message, deadline time.Time) (_ engine.Appended, err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	for range 3 {
		if e.closed.Load() {
			return engine.Appended{}, closedErr()
		}
		if err := e.reachable(); err != nil {
			return engine.Appended{}, err
		}
		var t *topic
		t, err = e.topicBy(ctx, m.Topic, deadline)
		if err != nil {
			return engine.Appended{}, err
		}
		if t == nil {
			continue
		}
		var a engine.Appended
		a, err = e.appendIn(ctx, t, &m, blockDeadline(t, deadline))
		if err != errTopicGone {
			return a, err
		}
	}
	return engine.Appended{}, err
}

// appendIn is appendBy into topic t, by deadline.
func (e *Engine) appendIn(ctx context.Context, t *topic, m *engine.Message, deadline time.Time) (a engine.Appended, err error) {
	ctx, cancel := appendBound(ctx, deadline)
	defer cancel()
	var seq uint64
	if m.MsgID == "" {
		a, seq, err = e.appendTo(ctx, t, m, "")
	} else {
		a, err = e.appendOnce(ctx, t, m) // waits for the tail itself
	}
	if err == nil && seq != 0 {
		e.waitTail(ctx, seq, deadline)
	}
	if err == errTopicGone {
		return a, err
	}
	return a, boundErr(ctx, err)
}

// topicBy is topicFor, by deadline: the round trip for a topic this node
// does not know is bounded by an append's deadline.
func (e *Engine) topicBy(ctx context.Context, name string, deadline time.Time) (*topic, error) {
	if t := e.local(name); t != nil {
		return t, nil
	}
	ctx, cancel := appendBound(ctx, deadline)
	defer cancel()
	t, err := e.topicFor(ctx, name)
	return t, boundErr(ctx, err)
}

// blockDeadline is an append's deadline into t: later by t's BlockTimeout
// under the Block policy with a cap, so the wait for space, meant to last
// up to BlockTimeout and end in engine.ErrBackpressure, is not cut short.
func blockDeadline(t *topic, deadline time.Time) time.Time {
	if t.cfg.OnFull == engine.Block && t.cfg.MaxMessages > 0 {
		return deadline.Add(t.cfg.BlockTimeout)
	}
	return deadline
}

// appendTo stores m in one of t's partitions: the offset is the subject's
// last offset plus one, published with the subject's last sequence as the
// expected one, so two nodes racing for an offset cannot both get it (the
// loser reloads and retries). msgID, when set, is the Nats-Msg-Id, which
// makes a retried publish of the same claim idempotent in the server.
//
// It returns the record's stream sequence, for the caller's waitTail
// (Append returns once the tail announced the record).
func (e *Engine) appendTo(ctx context.Context, t *topic, m *engine.Message, msgID string) (engine.Appended, uint64, error) {
	return e.appendToPart(ctx, t, m, msgID, t.partitioner.Partition(m.Key, len(t.parts)))
}

// appendToPart is appendTo into partition index pi. It holds p.amu across
// the attempts (appendLocked), releasing it while a Block append waits,
// and lets p's groups catch up when the append trimmed the partition.
func (e *Engine) appendToPart(ctx context.Context, t *topic, m *engine.Message, msgID string, pi int) (engine.Appended, uint64, error) {
	p := t.parts[pi]
	r := appendReq{data: m.Data, msgID: msgID, meta: metaOf(m), size: recordBytes(&engine.Record{Key: m.Key, Headers: m.Headers, Data: m.Data})}
	var bw *lifecycle.Timeout // made by the first block wait; stopped on every exit

	p.amu.Lock()
	if !queuedIn(ctx, p) { // a queued record's own turn: see appendQueued
		p.quiesce()
	}
	earliestBefore := p.earliestW
	res, seq, out, err := e.appendLocked(ctx, t, p, &r, &bw)
	if out == appendWaitFailed { // amu was released by the wait
		bw.Stop()
		return engine.Appended{}, 0, err
	}
	trimmed := p.earliestW != earliestBefore
	p.amu.Unlock()
	bw.Stop()
	switch out {
	case appendFailed:
		return engine.Appended{}, 0, err
	case appendStoredBefore:
		a, err := e.storedAt(ctx, t, seq)
		return a, seq, err
	}
	if trimmed {
		e.pumpPartition(p)
	}
	return res, seq, nil
}

// appendReq is one record on its way into a partition.
type appendReq struct {
	data  []byte // the payload (a pointer to the message would move it to the heap)
	msgID string // Nats-Msg-Id, empty for none
	meta  string // the Sy-Meta header, "" for none
	size  int64  // recordBytes of the record
}

// appendOutcome tells appendToPart how appendLocked ended.
type appendOutcome int

const (
	appendStored       appendOutcome = iota // stored (or found stored under its Nats-Msg-Id): position and sequence returned
	appendStoredBefore                      // the server acknowledged a duplicate: sequence returned, position to be read
	appendFailed                            // failed with amu held
	appendWaitFailed                        // a block wait failed, with amu released
)

// appendLocked makes appendToPart's attempts at storing r in p: it checks
// the append may go ahead, applies age retention, waits for space under
// the Block policy, publishes with the expected last subject sequence, and
// on a conflict reloads and tries again (at most 101 attempts). Caller
// holds p.amu; it is held again on return except after appendWaitFailed.
func (e *Engine) appendLocked(ctx context.Context, t *topic, p *partition, r *appendReq, bw **lifecycle.Timeout) (engine.Appended, uint64, appendOutcome, error) {
	for attempt := 0; ; attempt++ {
		if err := e.appendable(ctx, t, p, attempt); err != nil {
			return engine.Appended{}, 0, appendFailed, err
		}
		now := e.clock.Now()
		if now.Before(p.lastTime) {
			now = p.lastTime // keep times ordered for Resolve's search
		}
		if err := e.trimAge(ctx, p, now); err != nil {
			return engine.Appended{}, 0, appendFailed, err
		}
		if waited, err := e.waitIfFull(ctx, t, p, bw); err != nil {
			return engine.Appended{}, 0, appendWaitFailed, err
		} else if waited {
			p.known = false // others may have appended meanwhile
			continue
		}
		off := p.nextW
		pctx, cancel := roundTrip(ctx)
		ack, err := e.js.PublishMsg(pctx, recordMsg(p, r, off, now))
		cancel()
		if isWrongLast(err) {
			p.known = false
			if r.msgID != "" {
				if res, seq, ok := e.landedBefore(ctx, t, p, r.msgID); ok {
					return res, seq, appendStored, nil
				}
			}
			continue
		}
		if err != nil {
			return engine.Appended{}, 0, appendFailed, unavailable("append", err)
		}
		if ack.Duplicate {
			// Stored before under this Nats-Msg-Id (perhaps by another
			// node, perhaps in another partition): report that record.
			p.known = false
			return engine.Appended{}, ack.Sequence, appendStoredBefore, nil
		}
		e.appended(ctx, t, p, ack.Sequence, off, now, r.size)
		return engine.Appended{Partition: p.index, Offset: off, Time: now}, ack.Sequence, appendStored, nil
	}
}

// appendable fails when an append to p cannot go ahead (topic deleted,
// engine closed, NATS unreachable, or too many conflicting attempts), and
// loads p's state when this node does not know it. Caller holds p.amu.
func (e *Engine) appendable(ctx context.Context, t *topic, p *partition, attempt int) error {
	if t.deleted.Load() {
		return errTopicGone
	}
	if e.closed.Load() {
		return closedErr()
	}
	if err := e.reachable(); err != nil {
		return err
	}
	if attempt > 100 {
		return fmt.Errorf("jsengine: topic %q partition %d: too much contention: %w", t.name, p.index, engine.ErrUnavailable)
	}
	if !p.known {
		return e.loadState(ctx, p)
	}
	return nil
}

// waitIfFull waits for space when p is full under the Block policy and a
// group reading it has not committed past its oldest record, reporting
// whether it waited. Caller holds p.amu; it is held again on a nil error
// and released otherwise (see waitForSpace). *bw is made by the first wait.
func (e *Engine) waitIfFull(ctx context.Context, t *topic, p *partition, bw **lifecycle.Timeout) (bool, error) {
	maxMsgs := t.cfg.MaxMessages
	if maxMsgs <= 0 || p.nextW-p.earliestW < maxMsgs || t.cfg.OnFull != engine.Block {
		return false, nil
	}
	// Check and start waiting under one smu hold, so a commit in
	// between cannot be missed.
	p.smu.Lock()
	needed := p.readers > 0 && p.floor <= p.earliestW
	space := p.space
	if needed {
		p.waiters++
	}
	p.smu.Unlock()
	if !needed {
		return false, nil
	}
	if *bw == nil {
		*bw = e.newBlockWait(t.cfg.BlockTimeout)
	}
	return true, e.waitForSpace(ctx, t, p, *bw, space)
}

// recordMsg is the message storing r at offset off of p, expecting p's
// last subject sequence as this node knows it.
func recordMsg(p *partition, r *appendReq, off int64, now time.Time) *nats.Msg {
	msg := newRecMsg(p.subject, r.data, off, now, p.cum+r.size) // recmsg.go
	if r.meta != "" {
		msg.set(hMeta, r.meta)
	}
	msg.setUint(jetstream.ExpectedLastSubjSeqHeader, p.lastSeq)
	if r.msgID != "" {
		msg.set(jetstream.MsgIDHeader, r.msgID)
	}
	return &msg.msg
}

// landedBefore reports the record p's last message holds when it carries
// msgID. Another publish under this Nats-Msg-Id (an earlier try, or
// another node's under the same claim) may have landed: a standalone
// server checks the expected last sequence before duplicates. Not the
// publish just refused: a duplicate of it.
func (e *Engine) landedBefore(ctx context.Context, t *topic, p *partition, msgID string) (engine.Appended, uint64, bool) {
	ctx, cancel := roundTrip(ctx)
	last, err := e.rec.GetLastMsgForSubject(ctx, p.subject)
	cancel()
	if err != nil || last.Header.Get(jetstream.MsgIDHeader) != msgID {
		return engine.Appended{}, 0, false
	}
	pm, err := parseMsg(t, p.index, last.Sequence, last.Header, last.Data)
	if err != nil {
		return engine.Appended{}, 0, false
	}
	return engine.Appended{Partition: p.index, Offset: pm.off, Time: pm.time, Duplicate: true}, last.Sequence, true
}

// appended updates p's writer state and view after the record of size
// bytes was stored at offset off and stream sequence seq, dropping a trim
// marker it replaced and trimming p to MaxMessages when due (see
// trimSlack). Caller holds p.amu.
func (e *Engine) appended(ctx context.Context, t *topic, p *partition, seq uint64, off int64, now time.Time, size int64) {
	maxMsgs := t.cfg.MaxMessages
	prevMark := p.lastMark
	wasEmpty := p.earliestW >= p.nextW
	p.lastSeq, p.lastMark, p.nextW, p.cum, p.lastTime = seq, false, off+1, p.cum+size, now
	if wasEmpty {
		p.earliestW, p.firstTime, p.baseCum = off, now, p.cum-size
	}
	switch {
	case prevMark:
		if err := e.rec.Purge(ctx, jetstream.WithPurgeSubject(p.subject), jetstream.WithPurgeSequence(seq)); err != nil {
			e.log.Warn("jsengine: drop marker", "subject", p.subject, "err", err)
		}
	case maxMsgs > 0 && p.nextW-p.earliestW > maxMsgs &&
		p.nextW-p.earliestW+maxPipelined >= maxMsgs+trimSlack(t.cfg):
		if f := e.beforeTrim.Load(); f != nil {
			(*f)()
		}
		e.trimCount(ctx, p, maxMsgs)
	}
	e.updateView(p)
}

// waitTail waits until the tail has announced stream sequence seq, so that
// Append returns after this node's observers and groups have the record.
// It gives up (the record is stored either way) when ctx is done, the
// engine closes, the append's deadline (zero: none) passes, or the tail
// falls tailWaitMax behind. Once a wait gave
// up, no wait starts until the tail has reached the sequence that wait was
// for: a stalled tail delays this node's appends by one tailWaitMax, not
// one each (the pipelined acknowledgements, answered one after another,
// would otherwise take one tailWaitMax per record).
func (e *Engine) waitTail(ctx context.Context, seq uint64, deadline time.Time) {
	var timeout <-chan time.Time
	bounded := false // the timeout is the deadline's, not the tail's
	for {
		e.tailMu.Lock()
		if e.tailSeq >= seq || (timeout == nil && e.tailSeq < e.tailGaveUp) {
			e.tailMu.Unlock()
			return
		}
		e.tailWait++
		ch := e.tailWake
		e.tailMu.Unlock()
		if timeout == nil {
			d := e.tailWaitMax
			if left := time.Until(deadline); !deadline.IsZero() && left < d {
				d, bounded = max(left, 0), true
			}
			t := time.NewTimer(d)
			defer t.Stop()
			timeout = t.C
		}
		var stop, late bool
		select {
		case <-ch:
		case <-ctx.Done():
			stop = true
		case <-e.closeCh:
			stop = true
		case <-timeout:
			stop, late = true, !bounded
		}
		e.tailMu.Lock()
		e.tailWait--
		if late {
			e.tailGaveUp = max(e.tailGaveUp, seq)
		}
		e.tailMu.Unlock()
		if late {
			e.tailGiveUps.Add(1)
		}
		if stop {
			return
		}
	}
}
