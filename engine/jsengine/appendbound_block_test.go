package jsengine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestBlockWaitOutlastsTheAppendBound: the bound on one append
// (jsengine.AppendMax) spares a Block topic's wait for space, which is
// meant to last up to the topic's BlockTimeout: an append to a full Block
// topic whose BlockTimeout is longer than the bound fails with
// engine.ErrBackpressure once that timeout has passed, not with
// engine.ErrUnavailable at the bound.
func TestBlockWaitOutlastsTheAppendBound(t *testing.T) {
	url := natstest.URL(t)
	e := newNode(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url)})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "block.bound"
	blockFor := jsengine.AppendMax + time.Second
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 1, MaxMessages: 1, OnFull: engine.Block, BlockTimeout: blockFor}); err != nil {
		t.Fatal(err)
	}
	m := joinManual(t, ctx, e, "g", topic, "m") // reads the topic and never acks
	if _, err := e.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"first"`)}); err != nil {
		t.Fatal(err)
	}
	m.next(t, 20*time.Second)
	start := time.Now()
	_, err := e.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"second"`)})
	took := time.Since(start)
	if !errors.Is(err, engine.ErrBackpressure) || errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("append to a full Block topic: %v after %v, want engine.ErrBackpressure (not unavailable)", err, took)
	}
	if took < blockFor-time.Second {
		t.Errorf("append to a full Block topic failed after %v, want about its block timeout %v", took, blockFor)
	}
}
