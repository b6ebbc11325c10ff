package jsengine

// Bounded round trips. Every bucket and stream handle the engine keeps
// (openKV, openStream) is wrapped so that each of its reads gets the
// lesser of its caller's context and roundTripMax (roundTrip): a read
// lost on a link that reset or went silent while the connection stayed up
// (or came back) fails unavailable within the bound instead of waiting
// out a long caller's context, whatever the call site, and a read is
// safe to make again. The reads are a bucket's Get, GetRevision and
// Status; a stream's GetMsg, GetLastMsgForSubject and Info; and a
// consumer's info (Consumer).
//
// Listings. A bucket's ListKeys, ListKeysFiltered and Keys list through
// one watcher (listKeys) that gets roundTripMax for its set-up and again
// for each key after, so a long listing that keeps coming is not cut,
// and one that stops coming is; a listing that does not reach its end
// fails (wrapping engine.ErrUnavailable when the bound cut it) instead
// of handing back part of the keys, as nats.go's lister does when its
// context ends, which a caller cannot tell from the whole.
//
// Consumers. Three consumer calls are bounded although they write,
// because a late landing is harmless: an ordered consumer's creation
// (OrderedConsumer) and an ephemeral consumer's, or one with an inactive
// threshold (CreateConsumer), make a consumer that the server removes
// once idle for its threshold (an ordered consumer's is 5 minutes, an
// ephemeral's 5 s by default), and a deletion (DeleteConsumer) landing
// late removes what its caller wanted removed; a caller that tries again
// is told the consumer is gone. A durable consumer's creation without a
// threshold, and every update (UpdateConsumer, CreateOrUpdateConsumer,
// which may land after a later update and undo it), keep their caller's
// context: a durable made late would stay for good.
//
// Writes keep their caller's context: a write cut short may still land
// later (a delete held on a stalled link), and the callers that write
// and then act on the outcome (a redrive removing a letter before
// appending it, a topic's delete before its purge) are given the time
// their caller allows. Watches are set up by watch (watch.go), which
// bounds their set-up by roundTripMax itself, since a watcher's context
// must outlive it. A stream's consumer listings (ListConsumers,
// ConsumerNames) page in nats.go's goroutine on their caller's context
// and are left as they are: the engine makes none.

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/lifecycle"
)

// boundedKV is a bucket handle whose reads and listings are bounded.
// life, the engine's, owns the goroutines that stop a listing's watcher
// (stopWatch); nil stops it in the caller.
type boundedKV struct {
	jetstream.KeyValue
	life *lifecycle.Guard
	// setupWaits, set by tests only, wait in a listing just before and
	// just after its watcher's set-up, as a slow link would.
	setupWaits *[2]func()
}

func boundKV(kv jetstream.KeyValue, life *lifecycle.Guard) jetstream.KeyValue {
	if kv == nil {
		return nil
	}
	if _, ok := kv.(boundedKV); ok {
		return kv
	}
	return boundedKV{KeyValue: kv, life: life}
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

func (b boundedKV) Status(ctx context.Context) (jetstream.KeyValueStatus, error) {
	ctx, cancel := roundTrip(ctx)
	defer cancel()
	return b.KeyValue.Status(ctx)
}

// ListKeys lists every key (see listKeys); the lister it returns holds
// them all.
func (b boundedKV) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	keys, err := b.listKeys(ctx, nil, opts...)
	if err != nil {
		return nil, err
	}
	return listedKeys(keys), nil
}

// ListKeysFiltered lists the keys matching filters (see listKeys); the
// lister it returns holds them all.
func (b boundedKV) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	keys, err := b.listKeys(ctx, filters)
	if err != nil {
		return nil, err
	}
	return listedKeys(keys), nil
}

// Keys lists every key once, sorted (see listKeys), failing with
// jetstream.ErrNoKeysFound when there is none.
func (b boundedKV) Keys(ctx context.Context, opts ...jetstream.WatchOpt) ([]string, error) {
	keys, err := b.listKeys(ctx, nil, opts...)
	if err != nil {
		return nil, err
	}
	if len(keys) == 0 {
		return nil, jetstream.ErrNoKeysFound
	}
	slices.Sort(keys)
	return slices.Compact(keys), nil
}

// errListingStalled is the cause of a listing's context ending when no
// key, nor its end, came within roundTripMax (listKeys).
var errListingStalled = fmt.Errorf("listing not answered within %v: %w", roundTripMax, engine.ErrUnavailable)

// listKeys returns the keys matching filters (every key without),
// deleted keys left out, as a watcher of their latest values sees them.
// The watcher's set-up, and the wait for each key after it, get
// roundTripMax each within ctx; past it the listing fails with an error
// wrapping errListingStalled. It returns only a listing that reached its
// end.
func (b boundedKV) listKeys(ctx context.Context, filters []string, opts ...jetstream.WatchOpt) ([]string, error) {
	lctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stall := time.AfterFunc(roundTripMax, func() { cancel(errListingStalled) })
	defer stall.Stop()
	// Deleted and purged keys are skipped here, not by the watcher
	// (IgnoreDeletes), so that each counts as the listing moving: a
	// bucket's deleted keys after its last live one still arrive.
	opts = append(slices.Clip(opts), jetstream.MetaOnly())
	if b.setupWaits != nil {
		b.setupWaits[0]()
	}
	// WatchFiltered writes the bucket's prefix into the filters it is given.
	kw, err := b.KeyValue.WatchFiltered(lctx, slices.Clone(filters), opts...)
	if err != nil {
		return nil, listErr(lctx, err)
	}
	stall.Reset(roundTripMax) // the set-up was answered; the first key gets its own bound
	if b.setupWaits != nil {
		b.setupWaits[1]()
	}
	defer stopWatch(b.life, &kvWatch{kw, func() { cancel(nil) }})
	var keys []string
	for {
		if lctx.Err() != nil { // past the bound, even with keys at hand
			return nil, listErr(lctx, context.Cause(lctx))
		}
		select {
		case ent, ok := <-kw.Updates():
			switch {
			case !ok:
				return nil, listErr(lctx, fmt.Errorf("listing ended before its last key"))
			case ent == nil:
				return keys, nil
			}
			if ent.Operation() == jetstream.KeyValuePut {
				keys = append(keys, ent.Key())
			}
			stall.Reset(roundTripMax)
		case <-lctx.Done():
			return nil, listErr(lctx, context.Cause(lctx))
		}
	}
}

// stopWatch stops w: in a goroutine life owns when life is open, since
// nats.go deletes a watcher's consumer in a round trip of its own (up to
// 5 s over a link gone silent) that a listing's caller need not wait for;
// otherwise at once.
func stopWatch(life *lifecycle.Guard, w *kvWatch) {
	if life != nil && life.Enter() {
		go func() { // exits once w is stopped (bounded: stop's two 5 s waits)
			defer life.Exit()
			w.stop()
		}()
		return
	}
	w.stop()
}

// listErr returns err wrapping errListingStalled when the listing's
// context (lctx) was ended by its bound.
func listErr(lctx context.Context, err error) error {
	if cause := context.Cause(lctx); cause == errListingStalled && err != cause {
		return fmt.Errorf("%w: %w", cause, err)
	}
	return err
}

// listedKeys is a KeyLister over keys already listed.
type listedKeys []string

func (l listedKeys) Keys() <-chan string {
	ch := make(chan string, len(l))
	for _, k := range l {
		ch <- k
	}
	close(ch)
	return ch
}

func (l listedKeys) Stop() error { return nil }

// boundedStream is a stream handle whose reads and harmless consumer
// calls are bounded.
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

// Consumer reads a consumer's info.
func (b boundedStream) Consumer(ctx context.Context, name string) (jetstream.Consumer, error) {
	ctx, cancel := roundTrip(ctx)
	defer cancel()
	return b.Stream.Consumer(ctx, name)
}

// OrderedConsumer makes an ordered consumer, which has an inactive
// threshold (5 minutes unless its configuration says otherwise): one
// made after its caller gave up is removed by the server once idle that
// long. The context is used only for the creation.
func (b boundedStream) OrderedConsumer(ctx context.Context, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	ctx, cancel := roundTrip(ctx)
	defer cancel()
	return b.Stream.OrderedConsumer(ctx, cfg)
}

// CreateConsumer is bounded for a consumer the server removes once idle
// (an ephemeral one, or one with an inactive threshold), so one made
// after its caller gave up goes by itself; a durable one without a
// threshold keeps its caller's context, since it would stay for good.
func (b boundedStream) CreateConsumer(ctx context.Context, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	if cfg.Durable == "" || cfg.InactiveThreshold > 0 {
		var cancel context.CancelFunc
		ctx, cancel = roundTrip(ctx)
		defer cancel()
	}
	return b.Stream.CreateConsumer(ctx, cfg)
}

// DeleteConsumer is bounded: a deletion landing after its caller gave up
// removes what the caller wanted removed, and a retry is told the
// consumer is gone (jetstream.ErrConsumerNotFound).
func (b boundedStream) DeleteConsumer(ctx context.Context, name string) error {
	ctx, cancel := roundTrip(ctx)
	defer cancel()
	return b.Stream.DeleteConsumer(ctx, name)
}
