package memengine_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/memengine"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func newEngine(t testing.TB, c enginetest.Config) *memengine.Engine {
	e := memengine.New(memengine.Options{Clock: c.Clock, Defaults: c.Defaults, Strict: c.Strict, Policy: c.Policy})
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

func TestConformance(t *testing.T) {
	enginetest.Run(t, enginetest.Features{FakeClock: true}, func(t *testing.T, c enginetest.Config) engine.Engine {
		return newEngine(t, c)
	})
}

func TestOptionsDefaults(t *testing.T) {
	n := 0
	e := memengine.New(memengine.Options{NewID: func() string { n++; return fmt.Sprintf("id-%d", n) }})
	defer e.Close(context.Background())
	if e.Epoch() != "id-1" {
		t.Errorf("Epoch = %q, want the first NewID", e.Epoch())
	}
	info, err := e.CreateTopic(context.Background(), engine.TopicConfig{Name: "t"})
	if err != nil {
		t.Fatal(err)
	}
	want := engine.Defaults
	want.Name = "t"
	if info.Config != want {
		t.Errorf("config = %+v, want engine.Defaults %+v", info.Config, want)
	}
	if other := memengine.New(memengine.Options{}); other.Epoch() == "" || other.Epoch() == memengine.New(memengine.Options{}).Epoch() {
		t.Errorf("default epochs are empty or repeat")
	}
}

func TestEmptyNames(t *testing.T) {
	e := newEngine(t, enginetest.Config{})
	_, err := e.CreateTopic(context.Background(), engine.TopicConfig{})
	if !errors.Is(err, engine.ErrInvalidConfig) {
		t.Errorf("CreateTopic without a name: %v, want ErrInvalidConfig", err)
	}
	_, err = e.Join(context.Background(), engine.JoinRequest{Pattern: "a"}, nopConsumer{})
	if !errors.Is(err, engine.ErrInvalidConfig) {
		t.Errorf("Join without a group: %v, want ErrInvalidConfig", err)
	}
	if _, err := e.Redrive(context.Background(), engine.RedriveRequest{}); !errors.Is(err, engine.ErrInvalidConfig) {
		t.Errorf("Redrive with neither group nor ids: %v, want ErrInvalidConfig", err)
	}
}

type nopConsumer struct{}

func (nopConsumer) Deliver(engine.Delivery)                   {}
func (nopConsumer) Skipped(string, string, int, int64, int64) {}

// counter acks nothing; it counts deliveries and remembers the last one.
type counter struct {
	n    atomic.Int64
	last atomic.Pointer[engine.Delivery]
}

func (c *counter) Deliver(d engine.Delivery)               { c.n.Add(1); c.last.Store(&d) }
func (*counter) Skipped(string, string, int, int64, int64) {}

// With several records in flight, an ack of a later one does not move the
// committed offset past an earlier one still out.
func TestMaxInFlightCommitsContiguously(t *testing.T) {
	e := newEngine(t, enginetest.Config{Policy: engine.GroupPolicy{MaxInFlight: 3}})
	ctx := context.Background()
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: "t"}); err != nil {
		t.Fatal(err)
	}
	c := &counter{}
	if _, err := e.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "t"}, c); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := e.Append(ctx, engine.Message{Topic: "t"}); err != nil {
			t.Fatal(err)
		}
	}
	if c.n.Load() != 3 {
		t.Fatalf("%d delivered, want MaxInFlight 3", c.n.Load())
	}
	ack := func(o int64) {
		t.Helper()
		if err := e.Ack(ctx, "g", "", engine.Position{Topic: "t", Offset: o}); err != nil {
			t.Fatalf("Ack %d: %v", o, err)
		}
	}
	committed := func() int64 {
		g, _ := e.Group(ctx, "g")
		return g.Partitions[0].Committed
	}
	ack(1)
	ack(2)
	if got := committed(); got != 0 || c.n.Load() != 5 {
		t.Errorf("after acking 1 and 2: committed %d, delivered %d; want 0 and 5", got, c.n.Load())
	}
	ack(0)
	if got := committed(); got != 3 {
		t.Errorf("after acking 0: committed %d, want 3", got)
	}
}

// A block timeout is a timer on the engine's clock, and Close stops the
// timers of in-flight deliveries.
func TestTimersOnClock(t *testing.T) {
	clock := enginetest.NewFakeClock(time.Unix(0, 0))
	e := memengine.New(memengine.Options{Clock: clock, Policy: engine.GroupPolicy{AckTimeout: time.Minute}})
	ctx := context.Background()
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: "t", MaxMessages: 1, OnFull: engine.Block, BlockTimeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	c := &counter{}
	if _, err := e.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "t"}, c); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Append(ctx, engine.Message{Topic: "t"}); err != nil {
		t.Fatal(err)
	}
	if clock.Pending() != 1 {
		t.Fatalf("%d timers pending, want the ack timeout", clock.Pending())
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.Append(ctx, engine.Message{Topic: "t"})
		done <- err
	}()
	if !clock.WaitForTimers(2, 5*time.Second) {
		t.Fatal("blocked Append set no timer")
	}
	clock.Advance(time.Second)
	if err := <-done; !errors.Is(err, engine.ErrBackpressure) {
		t.Fatalf("blocked Append: %v, want ErrBackpressure", err)
	}
	if clock.Pending() != 1 {
		t.Errorf("%d timers pending after the block timeout, want 1", clock.Pending())
	}
	if err := e.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if clock.Pending() != 0 {
		t.Errorf("%d timers pending after Close, want 0", clock.Pending())
	}
	clock.Advance(time.Hour)
	if c.n.Load() != 1 {
		t.Errorf("%d deliveries, want 1: no redelivery after Close", c.n.Load())
	}
}

// Deleting a topic drops the group's cursor; recreating it starts over at 0.
func TestDeleteTopicWithGroup(t *testing.T) {
	e := newEngine(t, enginetest.Config{})
	ctx := context.Background()
	c := &counter{}
	if _, err := e.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "t.#"}, c); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Append(ctx, engine.Message{Topic: "t.a"}); err != nil {
		t.Fatal(err)
	}
	if err := e.DeleteTopic(ctx, "t.a"); err != nil {
		t.Fatal(err)
	}
	if g, _ := e.Group(ctx, "g"); len(g.Partitions) != 0 {
		t.Errorf("group partitions after delete: %+v", g.Partitions)
	}
	if err := e.Ack(ctx, "g", "", engine.Position{Topic: "t.a"}); !errors.Is(err, engine.ErrNotInFlight) {
		t.Errorf("Ack on a deleted topic: %v, want ErrNotInFlight", err)
	}
	if _, err := e.Append(ctx, engine.Message{Topic: "t.a"}); err != nil {
		t.Fatal(err)
	}
	if d := c.last.Load(); c.n.Load() != 2 || d.Record.Offset != 0 {
		t.Errorf("after recreating: %d deliveries, last %+v; want 2, offset 0", c.n.Load(), d.Record)
	}
}
