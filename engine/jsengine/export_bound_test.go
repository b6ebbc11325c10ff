package jsengine

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// hookedListings is a bucket's handle with f called before each listing
// of its keys.
type hookedListings struct {
	jetstream.KeyValue
	f func()
}

func (h hookedListings) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	h.f()
	return h.KeyValue.ListKeys(ctx, opts...)
}

func (h hookedListings) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	h.f()
	return h.KeyValue.ListKeysFiltered(ctx, filters...)
}

func (h hookedListings) Keys(ctx context.Context, opts ...jetstream.WatchOpt) ([]string, error) {
	h.f()
	return h.KeyValue.Keys(ctx, opts...)
}

// SetBeforeGroupListing has f called before each listing of the group
// bucket's keys by a call (DeleteTopic, DeleteGroup). Set it before the
// engine is used.
func (e *Engine) SetBeforeGroupListing(f func()) { e.groupKV = hookedListings{e.groupKV, f} }

// RestartTail stops the live tail's consumer, deletes it and makes
// another, as the heartbeat does for a tail stopped behind the stream.
func (e *Engine) RestartTail(ctx context.Context) error { return e.restartTail(ctx) }

// WatchTopicBucket sets up a watcher of the topic bucket as New and the
// watch loops do, stops it, and returns the error of its set-up as New
// would report it.
func (e *Engine) WatchTopicBucket() error {
	w, err := e.watch(e.topicKV, 0)
	if err != nil {
		return unavailable("watch", err)
	}
	w.stop()
	return nil
}

// RecordStream is the record stream's handle as the engine's calls use it.
func (e *Engine) RecordStream() jetstream.Stream { return e.rec }
