package jsengine

// SetBeforeDeadLetterStore makes the letter writer call f before it
// publishes each max_attempts letter.
func (e *Engine) SetBeforeDeadLetterStore(f func()) { e.dlb.beforeStore.Store(&f) }
