package jsengine_test

import (
	"sync"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// BenchmarkAppendAsync pipelines records from one producer into a
// one-partition topic of a single-server stream (the chain of
// pipeline.go): the WebSocket publish path. Its allocations per record
// show what the path costs the heap (a record's deadline, for one, is a
// time in its pend, not a context).
func BenchmarkAppendAsync(b *testing.B) {
	url := natstest.URL(b)
	e := newNode(b, nodeOpts{url: url, prefix: natstest.Prefix(b, url)})
	if _, err := e.CreateTopic(b.Context(), engine.TopicConfig{Name: "bench.async", Partitions: 1, MaxMessages: 1 << 22}); err != nil {
		b.Fatal(err)
	}
	m := engine.Message{Topic: "bench.async", Data: payload}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	done := func(_ engine.Appended, err error) {
		if err != nil {
			mu.Lock()
			firstErr = err
			mu.Unlock()
		}
		wg.Done()
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		wg.Add(1)
		e.AppendAsync(b.Context(), m, done)
	}
	wg.Wait()
	if firstErr != nil {
		b.Fatal(firstErr)
	}
}
