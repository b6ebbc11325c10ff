package jsengine

// Chained records whose acknowledgements race their inbox's timeout:
// each answered once, none stored twice, offsets contiguous.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

func TestChainAcksRaceTimeout(t *testing.T) {
	url := natstest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	e, err := New(ctx, Options{URL: url, Prefix: natstest.Prefix(t, url)})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Close(ctx)
	})
	const topic, n, parts = "rvjs.acktimeout", 1200, 3
	if _, err := e.CreateTopic(context.Background(), engine.TopicConfig{Name: topic, Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	e.acks.mu.Lock()
	e.acks.timeout = 300 * time.Microsecond
	e.acks.mu.Unlock()
	type ans struct {
		a     engine.Appended
		err   error
		calls int
	}
	var mu sync.Mutex
	got := make([]ans, n)
	var wg sync.WaitGroup
	wg.Add(n)
	half := make(chan struct{})
	go func() { // exits once every record is handed to AppendAsync
		for i := range n {
			if i == n/2 {
				close(half)
			}
			e.AppendAsync(context.Background(), engine.Message{Topic: topic, Key: fmt.Sprint(i % 11), Data: []byte(fmt.Sprint(i))}, func(a engine.Appended, err error) {
				mu.Lock()
				got[i].calls++
				c := got[i].calls
				if c == 1 {
					got[i].a, got[i].err = a, err
				}
				mu.Unlock()
				if c == 1 {
					wg.Done()
				}
			})
		}
	}()
	<-half
	e.acks.mu.Lock()
	e.acks.timeout = pipelineAckTimeout
	e.acks.mu.Unlock()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }() // exits when wg is done
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("appends not answered within a minute")
	}
	stored := map[string]int{}
	at := map[string]engine.Appended{}
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	for p := range parts {
		recs, _, err := e.Read(rctx, topic, p, 0, 2*n)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range recs {
			if r.Offset != int64(i) {
				t.Fatalf("partition %d: record %d at offset %d", p, i, r.Offset)
			}
			stored[string(r.Data)]++
			at[string(r.Data)] = engine.Appended{Partition: p, Offset: r.Offset}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	failed := 0
	for i, g := range got {
		d := fmt.Sprint(i)
		switch {
		case g.calls != 1:
			t.Errorf("record %d answered %d times", i, g.calls)
		case stored[d] > 1:
			t.Errorf("record %d stored %d times", i, stored[d])
		case g.err != nil:
			failed++
		case stored[d] != 1 || at[d] != (engine.Appended{Partition: g.a.Partition, Offset: g.a.Offset}):
			t.Errorf("record %d answered at %d/%d, stored %d times at %d/%d", i, g.a.Partition, g.a.Offset, stored[d], at[d].Partition, at[d].Offset)
		}
	}
	if l := e.acks.len(); l != 0 {
		t.Errorf("%d records pending in the inbox", l)
	}
	errs := map[string][]int{}
	for i, g := range got {
		if g.err != nil {
			errs[g.err.Error()] = append(errs[g.err.Error()], i)
		}
	}
	for k, v := range errs {
		t.Logf("%d x %s: first %d last %d", len(v), k, v[0], v[len(v)-1])
	}
	t.Logf("%d of %d answered with an error (outcome unknown); %d re-appended", failed, n, e.reappends.Load())
}
