package memengine_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/memengine"
)

type ctxKey struct{}

// ctxObserver records the context value AppendedContext sees.
type ctxObserver struct {
	plain, withCtx atomic.Int32
	seen           atomic.Value // the ctxKey value of the last AppendedContext
}

func (o *ctxObserver) Appended(*engine.Record) { o.plain.Add(1) }
func (o *ctxObserver) TopicDeleted(string)     {}
func (o *ctxObserver) AppendedContext(ctx context.Context, _ *engine.Record) {
	o.withCtx.Add(1)
	o.seen.Store(ctx.Value(ctxKey{}))
}

// TestAppendedContext: an observer with AppendedContext is told of each
// record with the context of the Append that stored it.
func TestAppendedContext(t *testing.T) {
	e := memengine.New(memengine.Options{})
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	o := &ctxObserver{}
	defer e.Watch(o)()
	ctx := context.WithValue(context.Background(), ctxKey{}, "publisher-1")
	if _, err := e.Append(ctx, engine.Message{Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	if o.withCtx.Load() != 1 || o.plain.Load() != 0 || o.seen.Load() != "publisher-1" {
		t.Fatalf("AppendedContext %d, Appended %d, value %v", o.withCtx.Load(), o.plain.Load(), o.seen.Load())
	}
}

// TestBlockWaitRunsHook: an Append that waits for room in a full Block
// partition calls its context's wait hook first, so that what its caller
// deferred is not held for the wait.
func TestBlockWaitRunsHook(t *testing.T) {
	clock := enginetest.NewFakeClock(time.Unix(0, 0))
	e := memengine.New(memengine.Options{Clock: clock, Policy: engine.GroupPolicy{AckTimeout: time.Minute}})
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	ctx := context.Background()
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: "t", MaxMessages: 1, OnFull: engine.Block, BlockTimeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "t"}, &counter{}); err != nil {
		t.Fatal(err)
	}
	hooked := make(chan struct{}, 2)
	hctx := engine.WithWaitHook(ctx, func() { hooked <- struct{}{} })
	if _, err := e.Append(hctx, engine.Message{Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	if len(hooked) != 0 {
		t.Fatal("hook ran for an append with room")
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.Append(hctx, engine.Message{Topic: "t"})
		done <- err
	}()
	select {
	case <-hooked:
	case <-time.After(5 * time.Second):
		t.Fatal("the blocked Append did not run the hook")
	}
	if !clock.WaitForTimers(2, 5*time.Second) {
		t.Fatal("blocked Append set no timer")
	}
	clock.Advance(time.Second)
	<-done
}
