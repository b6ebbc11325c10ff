package jsengine

import (
	"context"

	"github.com/switchyard/switchyard/engine"
)

var _ engine.AsyncAppender = (*Engine)(nil)

// AppendAsync implements engine.AsyncAppender.
func (e *Engine) AppendAsync(ctx context.Context, m engine.Message, done func(engine.Appended, error)) {
	done(e.Append(ctx, m))
}
