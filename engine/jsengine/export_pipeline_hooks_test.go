package jsengine

// SetBeforePipelinedPublish makes AppendAsync call f before it publishes a
// chained record (with the partition's amu and the writer's wmu held).
func (e *Engine) SetBeforePipelinedPublish(f func()) { e.beforePipelinedPublish.Store(&f) }

// PublishAsyncUnanswered publishes n messages on subject through the
// engine's asynchronous publisher, leaving them pending until they are
// answered or time out.
func (e *Engine) PublishAsyncUnanswered(subject string, n int) error {
	for range n {
		if _, err := e.js.PublishAsync(subject, nil); err != nil {
			return err
		}
	}
	return nil
}

// MaxPipelined is maxPipelined.
const MaxPipelined = maxPipelined

// ScalingNow reports whether a notice of a change of the record stream's
// replicas keeps this node's appends one at a time.
func (e *Engine) ScalingNow() bool { return e.scalingNow() }

// SetBeforeSettle makes the ack reader call f before it applies each
// pipelined record's answer.
func (e *Engine) SetBeforeSettle(f func()) { e.beforeSettle.Store(&f) }
