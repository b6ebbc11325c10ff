package jsengine_test

import (
	"context"
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
