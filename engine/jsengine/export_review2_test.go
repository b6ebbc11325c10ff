package jsengine

// SetBeforePipelinedPublish makes AppendAsync call f before it publishes a
// chained record (with the partition's amu and the writer's wmu held).
func (e *Engine) SetBeforePipelinedPublish(f func()) { e.beforePipelinedPublish.Store(&f) }
