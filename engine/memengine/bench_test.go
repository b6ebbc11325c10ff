package memengine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
)

var payload = []byte(`{"user":42,"action":"click","page":"/home"}`)

// BenchmarkAppend appends from p producers to a topic of n partitions with
// no groups and no observers: the log's own cost.
func BenchmarkAppend(b *testing.B) {
	for _, parts := range []int{1, 8} {
		for _, producers := range []int{1, 8} {
			b.Run(fmt.Sprintf("partitions=%d/producers=%d", parts, producers), func(b *testing.B) {
				e := newEngine(b, enginetest.Config{})
				ctx := context.Background()
				if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: "bench", Partitions: parts, MaxMessages: 1 << 16}); err != nil {
					b.Fatal(err)
				}
				m := engine.Message{Topic: "bench", Data: payload}
				b.ReportAllocs()
				b.SetBytes(int64(len(payload)))
				b.ResetTimer()
				var wg sync.WaitGroup
				per := b.N / producers
				for w := range producers {
					n := per
					if w == 0 {
						n += b.N % producers
					}
					wg.Go(func() {
						for range n {
							if _, err := e.Append(ctx, m); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
			})
		}
	}
}

// BenchmarkAppendObserved adds one cheap observer, as the router has.
func BenchmarkAppendObserved(b *testing.B) {
	e := newEngine(b, enginetest.Config{})
	ctx := context.Background()
	var seen int64
	stop := e.Watch(observerFunc(func(*engine.Record) { seen++ }))
	defer stop()
	m := engine.Message{Topic: "bench", Data: payload}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := e.Append(ctx, m); err != nil {
			b.Fatal(err)
		}
	}
}

type observerFunc func(*engine.Record)

func (f observerFunc) Appended(r *engine.Record) { f(r) }
func (observerFunc) TopicDeleted(string)         {}

func BenchmarkRead(b *testing.B) {
	e := newEngine(b, enginetest.Config{})
	ctx := context.Background()
	for range 10_000 {
		if _, err := e.Append(ctx, engine.Message{Topic: "bench", Data: payload}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	var from int64
	for b.Loop() {
		recs, next, err := e.Read(ctx, "bench", 0, from, 100)
		if err != nil || len(recs) != 100 {
			b.Fatalf("Read: %d records, %v", len(recs), err)
		}
		from = next % 9_900
	}
}

// ackQueue is a consumer that hands deliveries to the benchmark goroutine,
// which acks them: the shape a real group member has.
type ackQueue chan engine.Delivery

func (q ackQueue) Deliver(d engine.Delivery)               { q <- d }
func (ackQueue) Skipped(string, string, int, int64, int64) {}

// BenchmarkGroupDelivery measures append, delivery and ack of one record
// through a one-member group on one partition.
func BenchmarkGroupDelivery(b *testing.B) {
	e := newEngine(b, enginetest.Config{})
	ctx := context.Background()
	q := make(ackQueue, 1) // MaxInFlight 1: at most one delivery outstanding
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

// BenchmarkAppendIdleGroups appends to a topic that many groups read but
// none of which has a member now (each joined once and left): an append
// should cost what the live groups need, so idle=10000 should be close to
// idle=0.
func BenchmarkAppendIdleGroups(b *testing.B) {
	for _, idle := range []int{0, 10_000} {
		b.Run(fmt.Sprintf("idle=%d", idle), func(b *testing.B) {
			e := newEngine(b, enginetest.Config{})
			ctx := context.Background()
			if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: "bench", Partitions: 1, MaxMessages: 1 << 16}); err != nil {
				b.Fatal(err)
			}
			for i := range idle {
				g := fmt.Sprintf("idle-%d", i)
				if _, err := e.Join(ctx, engine.JoinRequest{Group: g, Pattern: "bench", Member: "m"}, nopConsumer{}); err != nil {
					b.Fatal(err)
				}
				if err := e.Leave(ctx, g, "m"); err != nil {
					b.Fatal(err)
				}
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

// BenchmarkAppendFullWindows appends to a topic that many groups read
// whose members hold a full window and never ack (abandoned pull members,
// say): like idle groups, full=10000 should be close to full=0.
func BenchmarkAppendFullWindows(b *testing.B) {
	for _, full := range []int{0, 10_000} {
		b.Run(fmt.Sprintf("full=%d", full), func(b *testing.B) {
			e := newEngine(b, enginetest.Config{})
			ctx := context.Background()
			if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: "bench", Partitions: 1, MaxMessages: 1 << 16}); err != nil {
				b.Fatal(err)
			}
			for i := range full {
				g := fmt.Sprintf("full-%d", i)
				if _, err := e.Join(ctx, engine.JoinRequest{Group: g, Pattern: "bench", Member: "m", MaxInFlight: 1}, nopConsumer{}); err != nil {
					b.Fatal(err)
				}
			}
			m := engine.Message{Topic: "bench", Data: payload}
			for range 16 { // fill every window; appends then stop pumping them
				if _, err := e.Append(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Append(ctx, m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
