package client_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/switchyard/switchyard/client"
	"github.com/switchyard/switchyard/engine"
)

func BenchmarkPublish(b *testing.B) {
	g := newGateway(b, engine.GroupPolicy{})
	ctx := context.Background()
	c, err := client.Dial(ctx, g.URL, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	data := json.RawMessage(`{"n":1}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Publish(ctx, "bench", data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRoundTrip measures publish to delivery through the gateway.
func BenchmarkRoundTrip(b *testing.B) {
	g := newGateway(b, engine.GroupPolicy{})
	ctx := context.Background()
	c, err := client.Dial(ctx, g.URL, nil)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	got := make(chan struct{}, 1)
	if _, err := c.Subscribe(ctx, "rt", client.SubscribeOptions{}, func(*client.Message) { got <- struct{}{} }); err != nil {
		b.Fatal(err)
	}
	data := json.RawMessage(`1`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Publish(ctx, "rt", data); err != nil {
			b.Fatal(err)
		}
		<-got
	}
}
