package jsengine

// The live tail's hand-off. nats.go's consumer calls tailHandoff for each
// message of the tail, which hands it to the tail goroutine (tailLoop)
// through tailQ; the tail goroutine handles the messages one at a time, in
// the order they came (tailMsg), and announces the records as runs of an
// engine.Batch: a run ends when tailQ is empty (nothing more is at hand),
// after maxTailRun records (so that the first record of a long burst is
// not held for the whole burst), before tailMsg waits for the topic bucket,
// and when the tail stops. The gateway wakes each subscriber's writer once
// per run instead of once per record.
//
// The consumer's callback gives no sign of more messages waiting behind
// the one it hands over; the queue between it and the tail goroutine is
// what shows them: while the tail goroutine works on a record, the
// consumer hands over the messages it has already read.

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

const (
	// tailQueueLen is how many messages the consumer may hand over ahead
	// of the tail goroutine: enough for several of the consumer's pulls at
	// the rates a gateway fans out. A full queue holds the consumer back,
	// as a slow tail did when the consumer's callback did all its work.
	tailQueueLen = 256
	// maxTailRun bounds a run of announcements, so that under a steady
	// burst the records of a run wait at most for the fan-out of 63 others
	// before the subscribers' writers are woken.
	maxTailRun = 64
	// defaultTailWaitMax bounds how long an append waits for the tail to
	// announce its record (see waitTail): far longer than the tail takes
	// when it keeps up.
	defaultTailWaitMax = 5 * time.Second
)

// tailHandoff is the consumer's callback: it hands msg to the tail
// goroutine, waiting while tailQ is full, unless the engine closes.
func (e *Engine) tailHandoff(msg jetstream.Msg) {
	select {
	case e.tailQ <- msg:
	case <-e.closeCh:
	}
}

// tailLoop is the tail goroutine: it handles what the consumer hands over
// until shutdown closes tailStop, once the consumer has stopped, and tailQ
// is empty. It ends every run before it waits for the next message, so
// that no run is left open when it exits.
func (e *Engine) tailLoop() {
	defer e.wg.Done()
	run := 0 // records announced or skipped since the run's last End
	for {
		var msg jetstream.Msg
		select {
		case msg = <-e.tailQ:
		default:
			if run > 0 {
				e.tailBatch.End()
				run = 0
			}
			select {
			case msg = <-e.tailQ:
			case <-e.tailStop:
				return
			}
		}
		e.tailMsg(msg)
		if run++; run >= maxTailRun {
			e.tailBatch.End()
			run = 0
		}
	}
}
