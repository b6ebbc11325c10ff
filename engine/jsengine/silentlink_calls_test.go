package jsengine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestCallsOverSilentLinkAreBounded: every call whose request goes
// unanswered while the engine's connection stays up fails with
// engine.ErrUnavailable within one round trip's bound (5 s), even when
// its context would let it wait longer. DeadLetters waited for its
// context (the fault scenario lossy-gateway-links: "dead letters:
// engine: unavailable: context deadline exceeded" after a minute, one
// request lost while the gateway's links reset).
func TestCallsOverSilentLinkAreBounded(t *testing.T) {
	url := natstest.URL(t)
	px := newLinkProxy(t, url)
	e := newNode(t, nodeOpts{url: px.URL(), prefix: natstest.Prefix(t, url)})
	ctx := context.Background()
	const topic = "silent"
	if _, err := e.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"warm"`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.DeadLetters(ctx, engine.DeadLetterFilter{}); err != nil {
		t.Fatal(err)
	}
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"DeadLetters", func(ctx context.Context) error {
			_, err := e.DeadLetters(ctx, engine.DeadLetterFilter{})
			return err
		}},
		{"Topic", func(ctx context.Context) error { _, err := e.Topic(ctx, "other"); return err }},
		{"Read", func(ctx context.Context) error { _, _, err := e.Read(ctx, topic, 0, 0, 10); return err }},
	}
	px.Stall()
	defer px.Resume()
	type result struct {
		name string
		took time.Duration
		err  error
	}
	results := make(chan result, len(calls))
	for _, c := range calls {
		go func() { // ends with its call, at most when cctx does
			cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			start := time.Now()
			err := c.call(cctx)
			results <- result{c.name, time.Since(start), err}
		}()
	}
	for range calls {
		r := <-results
		// nil: answered from what the node holds, without a round trip.
		if r.err != nil && !errors.Is(r.err, engine.ErrUnavailable) {
			t.Errorf("%s over a silent link: %v after %v, want engine.ErrUnavailable", r.name, r.err, r.took)
		}
		if r.took > 8*time.Second {
			t.Errorf("%s over a silent link: answered after %v, want within about 5 s", r.name, r.took)
		}
	}
}
