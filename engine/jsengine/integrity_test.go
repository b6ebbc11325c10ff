package jsengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// manualConsumer hands a group member's deliveries to the test, which
// settles them itself.
type manualConsumer struct{ q chan engine.Delivery }

func newManual() *manualConsumer { return &manualConsumer{q: make(chan engine.Delivery, 1024)} }

func (c *manualConsumer) Deliver(d engine.Delivery) {
	select {
	case c.q <- d:
	default: // the tests bound what they deliver well below the queue
	}
}

func (*manualConsumer) Skipped(string, string, int, int64, int64) {}

// next returns the next delivery, failing the test after bound.
func (c *manualConsumer) next(t *testing.T, bound time.Duration) engine.Delivery {
	t.Helper()
	select {
	case d := <-c.q:
		return d
	case <-time.After(bound):
		t.Fatal("timed out waiting for a delivery")
		return engine.Delivery{}
	}
}

func posOf(r *engine.Record) engine.Position {
	return engine.Position{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
}

// TestDeadLetterNotStoredNotCommitted: a record nacked on its last attempt
// while NATS is down has a dead letter that cannot be stored; the group
// must not commit past it. Once NATS is back the letter is stored and only
// then does the committed offset move on.
func TestDeadLetterNotStoredNotCommitted(t *testing.T) {
	ns := natstest.NewServer(t)
	policy := engine.GroupPolicy{MaxAttempts: 1, BackoffMin: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond}
	e := newNode(t, nodeOpts{url: ns.URL(), prefix: "dlout", c: enginetest.Config{Policy: policy}})
	ctx := context.Background()
	for _, data := range []string{`"poison"`, `"fine"`} {
		if _, err := e.Append(ctx, engine.Message{Topic: "dl", Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	mc := newManual()
	if _, err := e.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "dl", Member: "m"}, mc); err != nil {
		t.Fatal(err)
	}
	d := mc.next(t, 10*time.Second)
	if d.Record.Offset != 0 {
		t.Fatalf("first delivery at offset %d, want 0", d.Record.Offset)
	}

	ns.Stop()
	if err := e.Nack(ctx, "g", posOf(d.Record), "boom"); err != nil {
		t.Fatalf("Nack during the outage: %v", err)
	}
	info, err := e.Group(ctx, "g")
	if err != nil {
		t.Fatalf("Group during the outage: %v", err)
	}
	if p := info.Partitions[0]; p.Committed != 0 {
		t.Fatalf("committed %d while the dead letter of offset 0 is not stored, want 0", p.Committed)
	}
	select {
	case d := <-mc.q:
		t.Fatalf("delivered %v before the dead letter of offset 0 was stored", posOf(d.Record))
	default:
	}

	ns.Start()
	d = mc.next(t, 20*time.Second)
	if d.Record.Offset != 1 {
		t.Fatalf("after NATS is back: delivery at offset %d, want 1", d.Record.Offset)
	}
	dls, err := e.DeadLetters(ctx, engine.DeadLetterFilter{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Record.Offset != 0 || dls[0].Error != "boom" {
		t.Fatalf("dead letters %+v, want offset 0 with error boom, stored once", dls)
	}
}
