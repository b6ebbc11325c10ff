package jsengine

// Bounded reads. Every bucket and stream handle the engine keeps (openKV,
// openStream) is wrapped so that each of its reads (a bucket's Get and
// GetRevision; a stream's GetMsg, GetLastMsgForSubject and Info) gets the
// lesser of its caller's context and roundTripMax (roundTrip): a read
// lost on a link that reset or went silent while the connection stayed up
// (or came back) fails unavailable within the bound instead of waiting
// out a long caller's context, whatever the call site, and a read is
// safe to make again. Writes keep their caller's context: a write cut
// short may still land later (a delete held on a stalled link), and the
// callers that write and then act on the outcome (a redrive removing a
// letter before appending it, a topic's delete before its purge) are
// given the time their caller allows. Listings, watches and consumers are
// left as they are.

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// boundedKV is a bucket handle whose round trips are bounded.
type boundedKV struct{ jetstream.KeyValue }

func boundKV(kv jetstream.KeyValue) jetstream.KeyValue {
	if kv == nil {
		return nil
	}
	if _, ok := kv.(boundedKV); ok {
		return kv
	}
	return boundedKV{kv}
}

func (b boundedKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	ctx, cancel := roundTrip(ctx)
	defer cancel()
	return b.KeyValue.Get(ctx, key)
}

func (b boundedKV) GetRevision(ctx context.Context, key string, revision uint64) (jetstream.KeyValueEntry, error) {
	ctx, cancel := roundTrip(ctx)
	defer cancel()
	return b.KeyValue.GetRevision(ctx, key, revision)
}

// boundedStream is a stream handle whose round trips are bounded.
type boundedStream struct{ jetstream.Stream }

func boundStream(s jetstream.Stream) jetstream.Stream {
	if s == nil {
		return nil
	}
	if _, ok := s.(boundedStream); ok {
		return s
	}
	return boundedStream{s}
}

func (b boundedStream) Info(ctx context.Context, opts ...jetstream.StreamInfoOpt) (*jetstream.StreamInfo, error) {
	ctx, cancel := roundTrip(ctx)
	defer cancel()
	return b.Stream.Info(ctx, opts...)
}

func (b boundedStream) GetMsg(ctx context.Context, seq uint64, opts ...jetstream.GetMsgOpt) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := roundTrip(ctx)
	defer cancel()
	return b.Stream.GetMsg(ctx, seq, opts...)
}

func (b boundedStream) GetLastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	ctx, cancel := roundTrip(ctx)
	defer cancel()
	return b.Stream.GetLastMsgForSubject(ctx, subject)
}
