package jsengine

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestAckInboxReconnectMidStreamStoresOnce: the connection reconnects
// while chained records are in flight (the inbox fails them with
// nats.ErrDisconnected, their outcome unknown, while their answers may
// still come). No record is stored twice, offsets stay contiguous, and a
// record answered as stored is where its answer says. Holds.
func TestAckInboxReconnectMidStreamStoresOnce(t *testing.T) {
	e := newChainEngine(t)
	const topic, n, parts = "rvjs.reconnect", 1500, 2
	_, failed := appendsStoredOnce(t, e, topic, n, parts, 8, n/3, func() {
		if err := e.nc.ForceReconnect(); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("%d of %d answered with an error (outcome unknown); %d re-appended", failed, n, e.reappends.Load())
}

// newChainEngine is an engine on the test's NATS, closed with the test.
func newChainEngine(t *testing.T) *Engine {
	t.Helper()
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
	return e
}

// asyncAnswer is an AppendAsync call's first answer and how many times
// its done ran.
type asyncAnswer struct {
	a     engine.Appended
	err   error
	calls int
}

// appendsStoredOnce makes topic with parts partitions and hands n records
// (keys i%keys) to AppendAsync from a goroutine; once record mid is about
// to go, it runs mid on the test's goroutine. Once every record is
// answered it checks the promises: each answered once, none stored twice,
// offsets contiguous, a record answered as stored where its answer says.
// It returns the answers and how many were errors (outcome unknown).
func appendsStoredOnce(t *testing.T, e *Engine, topic string, n, parts, keys, at int, mid func()) ([]asyncAnswer, int) {
	t.Helper()
	if _, err := e.CreateTopic(context.Background(), engine.TopicConfig{Name: topic, Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	got := make([]asyncAnswer, n)
	var wg sync.WaitGroup
	wg.Add(n)
	reached := make(chan struct{})
	go func() { // exits once every record is handed to AppendAsync
		for i := range n {
			if i == at {
				close(reached)
			}
			e.AppendAsync(context.Background(), engine.Message{Topic: topic, Key: fmt.Sprint(i % keys), Data: []byte(fmt.Sprint(i))}, func(a engine.Appended, err error) {
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
	<-reached
	mid()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }() // exits when wg is done
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("appends not answered within a minute")
	}
	stored := map[string]int{}
	where := map[string]engine.Appended{}
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	for p := range parts {
		recs, _, err := e.Read(rctx, topic, p, 0, 2*n)
		for err != nil && rctx.Err() == nil { // the connection may still be coming back
			select {
			case <-time.After(20 * time.Millisecond): // a pause between tries, not a wait for an event
			case <-rctx.Done():
			}
			recs, _, err = e.Read(rctx, topic, p, 0, 2*n)
		}
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range recs {
			if r.Offset != int64(i) {
				t.Fatalf("partition %d: record %d at offset %d", p, i, r.Offset)
			}
			stored[string(r.Data)]++
			where[string(r.Data)] = engine.Appended{Partition: p, Offset: r.Offset}
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
		case stored[d] != 1 || where[d] != (engine.Appended{Partition: g.a.Partition, Offset: g.a.Offset}):
			t.Errorf("record %d answered at %d/%d, stored %d times at %d/%d", i, g.a.Partition, g.a.Offset, stored[d], where[d].Partition, where[d].Offset)
		}
	}
	return append([]asyncAnswer(nil), got...), failed
}
