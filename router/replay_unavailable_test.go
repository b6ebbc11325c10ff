package router_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
)

// errLinkLost is what a JetStream read cut short by a lost connection
// returns: unavailable, and a context cancellation underneath.
var errLinkLost = fmt.Errorf("jsengine: connection to NATS lost: %w: get: %w", engine.ErrUnavailable, context.Canceled)

// failingReads fails the first fail Reads (all of them when fail < 0)
// as a read cut short by a lost connection does.
type failingReads struct {
	engine.Engine
	fail  int64
	reads atomic.Int64
}

func (f *failingReads) Read(ctx context.Context, topic string, partition int, from int64, limit int) ([]*engine.Record, int64, error) {
	if n := f.reads.Add(1); f.fail < 0 || n <= f.fail {
		return nil, 0, errLinkLost
	}
	return f.Engine.Read(ctx, topic, partition, from, limit)
}

// TestReplayRetriesAnUnavailableRead: a catch-up whose read of the log is
// cut short by the engine's lost connection reads again once the engine is
// back, and the subscription then goes live. It was left catching up for
// good, sent nothing more and told nothing (the fault scenario
// lossy-gateway-links: a subscriber was sent "subscribed" and then no
// record in a minute).
func TestReplayRetriesAnUnavailableRead(t *testing.T) {
	fr := &failingReads{fail: 3}
	g := newGateway(t, func(c *gwConfig) { c.wrap = func(e engine.Engine) engine.Engine { fr.Engine = e; return fr } })
	publishN(t, g, "flaky.a", 0, 5)
	c := g.dial(t)
	c.subscribe(t, "flaky.*", "from", "earliest")
	c.expectMessages(t, "flaky.a", 0, 5)
	publishN(t, g, "flaky.a", 5, 2)
	c.expectMessages(t, "flaky.a", 5, 7)
	if n := fr.reads.Load(); n <= 3 {
		t.Errorf("%d reads, want the failed ones read again", n)
	}
}

// TestReplayThatCannotReadEndsTheSubscription: a catch-up whose reads
// keep failing past the retry bound ends its subscription with an
// "unsubscribed" frame of reason "unavailable", so the client knows to
// subscribe again, rather than leave it catching up for good.
func TestReplayThatCannotReadEndsTheSubscription(t *testing.T) {
	defer router.SetReplayRetryMax(200 * time.Millisecond)()
	fr := &failingReads{fail: -1}
	g := newGateway(t, func(c *gwConfig) { c.wrap = func(e engine.Engine) engine.Engine { fr.Engine = e; return fr } })
	publishN(t, g, "down.a", 0, 2)
	c := g.dial(t)
	c.subscribe(t, "down.*", "from", "earliest")
	m := c.next(t)
	if m["op"] != "unsubscribed" || m["pattern"] != "down.*" || m["reason"] != "unavailable" {
		t.Fatalf("got %v, want unsubscribed down.* for reason unavailable", m)
	}
	if n := router.CatchingUp(g.rt); n != 0 {
		t.Errorf("%d subscriptions still catching up", n)
	}
	if !errors.Is(errLinkLost, context.Canceled) {
		t.Fatal("the error must carry a cancellation, as jsengine's does")
	}
}
