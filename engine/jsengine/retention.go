package jsengine

// Retention. JetStream limits apply to a whole stream, so per-partition
// MaxMessages and MaxAge are enforced by the engine with subject-filtered
// purges:
//
//   - Count: after an append that makes a partition hold more than
//     MaxMessages (plus trimSlack), the appending node purges the subject
//     keeping the newest MaxMessages, then reads the earliest record left
//     (another node may have appended in between: a direct get per trim).
//     drop_oldest is counted: Dropped equals Earliest, since a topic's
//     offsets start at 0 and records leave only by retention.
//   - Age: lazily, on Append, Read, Topic and Resolve (as the in-memory
//     engine does), using the append time from the engine's clock stored
//     in each record (Sy-Time), so a fake clock drives it. When every
//     record has expired, a trim marker (a record-less message holding the
//     last offset) replaces them, so the next offset survives an empty
//     partition.
//   - Block: an append to a full partition waits while a group reading it
//     has not committed past the oldest record, up to BlockTimeout on the
//     engine's clock, then fails with engine.ErrBackpressure. Group
//     positions of every node reach the others through the group bucket,
//     so a block on one node is released by an ack on another.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/lifecycle"
)

// trimSlack is how many records past MaxMessages a large drop_oldest
// partition may hold between trims. A trim is a purge round trip made by
// an append one at a time (after the partition's pipelined appends), so
// trimming on every append at the cap would end pipelining for good once
// a busy topic fills (the default cap is reached in minutes at hundreds of
// publishes per second). With the slack, an append trims back to
// MaxMessages only once fewer than maxPipelined records of slack are left,
// and the appends in between stay pipelined (see AppendAsync). Caps below
// 32768 records, and Block topics, are kept exactly (no slack).
func trimSlack(cfg engine.TopicConfig) int64 {
	if cfg.OnFull == engine.Block || cfg.MaxMessages < 32768 {
		return 0
	}
	return min(cfg.MaxMessages/16, 8192)
}

// mayTrim reports whether the next pipelined append to p of topic t may
// trim, and so goes one at a time, after the records in flight and queued
// (appendAfter): p's last message is a trim marker, p is near its count cap
// (counting every record this node may have in flight or queued,
// maxPipelined), or due to trim by age. Caller holds amu.
func (e *Engine) mayTrim(t *topic, p *partition) bool {
	return p.lastMark || (t.cfg.MaxMessages > 0 && p.nextW-p.earliestW+maxPipelined >= t.cfg.MaxMessages+trimSlack(t.cfg)) || ageDue(p, e.clock.Now())
}

// ageDue reports whether an append to p at now must trim by age first
// (trimAge would do a round trip): p's topic has a MaxAge, p holds
// records, and its oldest is expired or not known. Pipelined appends go
// one at a time then. Caller holds amu.
func ageDue(p *partition, now time.Time) bool {
	maxAge := p.t.cfg.MaxAge
	return maxAge > 0 && p.earliestW < p.nextW && (p.firstTime.IsZero() || p.firstTime.Before(now.Add(-maxAge)))
}

// trimAge removes records older than the topic's MaxAge at now, leaving a
// marker when none remain so the next offset survives. Caller holds amu and
// the state is known.
func (e *Engine) trimAge(ctx context.Context, p *partition, now time.Time) error {
	maxAge := p.t.cfg.MaxAge
	if maxAge <= 0 || p.earliestW >= p.nextW {
		return nil
	}
	cutoff := now.Add(-maxAge)
	if !p.firstTime.IsZero() && !p.firstTime.Before(cutoff) {
		return nil
	}
	for range 5 {
		m, ok, err := e.getMsg(ctx, p, 1)
		for err == nil && ok && (m.mark || m.time.Before(cutoff)) {
			m, ok, err = e.getMsg(ctx, p, m.seq+1)
		}
		if err != nil {
			return err
		}
		if ok { // m is the first record to keep
			if err := e.rec.Purge(ctx, jetstream.WithPurgeSubject(p.subject), jetstream.WithPurgeSequence(m.seq)); err != nil {
				return unavailable("trim", err)
			}
			p.earliestW, p.firstTime, p.baseCum = m.off, m.time, m.cum-recordBytes(m.rec)
			e.updateView(p)
			return nil
		}
		// Every record expired: store a marker holding the next offset.
		msg := &nats.Msg{Subject: p.subject, Header: header(p.nextW-1, now, p.cum)}
		msg.Header.Set(hMark, "1")
		msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(p.lastSeq, 10))
		ack, err := e.js.PublishMsg(ctx, msg)
		if isWrongLast(err) {
			if err := e.loadState(ctx, p); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return unavailable("trim", err)
		}
		if err := e.rec.Purge(ctx, jetstream.WithPurgeSubject(p.subject), jetstream.WithPurgeSequence(ack.Sequence)); err != nil {
			return unavailable("trim", err)
		}
		p.lastSeq, p.lastMark, p.earliestW, p.firstTime, p.baseCum = ack.Sequence, true, p.nextW, time.Time{}, p.cum
		e.updateView(p)
		return nil
	}
	return nil
}

// trimCount purges all but p's newest keep messages and learns the
// partition's earliest record from NATS: another node may have appended
// (and trimmed) between this node's last append and the purge, so the
// purge can leave a later earliest record than p's state implies. A
// failed purge is logged (the next trim tries again). Caller holds amu;
// the partition's last message is a record this node just appended.
func (e *Engine) trimCount(ctx context.Context, p *partition, keep int64) {
	if err := e.rec.Purge(ctx, jetstream.WithPurgeSubject(p.subject), jetstream.WithPurgeKeep(uint64(keep))); err != nil {
		e.log.Warn("jsengine: trim", "subject", p.subject, "err", err)
		return
	}
	p.earliestW, p.firstTime = max(p.earliestW, p.nextW-keep), time.Time{}
	first, ok, err := e.getMsg(ctx, p, 1)
	if err != nil || !ok || first.mark {
		return // at least what this node appended is known to be gone
	}
	p.earliestW, p.firstTime, p.baseCum = max(p.earliestW, first.off), first.time, first.cum-recordBytes(first.rec)
}

func (e *Engine) newBlockWait(d time.Duration) *lifecycle.Timeout {
	return e.life.Timeout(e.clock, d)
}

// waitForSpace waits, with amu released, until space is closed (the
// partition's floor may have risen), the block timeout passes, ctx is done
// or the engine closes. Caller holds amu and has counted itself in
// p.waiters; amu is held again on a nil return, released otherwise.
func (e *Engine) waitForSpace(ctx context.Context, t *topic, p *partition, bw *lifecycle.Timeout, space chan struct{}) error {
	p.amu.Unlock()
	var err error
	select {
	case <-space:
	case <-bw.Done():
		err = fmt.Errorf("jsengine: topic %q partition %d full for %v: %w",
			t.name, p.index, t.cfg.BlockTimeout, engine.ErrBackpressure)
	case <-ctx.Done():
		err = ctx.Err()
	case <-e.closeCh:
		err = closedErr()
	}
	p.smu.Lock()
	p.waiters--
	p.smu.Unlock()
	if err == nil {
		p.amu.Lock()
	}
	return err
}
