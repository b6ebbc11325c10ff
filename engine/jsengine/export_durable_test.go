package jsengine

// Batches is how many atomic batches this engine published into a
// replicated stream, counting each one sent again after a refusal.
func (e *Engine) Batches() int64 { return e.batches.Load() }

// Pipelined is how many records this engine published without waiting
// for the one before (chained or batched).
func (e *Engine) Pipelined() int64 { return e.pipelined.Load() }
