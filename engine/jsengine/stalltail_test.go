package jsengine_test

import (
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// stallObserver holds the tail goroutine inside the first announcement it
// gets until release is closed.
type stallObserver struct {
	once    sync.Once
	stalled chan struct{} // closed once the tail is held
	release chan struct{}
}

func (o *stallObserver) Appended(*engine.Record) {
	o.once.Do(func() { close(o.stalled) })
	<-o.release
}

func (o *stallObserver) TopicDeleted(string) {}

// TestPipelinedAcksWithStalledTail: while the tail is stalled (an observer
// holds it), pipelined appends are answered after one tail wait in all,
// not one each: the acknowledgement reader answers them one after another,
// so a wait per record would hold the node's n-th publish n waits.
func TestPipelinedAcksWithStalledTail(t *testing.T) {
	url := natstest.URL(t)
	e := newNode(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url)})
	const wait, n = 200 * time.Millisecond, 10
	e.SetTailWaitMax(wait)
	const topic = "stall.tail"
	if _, err := e.CreateTopic(t.Context(), engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	obs := &stallObserver{stalled: make(chan struct{}), release: make(chan struct{})}
	defer e.Watch(obs)()
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(obs.release) }) }
	defer release() // before the engine closes
	seen := &tailObs{}
	defer e.Watch(seen)()
	// Stall the tail on a first record.
	e.AppendAsync(t.Context(), engine.Message{Topic: topic, Data: []byte(`0`)}, func(engine.Appended, error) {})
	select {
	case <-obs.stalled:
	case <-time.After(10 * time.Second):
		t.Fatal("the tail did not announce the first record within 10s")
	}
	start := time.Now()
	answered := make(chan error, n)
	for i := range n {
		e.AppendAsync(t.Context(), engine.Message{Topic: topic, Data: []byte{'1' + byte(i)}}, func(_ engine.Appended, err error) {
			answered <- err
		})
	}
	bound := time.After(n*wait + 10*time.Second)
	for i := range n {
		select {
		case err := <-answered:
			if err != nil {
				t.Fatalf("append %d: %v", i, err)
			}
		case <-bound:
			t.Fatalf("%d of %d appends answered", i, n)
		}
	}
	took, gaveUp := time.Since(start), e.TailGiveUps()
	t.Logf("%d pipelined appends answered in %v with the tail stalled; %d waits for the tail gave up", n, took, gaveUp)
	if gaveUp > 2 { // the first record's, and at most one of these
		t.Errorf("%d appends each waited the whole tail wait (%v): a stalled tail holds every pipelined publish of the node", gaveUp, wait)
	}

	// Once the tail has caught up, an append waits for it again.
	release()
	waitUntil(t, "the tail to catch up", func() bool {
		recs, _ := seen.snapshot()
		return len(recs) == n+1
	})
	a, err := e.Append(t.Context(), engine.Message{Topic: topic, Data: []byte(`"after"`)})
	if err != nil {
		t.Fatal(err)
	}
	if recs, _ := seen.snapshot(); len(recs) != n+2 || recs[n+1].Offset != a.Offset {
		t.Fatalf("Append returned before the tail announced its record (%d announced)", len(recs))
	}
}
