package jsengine

// Pipelined appends of records with a MsgID (AppendAsync).
//
// A record with a MsgID first claims it in the dedupe bucket (dedupe.go):
// one round trip, the create of the claim, taken by the caller without
// any lock. When the claim is new (the common case: a MsgID seen for the
// first time), the record is published like any pipelined record
// (pipeline.go), in the partition's chain, with the claim's Nats-Msg-Id
// (<claim key>.<revision>) in place of the node's own id, so the chain's
// Nats-Expected-Last-Msg-Id names it and the server's duplicate detection
// still stores the MsgID at most once. The caller does not wait for the
// record's acknowledgement, nor for the claim's confirmation, which is
// published without waiting once the record is stored, or written waiting
// for its answer past half the pipeline pending (confirmClaim). A repeat
// that finds the claim unconfirmed (its confirmation lost) publishes under
// it again and gets the first record's position as a duplicate, as after a
// lost acknowledgement, while that record is in the log.
//
// While a record under a claim is in flight, no record is chained in a
// partition with records in flight: a retry of the MsgID on another node
// stores a record under the same Nats-Msg-Id, wherever that node finds
// the partition's end, and a record expecting that Nats-Msg-Id as the
// stream's last (or expecting a record that did) would then be stored at
// the offset it was given behind the first, which another record may hold.
// Such a record is appended once its partition's records in flight are
// answered (appendAfter); a record of a partition with none in flight is
// checked by its expected last sequence, and still pipelined.
//
// Everything else goes as by Append (appendClaimed): a claim that exists
// (a repeat, or a retry after an unknown outcome), a repeat of a MsgID
// whose first append is still in process on this node (it waits for it),
// and replicated streams without atomic batches. Replicated streams with
// them take claims ahead and the records in batches
// (pipeline_msgid_batch.go). A pipelined record under a claim that is refused in
// its chain is appended again under the same claim; one the server answers
// as a duplicate (another node's retry of the MsgID stored it first)
// reports that record's position with Duplicate set.

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

// claimKey is the dedupe bucket key of msgID's claim in topic t.
func claimKey(t *topic, msgID string) string {
	return fmt.Sprintf("%d.%s.%s", t.inc, enc(t.name), enc(msgID))
}

// appendAsyncOnce is AppendAsync for a record with a MsgID.
// It is answered by deadline (see appendMax).
func (e *Engine) appendAsyncOnce(ctx context.Context, m engine.Message, deadline time.Time, done func(engine.Appended, error)) {
	batched := e.replicated() && e.batching.Load()
	if (e.replicated() && !batched) || e.scalingNow() || e.closed.Load() || e.reachable() != nil {
		e.appendSerial(ctx, m, deadline, done) // reports the engine closed or NATS unreachable
		return
	}
	t := e.local(m.Topic)
	if t == nil { // not known here: Append looks it up, by deadline
		e.appendSerial(ctx, m, deadline, done)
		return
	}
	key := claimKey(t, m.MsgID)
	e.dmu.Lock()
	if e.dedup[key] != nil { // a repeat of an append in process here: it waits
		e.dmu.Unlock()
		e.appendSerial(ctx, m, deadline, done)
		return
	}
	c := &dedupCall{done: make(chan struct{})}
	e.dedup[key] = c
	e.dmu.Unlock()
	end := func(a engine.Appended, err error) {
		c.res, c.err = a, err
		e.dmu.Lock()
		delete(e.dedup, key)
		e.dmu.Unlock()
		close(c.done)
		if err == errTopicGone { // t was deleted: to the topic's next incarnation, under its own claim
			done(e.appendBy(ctx, m, deadline))
			return
		}
		done(a, err)
	}
	if batched {
		e.claimBatched(ctx, m, t, key, deadline, end) // pipeline_msgid_batch.go
		return
	}
	now := e.clock.Now()
	claim, _ := json.Marshal(dedupVal{At: now})
	cctx, fin := e.onConn(ctx)
	bctx, cancel := appendBound(cctx, deadline)
	rev, err := e.dedupKV.Create(bctx, key, claim)
	if fin(err) != nil {
		// Claimed before (or the create failed): the claim says what to
		// do, by the deadline.
		cctx, fin := e.onConn(ctx)
		bctx, cancel2 := appendBound(cctx, deadline)
		a, err := e.appendClaimed(bctx, t, &m, key)
		end(a, fin(boundErr(bctx, err)))
		cancel2()
		cancel()
		return
	}
	cancel()
	e.appendPipelined(ctx, m, t, key+"."+strconv.FormatUint(rev, 10), deadline, func(a engine.Appended, err error) {
		if err == nil {
			e.confirmClaim(key, rev, now, a)
		}
		end(a, err)
	})
}

// appendFallback appends m as Append does, under claim when set (see
// appendPipelined).
func (e *Engine) appendFallback(ctx context.Context, m engine.Message, t *topic, claim string, deadline time.Time, done func(engine.Appended, error)) {
	if claim == "" {
		e.appendSerial(ctx, m, deadline, done)
		return
	}
	e.oneAtATime.Add(1)
	ctx, fin := e.onConn(ctx)
	ctx, cancel := appendBound(ctx, blockDeadline(t, deadline))
	defer cancel()
	a, seq, err := e.appendTo(ctx, t, &m, claim)
	if err == errTopicGone {
		fin(nil)
		done(engine.Appended{}, errTopicGone)
		return
	}
	if err = fin(boundErr(ctx, err)); err == nil {
		e.waitTail(ctx, seq, deadline)
	}
	done(a, err)
}

// confirmClaim records a's position in the claim of revision rev, made at
// time at. A claim left unconfirmed answers a retry only while its record
// is in the log (the retry reads it at the sequence the server's duplicate
// acknowledgement names), so a record trimmed since would leave every
// retry failing: the confirmation is skipped only past the confirmer's
// bound or on Close (pipeline_confirm.go).
//
// Confirmations share the client's asynchronous publishes (its limit is
// 2*maxPipelined) with claims, batches and other confirmations; chained
// records go through the engine's own acknowledgement inbox
// (pipeline_ack.go) and do not count: up to maxPipelined/2 publishes
// pending, it is published
// without waiting for the answer (one lost then, the node closing, is
// made good by the next repeat while the record is in the log); past
// that, it is handed to the node's confirmer, which writes it waiting for
// the answer, at most claimConfirmWait, rather than let the records'
// publishes stall. It runs on the ack reader or the appending caller, with
// no lock held, and never waits.
func (e *Engine) confirmClaim(key string, rev uint64, at time.Time, a engine.Appended) {
	if e.js.PublishAsyncPending() > maxPipelined/2 {
		e.queueConfirm(confirmReq{key: key, rev: rev, at: at, a: a}) // pipeline_confirm.go
		return
	}
	e.publishConfirm(key, rev, at, a)
}

// confirmClaimNow is confirmClaim on the confirmer: past maxPipelined/2
// publishes pending, it writes the confirmation waiting for its answer, at
// most claimConfirmWait and until ctx ends.
func (e *Engine) confirmClaimNow(ctx context.Context, key string, rev uint64, at time.Time, a engine.Appended) {
	if e.js.PublishAsyncPending() <= maxPipelined/2 {
		e.publishConfirm(key, rev, at, a)
		return
	}
	v, _ := json.Marshal(dedupVal{At: at, Done: true, Partition: a.Partition, Offset: a.Offset, Time: a.Time})
	ctx, cancel := context.WithTimeout(ctx, claimConfirmWait)
	defer cancel()
	if _, err := e.dedupKV.Update(ctx, key, v, rev); err != nil && !isWrongLast(err) {
		e.log.Warn("jsengine: dedupe record", "err", err)
	}
}

// publishConfirm publishes a claim's confirmation without waiting for its
// answer.
func (e *Engine) publishConfirm(key string, rev uint64, at time.Time, a engine.Appended) {
	v, _ := json.Marshal(dedupVal{At: at, Done: true, Partition: a.Partition, Offset: a.Offset, Time: a.Time})
	msg := nats.NewMsg("$KV." + e.prefix + "_dedupe." + key)
	msg.Data = v
	msg.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(rev, 10))
	if _, err := e.js.PublishMsgAsync(msg); err != nil {
		e.log.Debug("jsengine: dedupe record", "err", err)
	}
}

// claimConfirmWait bounds a claim's confirmation written under load.
const claimConfirmWait = 5 * time.Second
