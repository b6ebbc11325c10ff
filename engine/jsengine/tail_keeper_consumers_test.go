package jsengine_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// heldObs is an observer whose first announcement waits until release is
// closed: a node's tail held up by what it announces to.
type heldObs struct {
	release chan struct{}
	once    sync.Once
	held    chan struct{} // closed when the first announcement waits
}

func (o *heldObs) Appended(*engine.Record) {
	o.once.Do(func() {
		close(o.held)
		<-o.release
	})
}

func (o *heldObs) TopicDeleted(string) {}

// recConsumers is how many consumers the record stream of prefix has on
// the server.
func recConsumers(t *testing.T, url, prefix string) int {
	t.Helper()
	return recInfo(t, url, prefix).State.Consumers
}

// recInfo is the record stream of prefix as the server describes it,
// with the subjects matching filter counted when filter is given.
func recInfo(t *testing.T, url, prefix string, filter ...string) *jetstream.StreamInfo {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, prefix+"_rec")
	if err != nil {
		t.Fatal(err)
	}
	var opts []jetstream.StreamInfoOpt
	for _, f := range filter {
		opts = append(opts, jetstream.WithSubjectFilter(f))
	}
	info, err := s.Info(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// TestTailRestartLeavesNoConsumerBehind: each node keeps one consumer of
// the record stream on the server for its tail. When the heartbeat starts
// a tail again, the consumer it replaces must go: restartTail only
// stopped it, and the server kept it (an ordered consumer's inactive
// threshold is five minutes), one more for every restart, so a tail the
// heartbeat restarted every other beat left dozens of consumers per node
// on the record stream.
func TestTailRestartLeavesNoConsumerBehind(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	o := nodeOpts{url: url, prefix: prefix, ttl: 1500 * time.Millisecond}
	a, b := twoNodes(t, o)
	before := recConsumers(t, url, prefix) // each node's tail
	ctx := context.Background()
	for i := range 2 {
		a.StopTailConsumer()
		if _, err := b.Append(ctx, engine.Message{Topic: "held", Data: []byte{'0' + byte(i)}}); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "a tail restart on a", func() bool { return a.TailRestarts() >= int64(i+1) })
	}
	if n := recConsumers(t, url, prefix); n != before {
		t.Errorf("record stream has %d consumers after %d tail restarts, want %d (one per node's tail)", n, a.TailRestarts(), before)
	}
}

// TestTailHeldBySlowObserverIsNotRestarted: a tail held up by a slow
// observer (its consumer delivering, its goroutine busy announcing) is not
// a stopped tail: the heartbeat leaves it alone. It was started again
// every other beat, which could not make it faster.
func TestTailHeldBySlowObserverIsNotRestarted(t *testing.T) {
	url := natstest.URL(t)
	o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), ttl: 1500 * time.Millisecond}
	a, b := twoNodes(t, o)
	var beats atomic.Int64
	a.SetBeforeMemberBeat(func() { beats.Add(1) })
	obs := &heldObs{release: make(chan struct{}), held: make(chan struct{})}
	defer a.Watch(obs)()
	ctx := context.Background()
	for i := range 3 {
		if _, err := b.Append(ctx, engine.Message{Topic: "held", Data: []byte{'0' + byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	<-obs.held
	from := beats.Load()
	waitUntil(t, "six heartbeats", func() bool { return beats.Load() >= from+6 })
	close(obs.release)
	if n := a.TailRestarts(); n != 0 {
		t.Errorf("a tail held by a slow observer restarted %d times", n)
	}
}
