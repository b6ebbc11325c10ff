package jsengine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestListingFirstKeyHasItsOwnBound: a listing's set-up and its first
// key get roundTripMax each ("for its set-up and again for each key
// after"; the timer started before the set-up used to be reset only by a
// key, so the two shared one). Over a link slow
// enough (400 B/s) that the set-up's answer and then the bucket's one
// (long) key take a few seconds each, together just over 5 s, each within
// its bound, the listing lists the key as nats.go's own lister over the
// same link does.
func TestListingFirstKeyHasItsOwnBound(t *testing.T) {
	url := natstest.URL(t)
	bucket := natstest.Prefix(t, url) + "_one"
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = js.DeleteKeyValue(context.Background(), bucket) }()
	// A long key: its message takes about as long as the set-up's answer.
	only := "only." + strings.Repeat("k", 1200)
	if _, err := kv.Put(ctx, only, nil); err != nil {
		t.Fatal(err)
	}
	slow := newSlowLink(t, url, 400)
	raw := openBucket(t, slow.URL(), bucket)
	bounded := jsengine.BoundKV(t, openBucket(t, slow.URL(), bucket))
	done := make(chan struct{})
	var rawKeys []string
	var rawErr error
	var rawTook time.Duration
	go func() { // ends with the listing, at most at ctx's deadline
		defer close(done)
		start := time.Now()
		l, err := raw.ListKeys(ctx)
		if err != nil {
			rawErr = err
			return
		}
		for k := range l.Keys() {
			rawKeys = append(rawKeys, k)
		}
		rawTook = time.Since(start)
	}()
	start := time.Now()
	keys, err := bounded.Keys(ctx)
	took := time.Since(start)
	<-done
	t.Logf("nats.go's lister: %d keys, err %v, after %v; bounded: %d keys, err %v, after %v", len(rawKeys), rawErr, rawTook, len(keys), err, took)
	if rawErr != nil || len(rawKeys) != 1 {
		t.Fatalf("nats.go's lister over the slow link: %d keys, %v", len(rawKeys), rawErr)
	}
	if err != nil || len(keys) != 1 {
		t.Errorf("bounded listing of one key over a slow link: %d keys, err %v, after %v; want the one key (nats.go's lister had it after %v)", len(keys), err, took, rawTook)
	}
}
