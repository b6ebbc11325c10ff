package jsengine

// MaxTailRun is how many records the tail announces in one run at most.
const MaxTailRun = maxTailRun

// TailQueued returns how many messages the consumer has handed to the
// tail goroutine that it has not yet taken.
func (e *Engine) TailQueued() int { return len(e.tailQ) }
