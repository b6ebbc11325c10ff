package jsengine

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// hookedDeletes is the dead-letter stream's handle with f called before
// each DeleteMsg.
type hookedDeletes struct {
	jetstream.Stream
	f func()
}

func (h hookedDeletes) DeleteMsg(ctx context.Context, seq uint64) error {
	h.f()
	return h.Stream.DeleteMsg(ctx, seq)
}

// SetBeforeDeadLetterDelete has f called before each removal of a stored
// dead letter. Set it before the engine stores or reads a letter.
func (e *Engine) SetBeforeDeadLetterDelete(f func()) { e.dl = hookedDeletes{e.dl, f} }

// hookedKVDeletes is a bucket's handle with f called before each Delete.
type hookedKVDeletes struct {
	jetstream.KeyValue
	f func()
}

func (h hookedKVDeletes) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	h.f()
	return h.KeyValue.Delete(ctx, key, opts...)
}

// SetBeforeTopicDelete has f called before each removal of a topic from
// the topic bucket. Set it before the engine is used.
func (e *Engine) SetBeforeTopicDelete(f func()) { e.topicKV = hookedKVDeletes{e.topicKV, f} }
