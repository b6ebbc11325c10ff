package jsengine

// SetBeforeDeadLetterStore makes the letter writer call f before it
// publishes each max_attempts letter.
func (e *Engine) SetBeforeDeadLetterStore(f func()) { e.dlb.beforeStore.Store(&f) }

// SetBeforeCloseWaitsLetter makes Close call f when it waits for a letter
// being stored.
func (e *Engine) SetBeforeCloseWaitsLetter(f func()) { e.beforeCloseWaitsLetter.Store(&f) }

// SetBeforeBatchResend makes the ack reader call f before it sends a
// refused batch again (after reloading the partition's state).
func (e *Engine) SetBeforeBatchResend(f func()) { e.beforeBatchResend.Store(&f) }

// SetBeforeBatchSend makes a batch whose first record has a MsgID call f
// before it is first published.
func (e *Engine) SetBeforeBatchSend(f func()) { e.beforeBatchSend.Store(&f) }

// Unavailable is how the engine words a failed NATS call of op.
func Unavailable(op string, err error) error { return unavailable(op, err) }
