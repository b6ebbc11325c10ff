package jsengine

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// creatingJS is a JetStream whose streams and buckets are created, but
// whose creates answer "already in use" (refused: another node's create
// is in process) and whose lookups answer "not found" the first misses
// times, as a cluster's replica that has not made the stream yet does.
type creatingJS struct {
	jetstream.JetStream
	misses int

	mu     sync.Mutex // guards missed
	missed map[string]int
}

func (js *creatingJS) miss(name string) bool {
	js.mu.Lock()
	defer js.mu.Unlock()
	if js.missed[name] >= js.misses {
		return false
	}
	js.missed[name]++
	return true
}

func (js *creatingJS) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if _, err := js.JetStream.CreateStream(ctx, cfg); err != nil {
		return nil, err
	}
	return nil, jetstream.ErrStreamNameAlreadyInUse
}

func (js *creatingJS) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	if js.miss(name) {
		return nil, jetstream.ErrStreamNotFound
	}
	return js.JetStream.Stream(ctx, name)
}

func (js *creatingJS) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if _, err := js.JetStream.CreateKeyValue(ctx, cfg); err != nil {
		return nil, err
	}
	return nil, jetstream.ErrBucketExists
}

func (js *creatingJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	if js.miss("kv " + bucket) {
		return nil, jetstream.ErrBucketNotFound
	}
	return js.JetStream.KeyValue(ctx, bucket)
}

// jetStreamAt connects to the NATS server at url and returns its
// JetStream; the connection closes when the test ends.
func jetStreamAt(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// TestOpenWhileCreating: a node opening its streams and buckets while
// their creates are being replicated (its own create refused as if they
// existed, its lookups answered "not found" by a replica that has not made
// them yet) waits for them, rather than failing New with "bucket not
// found" (a fault scenario's set-up, under -race on a loaded machine).
func TestOpenWhileCreating(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	base := jetStreamAt(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	e := &Engine{js: &creatingJS{JetStream: base, misses: 3, missed: map[string]int{}}, replicas: 1,
		log: slog.New(slog.DiscardHandler)}
	s, err := e.openStream(ctx, jetstream.StreamConfig{Name: prefix + "_s", Subjects: []string{prefix + ".s.>"}})
	if err != nil {
		t.Fatalf("stream: %v", err)
	}
	if s.CachedInfo().Config.Name != prefix+"_s" {
		t.Fatalf("stream: %+v", s.CachedInfo().Config)
	}
	kv, err := e.openKV(ctx, jetstream.KeyValueConfig{Bucket: prefix + "_b"})
	if err != nil {
		t.Fatalf("bucket: %v", err)
	}
	if _, err := kv.Put(ctx, "k", []byte("v")); err != nil {
		t.Fatalf("bucket: %v", err)
	}
}

// TestOpenNotFound: a stream whose create keeps failing and that is never
// found fails the open when ctx ends (or the wait's bound), naming the
// create's error.
func TestOpenNotFound(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	base := jetStreamAt(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	e := &Engine{js: &refusingJS{JetStream: base}, replicas: 1, log: slog.New(slog.DiscardHandler)}
	start := time.Now()
	_, err := e.openStream(ctx, jetstream.StreamConfig{Name: prefix + "_s", Subjects: []string{prefix + ".s.>"}})
	if err == nil || !strings.Contains(err.Error(), "no suitable peers") {
		t.Fatalf("open: %v, want the create's error", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("open failed after %v, want when its context ended", took)
	}
}

// refusingJS refuses every create (no peers for it) and finds nothing.
type refusingJS struct{ jetstream.JetStream }

func (js *refusingJS) CreateStream(context.Context, jetstream.StreamConfig) (jetstream.Stream, error) {
	return nil, &jetstream.APIError{Code: 500, ErrorCode: 10005, Description: "no suitable peers for placement"}
}
