package jsengine

// Claim confirmations written waiting for their answers, off the ack
// reader.
//
// A stored record's claim is confirmed (confirmClaim, pipeline_msgid.go)
// without waiting while up to maxPipelined/2 of the node's asynchronous
// publishes are pending; past that, a confirmation is written waiting for
// its answer, for up to claimConfirmWait, rather than let the records'
// publishes stall. That wait is never the ack reader's (nor an appending
// caller's): such confirmations are queued, in the order their records
// were stored, for the node's confirmer, a goroutine counted in the
// engine's lifecycle, started when one is queued with none running and
// exiting when the queue is empty or the engine closes (Close waits for
// it, at most claimConfirmWait). So a silent link holds no record's
// answer past its deadline (appendMax).
//
// The queue holds at most confirmQueueMax confirmations; one past it, and
// those still queued when the engine closes, are dropped (counted in
// confirmsDropped, logged): the claim is left unconfirmed, as after a
// lost publish, and the next repeat of its MsgID is answered from the
// record while it is in the log (appendClaimed).
//
// Lock order: the queue is guarded by Engine.wmu (pipeline.go); no round
// trip is made under it.

import (
	"context"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// confirmQueueMax bounds the claim confirmations waiting for the
// confirmer: as many as the node's pipelined records in flight.
const confirmQueueMax = maxPipelined

// confirmReq is one claim confirmation waiting for the confirmer: the
// claim's key, revision and time, and its record's position.
type confirmReq struct {
	key string
	rev uint64
	at  time.Time
	a   engine.Appended
}

// queueConfirm hands a confirmation to the confirmer, starting it when
// none runs. It never waits. No lock is held.
func (e *Engine) queueConfirm(c confirmReq) {
	e.wmu.Lock()
	if len(e.w.confirms) >= confirmQueueMax || e.closed.Load() {
		e.wmu.Unlock()
		e.confirmsDropped.Add(1)
		e.log.Warn("jsengine: dedupe record dropped: too many confirmations waiting", "key", c.key)
		return
	}
	e.w.confirms = append(e.w.confirms, c)
	start := !e.w.confirming
	e.w.confirming = true
	e.wmu.Unlock()
	if !start {
		return
	}
	if !e.life.Enter() {
		e.wmu.Lock()
		n := len(e.w.confirms)
		e.w.confirms, e.w.confirming = nil, false
		e.wmu.Unlock()
		e.confirmsDropped.Add(int64(n))
		return
	}
	go func() { // exits when the queue is empty or the engine closes
		defer e.life.Exit()
		e.runConfirms()
	}()
}

// runConfirms writes the queued confirmations in order, each by
// confirmClaimNow (waiting at most claimConfirmWait, and not past Close).
func (e *Engine) runConfirms() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stop := make(chan struct{})
	defer close(stop)
	go func() { // exits when runConfirms returns or the engine closes
		select {
		case <-e.closeCh:
			cancel()
		case <-stop:
		}
	}()
	for {
		e.wmu.Lock()
		if len(e.w.confirms) == 0 || e.closed.Load() {
			n := len(e.w.confirms)
			e.w.confirms, e.w.confirming = nil, false
			e.wmu.Unlock()
			if n > 0 {
				e.confirmsDropped.Add(int64(n))
				e.log.Debug("jsengine: dedupe records dropped: engine closed", "n", n)
			}
			return
		}
		c := e.w.confirms[0]
		e.w.confirms[0] = confirmReq{}
		e.w.confirms = e.w.confirms[1:]
		e.wmu.Unlock()
		e.confirmClaimNow(ctx, c.key, c.rev, c.at, c.a)
	}
}
