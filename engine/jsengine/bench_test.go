package jsengine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

var payload = []byte(`{"user":42,"action":"click","page":"/home"}`)

// BenchmarkAppend appends from one producer to a one-partition topic with
// no groups: a publish with its expected-sequence check, plus the wait for
// this node's tail to announce the record.
func BenchmarkAppend(b *testing.B) {
	url := natstest.URL(b)
	e := newNode(b, nodeOpts{url: url, prefix: natstest.Prefix(b, url)})
	ctx := context.Background()
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: "bench", Partitions: 1, MaxMessages: 1 << 20}); err != nil {
		b.Fatal(err)
	}
	m := engine.Message{Topic: "bench", Data: payload}
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if _, err := e.Append(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendTrimmed appends to a full one-partition topic whose cap
// (100 records) leaves no trim slack: every append also trims the
// partition to the cap.
func BenchmarkAppendTrimmed(b *testing.B) {
	url := natstest.URL(b)
	e := newNode(b, nodeOpts{url: url, prefix: natstest.Prefix(b, url)})
	ctx := context.Background()
	const max = 100
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: "bench", Partitions: 1, MaxMessages: max}); err != nil {
		b.Fatal(err)
	}
	m := engine.Message{Topic: "bench", Data: payload}
	for range max {
		if _, err := e.Append(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if _, err := e.Append(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}

// ackQueue is a consumer that hands deliveries to the benchmark goroutine,
// which acks them.
type ackQueue chan engine.Delivery

func (q ackQueue) Deliver(d engine.Delivery)               { q <- d }
func (ackQueue) Skipped(string, string, int, int64, int64) {}

// BenchmarkGroupDelivery measures append, delivery and ack of one record
// through a one-member group on one partition.
func BenchmarkGroupDelivery(b *testing.B) {
	url := natstest.URL(b)
	e := newNode(b, nodeOpts{url: url, prefix: natstest.Prefix(b, url)})
	ctx := context.Background()
	q := make(ackQueue, 1)
	if _, err := e.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "bench"}, q); err != nil {
		b.Fatal(err)
	}
	m := engine.Message{Topic: "bench", Data: payload}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Append(ctx, m); err != nil {
			b.Fatal(err)
		}
		d := <-q
		if err := e.Ack(ctx, d.Group, "", engine.Position{Topic: d.Record.Topic, Partition: d.Record.Partition, Offset: d.Record.Offset}); err != nil {
			b.Fatal(err)
		}
	}
}

// idleConsumer is a member that never receives anything: it leaves at once.
type idleConsumer struct{}

func (idleConsumer) Deliver(engine.Delivery)                   {}
func (idleConsumer) Skipped(string, string, int, int64, int64) {}

// BenchmarkAppendIdleGroups appends to a one-partition topic that many
// groups read, none of which has a member now (each joined once and left),
// against the same topic with no groups: an append should cost what the
// live groups need, so idle=10000 should be close to idle=0. Creating the
// groups takes a few seconds (three bucket writes each).
func BenchmarkAppendIdleGroups(b *testing.B) {
	for _, idle := range []int{0, 10_000} {
		b.Run(fmt.Sprintf("idle=%d", idle), func(b *testing.B) {
			url := natstest.URL(b)
			e := newNode(b, nodeOpts{url: url, prefix: natstest.Prefix(b, url)})
			ctx := context.Background()
			if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: "bench", Partitions: 1, MaxMessages: 1 << 20}); err != nil {
				b.Fatal(err)
			}
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for w := range 8 {
				wg.Add(1)
				go func() { // joins and leaves its share of the groups, then exits
					defer wg.Done()
					for i := w; i < idle; i += 8 {
						g := fmt.Sprintf("idle-%d", i)
						if _, err := e.Join(ctx, engine.JoinRequest{Group: g, Pattern: "bench", Member: "m"}, idleConsumer{}); err != nil {
							errs <- err
							return
						}
						if err := e.Leave(ctx, g, "m"); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
			m := engine.Message{Topic: "bench", Data: payload}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Append(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
