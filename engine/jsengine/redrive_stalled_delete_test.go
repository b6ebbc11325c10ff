package jsengine_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestRedriveOverStalledLinkLosesNoLetter: a redrive to the topics whose
// removal of the letter is held by the link for a little over five
// seconds, within the redrive's own context of thirty, must leave the
// letter either stored or appended to its topic. The removal, cut short at
// the round trip's bound (roundTripMax) whatever the caller's context
// allowed, was taken for not made: the letter was skipped, Redrive
// answered 0 and no error, and the removal, let through when the link
// flowed again, took the letter away for good.
func TestRedriveOverStalledLinkLosesNoLetter(t *testing.T) {
	url := natstest.URL(t)
	px := newLinkProxy(t, url)
	e := newNode(t, nodeOpts{url: px.URL(), prefix: natstest.Prefix(t, url)})
	var armed atomic.Bool
	stalled := make(chan struct{})
	e.SetBeforeDeadLetterDelete(func() {
		if armed.CompareAndSwap(true, false) {
			px.Stall()
			close(stalled)
		}
	})
	ctx := context.Background()
	const topic = "letters"
	if _, err := e.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"first"`)}); err != nil {
		t.Fatal(err)
	}
	if err := e.AddDeadLetter(ctx, engine.DeadLetter{
		ID: "l1", Reason: engine.ReasonQueueFull, Subscriber: "s",
		Record: engine.Record{Topic: topic, Data: []byte(`"again"`)},
	}); err != nil {
		t.Fatal(err)
	}
	listed := func() bool {
		dls, err := e.DeadLetters(ctx, engine.DeadLetterFilter{})
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(dls, func(d engine.DeadLetter) bool { return d.ID == "l1" })
	}
	if !listed() {
		t.Fatal("letter not listed")
	}

	armed.Store(true)
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	type result struct {
		n   int
		err error
	}
	res := make(chan result, 1)
	go func() { // ends with Redrive, within rctx
		n, err := e.Redrive(rctx, engine.RedriveRequest{IDs: []string{"l1"}, AppendToTopics: true})
		res <- result{n, err}
	}()
	<-stalled
	// The link flows again a little over five seconds into the stall,
	// or once Redrive has answered, whichever is later.
	held := time.NewTimer(5500 * time.Millisecond)
	defer held.Stop()
	var r result
	select {
	case r = <-res:
		<-held.C
		px.Resume()
	case <-held.C:
		px.Resume()
		r = <-res
	}
	t.Logf("Redrive = %d, %v", r.n, r.err)

	// The removal, let through, is applied shortly after (the API's
	// workers answer it, not the direct gets that list the letters):
	// look for a few seconds.
	stillListed := listed()
	for i := 0; i < 50 && stillListed; i++ {
		time.Sleep(100 * time.Millisecond)
		stillListed = listed()
	}
	recs, _, err := e.Read(ctx, topic, 0, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("listed %v, appended %d", stillListed, len(recs))
	if !stillListed && len(recs) == 0 {
		t.Fatalf("letter neither stored nor appended to its topic after Redrive answered %d, %v", r.n, r.err)
	}
}
