package jsengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestListingFirstKeyHasItsOwnBound: a listing's set-up and its first
// key get roundTripMax each ("for its set-up and again for each key
// after"; the timer started before the set-up used to be reset only by a
// key, so the two shared one). A listing whose set-up takes 3 s and whose
// first key comes 3 s after that, each within its bound, lists the key.
func TestListingFirstKeyHasItsOwnBound(t *testing.T) {
	url := natstest.URL(t)
	bucket := natstest.Prefix(t, url) + "_one"
	ctx, kv := listingBucket(t, url, bucket)
	if _, err := kv.Put(ctx, "only", nil); err != nil {
		t.Fatal(err)
	}
	const wait = 3 * time.Second // each well within the 5 s bound, together past it
	bounded := jsengine.BoundKVSlowSetup(t, openBucket(t, url, bucket), wait, wait)
	lctx, cancel := context.WithTimeout(ctx, silentCallerWait)
	defer cancel()
	start := time.Now()
	keys, err := bounded.Keys(lctx)
	took := time.Since(start)
	if err != nil || len(keys) != 1 {
		t.Errorf("listing whose set-up and first key take %v each: %v, err %v, after %v; want the one key", wait, keys, err, took)
	}
}
