package jsengine

import "time"

// MaxTailRun is how many records the tail announces in one run at most.
const MaxTailRun = maxTailRun

// TailQueued returns how many messages the consumer has handed to the
// tail goroutine that it has not yet taken.
func (e *Engine) TailQueued() int { return len(e.tailQ) }

// SetTailWaitMax sets how long an append waits for a stalled tail (see
// waitTail). Call it before any append.
func (e *Engine) SetTailWaitMax(d time.Duration) { e.tailWaitMax = d }

// TailGiveUps returns how many appends stopped waiting for the tail
// because it did not announce their record within the tail wait.
func (e *Engine) TailGiveUps() int64 { return e.tailGiveUps.Load() }
