package jsengine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestListingCutMidwayAnswersInBound: a listing whose link
// goes silent after its set-up, keys part delivered, is cut by its bound
// 5 s after its last key and answers then, unavailable. It used to answer
// up to 5 s later (about 10 s): the listing stopped its watcher with
// nats.go's Unsubscribe, which deletes the watcher's consumer in a round
// trip of its own, on the JetStream context's wait (5 s) and outside the
// listing's bound, whenever that Unsubscribe comes before the one
// nats.go's context goroutine makes when the bound ends the listing's
// context (about one time in three); so eight listings are made at once,
// each on its own connection.
func TestListingCutMidwayAnswersInBound(t *testing.T) {
	url := natstest.URL(t)
	bucket := natstest.Prefix(t, url) + "_many"
	ctx, kv := listingBucket(t, url, bucket)
	const keys = 2000
	for i := range keys {
		if _, err := kv.Put(ctx, fmt.Sprintf("k.%d", i), nil); err != nil {
			t.Fatal(err)
		}
	}
	// Each connection's server-to-client direction goes silent after
	// 64 KB: its handshake, the listing's set-up and some of its keys.
	link := newFreezingLink(t, url, 0, 64<<10)
	const listings = 8
	handles := make([]jetstream.KeyValue, listings)
	for i := range handles {
		handles[i] = jsengine.BoundKV(t, openBucket(t, link.URL(), bucket))
	}
	var wg sync.WaitGroup
	for i, h := range handles {
		wg.Add(1)
		go func() { // ends with its listing, at most at ctx's deadline
			defer wg.Done()
			lctx, cancel := context.WithTimeout(ctx, silentCallerWait)
			defer cancel()
			start := time.Now()
			_, err := h.ListKeys(lctx)
			took := time.Since(start)
			t.Logf("listing %d: %v after %v", i, err, took)
			if !errors.Is(err, engine.ErrUnavailable) {
				t.Errorf("listing %d over a link gone silent midway: %v after %v, want unavailable", i, err, took)
			}
			if took > silentOneTrip {
				t.Errorf("listing %d over a link gone silent midway: answered after %v of its caller's %v, want within %v (5 s after its last key)", i, took, silentCallerWait, silentOneTrip)
			}
		}()
	}
	wg.Wait()
}
