package jsengine_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestPipelinedMaxAge: appends to a topic with a MaxAge pipeline while
// its oldest record has not expired; the first append after it expired
// goes one at a time and trims the partition, and the appends after it
// pipeline again. Offsets stay contiguous throughout.
func TestPipelinedMaxAge(t *testing.T) {
	url := natstest.URL(t)
	clock := enginetest.NewFakeClock(time.Unix(1_700_000_000, 0))
	e := newNode(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Clock: clock}})
	const topic = "pipe.aged"
	if _, err := e.CreateTopic(t.Context(), engine.TopicConfig{Name: topic, Partitions: 1, MaxAge: time.Minute}); err != nil {
		t.Fatal(err)
	}
	next := int64(0)
	burst := func(n int) {
		t.Helper()
		var wg sync.WaitGroup
		var mu sync.Mutex
		var firstErr error
		last := next - 1
		wg.Add(n)
		for i := range n {
			e.AppendAsync(t.Context(), engine.Message{Topic: topic, Data: []byte(strconv.Itoa(i))}, func(a engine.Appended, err error) {
				mu.Lock()
				if err == nil && a.Offset != last+1 {
					err = fmt.Errorf("append %d at offset %d after %d", i, a.Offset, last)
				}
				if err != nil && firstErr == nil {
					firstErr = err
				}
				last = a.Offset
				mu.Unlock()
				wg.Done()
			})
		}
		waitGroup(t, &wg)
		if firstErr != nil {
			t.Fatal(firstErr)
		}
		next += int64(n)
	}
	burst(200)
	if p := e.Pipelined(); p < 150 {
		t.Fatalf("%d of 200 appends to a MaxAge topic were pipelined", p)
	}
	clock.Advance(2 * time.Minute) // every record expired
	before := e.OneAtATime()
	burst(100)
	if n := e.OneAtATime() - before; n < 1 || n > 10 {
		t.Errorf("%d appends after the expiry went one at a time, want the first few", n)
	}
	info, err := e.Topic(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if o := info.Parts[0]; o.Earliest < 200 || o.Next != 300 {
		t.Errorf("partition holds offsets %d..%d after the expiry, want from 200 to 300", o.Earliest, o.Next)
	}
	if p := e.Pipelined(); p < 240 {
		t.Errorf("%d appends pipelined in all, want most of the 300", p)
	}
}

// waitGroup waits for wg for at most a minute.
func waitGroup(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }() // exits when wg is done
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("appends not answered within a minute")
	}
}
