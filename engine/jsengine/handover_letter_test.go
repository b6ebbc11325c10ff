package jsengine_test

// Tests of the hand-over: a dead letter being stored as its node
// closes.

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestLetterStoredAsNodeClosesOnce: a record nacked on its last attempt
// has its dead letter being published when its node closes. Close hands
// the partition back with the record owed and its attempts used, and the
// publish completes: the next holder must not store a second letter of
// the same record (every record is acked or dead-lettered once; a second
// letter is a second redelivery on redrive and counts twice against the
// group's letter bound).
func TestLetterStoredAsNodeClosesOnce(t *testing.T) {
	url := natstest.URL(t)
	o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: engine.GroupPolicy{MaxAttempts: 1, AckTimeout: time.Hour}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// a uses a connection of the test's, so that its Close does not cut
	// the letter writer's publish short (a node's own connection closing
	// mid-publish may lose the acknowledgement of a stored letter all the
	// same).
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	a, err := jsengine.New(ctx, jsengine.Options{Conn: nc, Prefix: o.prefix, Policy: o.c.Policy})
	if err != nil {
		t.Fatal(err)
	}
	gate := newGate(a, jsengine.PositionKeyPrefix("g", "dl2"))
	aClosed := false
	defer func() {
		if !aClosed {
			_ = a.Close(context.Background())
		}
	}()
	b := newNode(t, o)
	if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: "dl2", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	m1 := joinManual(t, ctx, a, "g", "dl2", "m1")
	if _, err := a.Append(ctx, engine.Message{Topic: "dl2", Data: []byte(`"poison"`)}); err != nil {
		t.Fatal(err)
	}
	d := m1.next(t, 20*time.Second)
	storing, release := make(chan struct{}), make(chan struct{})
	a.SetBeforeDeadLetterStore(func() {
		close(storing)
		select {
		case <-release:
		case <-ctx.Done():
		}
	})
	if err := a.Nack(ctx, "g", "m1", posOf(d.Record), "poison"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-storing:
	case <-ctx.Done():
		t.Fatal("the letter was never stored")
	}
	gate.armed.Store(true) // Close's release waits
	waiting := make(chan struct{})
	a.SetBeforeCloseWaitsLetter(func() { close(waiting) })
	closed := make(chan error, 1)
	go func() { closed <- a.Close(ctx) }()
	// Close either waits for the letter or goes on to the release.
	select {
	case <-waiting:
	case <-gate.blocked:
	case <-ctx.Done():
		t.Fatal("Close neither waited for the letter nor released")
	}
	close(release) // the publish under way as a closes completes
	waitUntil(t, "a's letter", func() bool {
		dls, err := b.DeadLetters(ctx, engine.DeadLetterFilter{Group: "g"})
		return err == nil && len(dls) == 1
	})
	close(gate.release)
	if err := <-closed; err != nil {
		t.Fatalf("Close a: %v", err)
	}
	aClosed = true
	rel, err := b.StoredPosition(ctx, "g", "dl2", 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("released by a: %s", rel)
	m2 := joinManual(t, ctx, b, "g", "dl2", "m2")
	if _, err := b.Append(ctx, engine.Message{Topic: "dl2", Data: []byte(`"marker"`)}); err != nil {
		t.Fatal(err)
	}
	if d := m2.next(t, 20*time.Second); d.Record.Offset != 1 {
		t.Fatalf("m2 got offset %d attempt %d, want the marker", d.Record.Offset, d.Attempt)
	} else if err := b.Ack(ctx, "g", "m2", posOf(d.Record)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the group to commit both records", func() bool {
		info, err := b.Group(ctx, "g")
		return err == nil && len(info.Partitions) == 1 && info.Partitions[0].Committed == 2
	})
	dls, err := b.DeadLetters(ctx, engine.DeadLetterFilter{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	for _, dl := range dls {
		t.Logf("letter %s: offset %d attempts %d error %q", dl.ID, dl.Record.Offset, dl.Attempts, dl.Error)
	}
	if len(dls) != 1 {
		t.Fatalf("%d dead letters of offset 0, want 1", len(dls))
	}
}
