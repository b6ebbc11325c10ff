package jsengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// deadLettered appends one record to a new topic, has member "m" of group
// g on e nack it on its only attempt and returns the letter.
func deadLettered(t *testing.T, e *jsengine.Engine, topic, g string) (*manualConsumer, engine.DeadLetter) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	c := newManual()
	if _, err := e.Join(ctx, engine.JoinRequest{Group: g, Pattern: topic, Member: "m"}, c); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"poison"`)}); err != nil {
		t.Fatal(err)
	}
	d := c.next(t, 10*time.Second)
	if err := e.Nack(ctx, g, "m", posOf(d.Record), "no"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		dls, err := e.DeadLetters(ctx, engine.DeadLetterFilter{Group: g})
		if err == nil && len(dls) == 1 {
			return c, dls[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no dead letter: %v %v", dls, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wantRedelivery takes the next delivery of c and checks that it is the
// letter's record at its own offset, attempt 1.
func wantRedelivery(t *testing.T, c *manualConsumer, dl engine.DeadLetter) engine.Delivery {
	t.Helper()
	d := c.next(t, 10*time.Second)
	if d.Record.Offset != dl.Record.Offset || d.Attempt != 1 || string(d.Record.Data) != string(dl.Record.Data) {
		t.Fatalf("delivery %s/%d@%d attempt %d %q, want offset %d attempt 1 %q",
			d.Record.Topic, d.Record.Partition, d.Record.Offset, d.Attempt, d.Record.Data, dl.Record.Offset, dl.Record.Data)
	}
	return d
}

// TestRedriveFromAnotherNode: a redrive made on a node that does not hold
// the partition reaches the member on the node that does, in place.
func TestRedriveFromAnotherNode(t *testing.T) {
	url := natstest.URL(t)
	policy := engine.GroupPolicy{MaxAttempts: 1, BackoffMin: time.Millisecond, BackoffMax: 4 * time.Millisecond}
	a, b := twoNodes(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: policy}})
	ctx := context.Background()
	c, dl := deadLettered(t, a, "redrive.nodes", "g")
	var n int
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for n, err = b.Redrive(ctx, engine.RedriveRequest{Group: "g"}); n == 0 && err == nil && time.Now().Before(deadline); n, err = b.Redrive(ctx, engine.RedriveRequest{Group: "g"}) {
		time.Sleep(10 * time.Millisecond) // until b has heard of the group
	}
	if err != nil || n != 1 {
		t.Fatalf("Redrive on the other node = %d, %v; want 1", n, err)
	}
	d := wantRedelivery(t, c, dl)
	if err := b.Ack(ctx, "g", "m", posOf(d.Record)); err != nil {
		t.Fatalf("Ack from the other node: %v", err)
	}
	if info, err := a.Topic(ctx, "redrive.nodes"); err != nil || info.Parts[0].Next != 1 {
		t.Fatalf("topic after redrive: %+v %v, want next offset 1", info, err)
	}
}

// TestRedriveSurvivesRestart: a letter redriven while its group has no
// member is delivered in place to the next member, on a node started
// after the redriving one stopped.
func TestRedriveSurvivesRestart(t *testing.T) {
	url := natstest.URL(t)
	policy := engine.GroupPolicy{MaxAttempts: 1, BackoffMin: time.Millisecond, BackoffMax: 4 * time.Millisecond}
	o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: policy}}
	a := newNode(t, o)
	ctx := context.Background()
	_, dl := deadLettered(t, a, "redrive.restart", "g")
	if err := a.Leave(ctx, "g", "m"); err != nil {
		t.Fatal(err)
	}
	if n, err := a.Redrive(ctx, engine.RedriveRequest{Group: "g"}); err != nil || n != 1 {
		t.Fatalf("Redrive = %d, %v; want 1", n, err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b := newNode(t, o)
	c := joinManual(t, ctx, b, "g", "redrive.restart", "m2")
	d := wantRedelivery(t, c, dl)
	if err := b.Ack(ctx, "g", "m2", posOf(d.Record)); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	if dls, err := b.DeadLetters(ctx, engine.DeadLetterFilter{Group: "g"}); err != nil || len(dls) != 0 {
		t.Fatalf("letters after the redelivery: %v %v", dls, err)
	}
}

// TestRedriveHandedOverOnClose: a redelivery in flight when its node
// closes is written with the partition's release, and the node that takes
// the partition over delivers it again, its attempts counted on.
func TestRedriveHandedOverOnClose(t *testing.T) {
	url := natstest.URL(t)
	policy := engine.GroupPolicy{MaxAttempts: 1, BackoffMin: time.Millisecond, BackoffMax: 4 * time.Millisecond}
	policy3 := policy
	policy3.MaxAttempts = 3
	prefix := natstest.Prefix(t, url)
	a := newNode(t, nodeOpts{url: url, prefix: prefix, c: enginetest.Config{Policy: policy}})
	ctx := context.Background()
	c, dl := deadLettered(t, a, "redrive.close", "g")
	if n, err := a.Redrive(ctx, engine.RedriveRequest{Group: "g"}); err != nil || n != 1 {
		t.Fatalf("Redrive = %d, %v; want 1", n, err)
	}
	wantRedelivery(t, c, dl) // leased, never settled
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b := newNode(t, nodeOpts{url: url, prefix: prefix, c: enginetest.Config{Policy: policy3}})
	c2 := joinManual(t, ctx, b, "g", "redrive.close", "m2")
	d := c2.next(t, 10*time.Second)
	if d.Record.Offset != dl.Record.Offset || d.Attempt != 2 {
		t.Fatalf("after the hand-over got offset %d attempt %d, want offset %d attempt 2", d.Record.Offset, d.Attempt, dl.Record.Offset)
	}
	if err := b.Ack(ctx, "g", "m2", posOf(d.Record)); err != nil {
		t.Fatalf("Ack: %v", err)
	}
}
