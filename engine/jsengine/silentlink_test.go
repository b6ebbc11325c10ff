package jsengine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestAppendOverSilentLinkIsBounded: an append whose request goes
// unanswered while the engine's connection stays up (the link went
// silent; in a cluster the request can reach the stream's former leader
// after the heal and be dropped, so no reply ever comes) fails with
// engine.ErrUnavailable within one round trip's bound (5 s), even when
// its context would let it wait longer. It waited for its context before
// (the faults package's TestEngineAppendsDuringLeaderIsolation: 17.7 s,
// "jsengine: append: context canceled").
func TestAppendOverSilentLinkIsBounded(t *testing.T) {
	url := natstest.URL(t)
	px := newLinkProxy(t, url)
	e := newNode(t, nodeOpts{url: px.URL(), prefix: natstest.Prefix(t, url)})
	ctx := context.Background()
	const topic = "silent"
	for _, id := range []string{"", "warm"} { // the topic and its partition known, the claim path taken once
		if _, err := e.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"warm"`), MsgID: id}); err != nil {
			t.Fatal(err)
		}
	}
	px.Stall()
	defer px.Resume()
	type result struct {
		msgID string
		took  time.Duration
		err   error
	}
	results := make(chan result, 2)
	for _, id := range []string{"", "m"} {
		go func() { // ends with its append, at most when actx does
			actx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			start := time.Now()
			_, err := e.Append(actx, engine.Message{Topic: topic, Data: []byte(`"x"`), MsgID: id})
			results <- result{id, time.Since(start), err}
		}()
	}
	for range 2 {
		r := <-results
		what := fmt.Sprintf("append (msg_id %q) over a silent link", r.msgID)
		if !errors.Is(r.err, engine.ErrUnavailable) {
			t.Errorf("%s: %v after %v, want engine.ErrUnavailable", what, r.err, r.took)
		}
		if r.took > 8*time.Second {
			t.Errorf("%s: answered after %v, want within about 5 s", what, r.took)
		}
	}
}
