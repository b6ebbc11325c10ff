package jsengine

// Batches is how many atomic batches this engine published into a
// replicated stream, counting each one sent again after a refusal.
func (e *Engine) Batches() int64 { return e.batches.Load() }
