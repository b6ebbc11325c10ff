package jsengine_test

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// BenchmarkAppendAsyncMsgID: one producer (as a WebSocket session's
// reader) calls AppendAsync with a new MsgID per record into a
// one-partition topic, and waits for every answer at the end.
func BenchmarkAppendAsyncMsgID(b *testing.B) {
	url := natstest.URL(b)
	e := newNode(b, nodeOpts{url: url, prefix: natstest.Prefix(b, url)})
	if _, err := e.CreateTopic(b.Context(), engine.TopicConfig{Name: "bench", Partitions: 1, MaxMessages: 1 << 20}); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	var failed atomic.Int64
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		wg.Add(1)
		e.AppendAsync(b.Context(), engine.Message{Topic: "bench", MsgID: "m" + strconv.Itoa(i), Data: payload}, func(_ engine.Appended, err error) {
			if err != nil {
				failed.Add(1)
			}
			wg.Done()
		})
		i++
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d appends failed", n)
	}
}
