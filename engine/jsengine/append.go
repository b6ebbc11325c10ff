package jsengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
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

// Append stores m and returns once this node's observers have seen it. An
// unknown topic is created with the defaults unless the engine is strict.
// With a MsgID, a repeat within the dedupe window (on the engine's clock)
// returns the first append's position with Duplicate set. Under the Block
// policy it waits (see engine.Block) and fails with an error wrapping
// engine.ErrBackpressure, ctx's error, or engine.ErrClosed.
func (e *Engine) Append(ctx context.Context, m engine.Message) (_ engine.Appended, err error) {
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
		t, err = e.lookup(ctx, m.Topic)
		if errors.Is(err, engine.ErrUnknownTopic) && !e.strict {
			cfg := e.defaults
			cfg.Name = m.Topic
			t, _, err = e.create(ctx, cfg)
		}
		if err != nil {
			return engine.Appended{}, err
		}
		if t == nil {
			continue
		}
		var a engine.Appended
		var seq uint64
		if m.MsgID == "" {
			a, seq, err = e.appendTo(ctx, t, &m, "")
		} else {
			a, err = e.appendOnce(ctx, t, &m) // waits for the tail itself
		}
		if err == nil && seq != 0 {
			e.waitTail(ctx, seq)
		}
		if err != errTopicGone {
			return a, err
		}
	}
	return engine.Appended{}, err
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

// metaOf is the Sy-Meta header of m, nil when it has none.
func metaOf(m *engine.Message) []byte {
	if m.Key == "" && len(m.Headers) == 0 && m.Priority == 0 {
		return nil
	}
	meta, _ := json.Marshal(recMeta{K: m.Key, H: m.Headers, P: m.Priority})
	return meta
}

// appendToPart is appendTo into partition index pi.
func (e *Engine) appendToPart(ctx context.Context, t *topic, m *engine.Message, msgID string, pi int) (engine.Appended, uint64, error) {
	p := t.parts[pi]
	meta := metaOf(m)
	size := recordBytes(&engine.Record{Key: m.Key, Headers: m.Headers, Data: m.Data})
	maxMsgs := t.cfg.MaxMessages
	var bw *lifecycle.Timeout

	p.amu.Lock()
	p.quiesce()
	earliestBefore := p.earliestW
	var res engine.Appended
	var seq uint64
	for attempt := 0; ; attempt++ {
		if t.deleted.Load() {
			p.amu.Unlock()
			bw.Stop()
			return engine.Appended{}, 0, errTopicGone
		}
		if e.closed.Load() {
			p.amu.Unlock()
			bw.Stop()
			return engine.Appended{}, 0, closedErr()
		}
		if err := e.reachable(); err != nil {
			p.amu.Unlock()
			bw.Stop()
			return engine.Appended{}, 0, err
		}
		if attempt > 100 {
			p.amu.Unlock()
			bw.Stop()
			return engine.Appended{}, 0, fmt.Errorf("jsengine: topic %q partition %d: too much contention: %w", t.name, p.index, engine.ErrUnavailable)
		}
		if !p.known {
			if err := e.loadState(ctx, p); err != nil {
				p.amu.Unlock()
				bw.Stop()
				return engine.Appended{}, 0, err
			}
		}
		now := e.clock.Now()
		if now.Before(p.lastTime) {
			now = p.lastTime // keep times ordered for Resolve's search
		}
		if err := e.trimAge(ctx, p, now); err != nil {
			p.amu.Unlock()
			bw.Stop()
			return engine.Appended{}, 0, err
		}
		if maxMsgs > 0 && p.nextW-p.earliestW >= maxMsgs && t.cfg.OnFull == engine.Block {
			// Check and start waiting under one smu hold, so a commit in
			// between cannot be missed.
			p.smu.Lock()
			needed := p.readers > 0 && p.floor <= p.earliestW
			space := p.space
			if needed {
				p.waiters++
			}
			p.smu.Unlock()
			if needed {
				if bw == nil {
					bw = e.newBlockWait(t.cfg.BlockTimeout)
				}
				if err := e.waitForSpace(ctx, t, p, bw, space); err != nil {
					bw.Stop()
					return engine.Appended{}, 0, err
				}
				p.known = false // others may have appended meanwhile
				continue
			}
		}
		off := p.nextW
		msg := &nats.Msg{Subject: p.subject, Data: m.Data, Header: header(off, now, p.cum+size)}
		if meta != nil {
			msg.Header.Set(hMeta, string(meta))
		}
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(p.lastSeq, 10))
		if msgID != "" {
			msg.Header.Set(jetstream.MsgIDHeader, msgID)
		}
		ack, err := e.js.PublishMsg(ctx, msg)
		if isWrongLast(err) {
			p.known = false
			if msgID != "" {
				// Another publish under this Nats-Msg-Id (an earlier try,
				// or another node's under the same claim) may have landed:
				// a standalone server checks the expected last sequence
				// before duplicates. Not this publish, which was refused:
				// a duplicate of it.
				if last, err := e.rec.GetLastMsgForSubject(ctx, p.subject); err == nil && last.Header.Get(jetstream.MsgIDHeader) == msgID {
					if pm, err := parseMsg(t, p.index, last.Sequence, last.Header, last.Data); err == nil {
						res, seq = engine.Appended{Partition: p.index, Offset: pm.off, Time: pm.time, Duplicate: true}, last.Sequence
						break
					}
				}
			}
			continue
		}
		if err != nil {
			p.amu.Unlock()
			bw.Stop()
			return engine.Appended{}, 0, unavailable("append", err)
		}
		if ack.Duplicate {
			// Stored before under this Nats-Msg-Id (perhaps by another
			// node, perhaps in another partition): report that record.
			p.known = false
			p.amu.Unlock()
			bw.Stop()
			a, err := e.storedAt(ctx, t, ack.Sequence)
			return a, ack.Sequence, err
		}
		prevMark := p.lastMark
		wasEmpty := p.earliestW >= p.nextW
		p.lastSeq, p.lastMark, p.nextW, p.cum, p.lastTime = ack.Sequence, false, off+1, p.cum+size, now
		if wasEmpty {
			p.earliestW, p.firstTime, p.baseCum = off, now, p.cum-size
		}
		switch {
		case prevMark:
			if err := e.rec.Purge(ctx, jetstream.WithPurgeSubject(p.subject), jetstream.WithPurgeSequence(ack.Sequence)); err != nil {
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
		res, seq = engine.Appended{Partition: p.index, Offset: off, Time: now}, ack.Sequence
		break
	}
	trimmed := p.earliestW != earliestBefore
	p.amu.Unlock()
	bw.Stop()
	if trimmed {
		e.pumpPartition(p)
	}
	return res, seq, nil
}

// waitTail waits until the tail has announced stream sequence seq, so that
// Append returns after this node's observers and groups have the record.
// It gives up (the record is stored either way) when ctx is done, the
// engine closes, or the tail falls tailWaitMax behind. Once a wait gave
// up, no wait starts until the tail has reached the sequence that wait was
// for: a stalled tail delays this node's appends by one tailWaitMax, not
// one each (the pipelined acknowledgements, answered one after another,
// would otherwise take one tailWaitMax per record).
func (e *Engine) waitTail(ctx context.Context, seq uint64) {
	var timeout <-chan time.Time
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
			t := time.NewTimer(e.tailWaitMax)
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
			stop, late = true, true
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
