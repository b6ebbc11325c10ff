package memengine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
)

// BenchmarkListing: one page of 100 topics out of 20,000 (TopicsPage), and
// the whole listing (Topics) that a page used to be cut from.
func BenchmarkListing(b *testing.B) {
	e := memengine.New(memengine.Options{})
	b.Cleanup(func() { _ = e.Close(context.Background()) })
	ctx := context.Background()
	const topics = 20000
	for i := range topics {
		if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: fmt.Sprintf("bench.t%05d", i)}); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("TopicsPage_100", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ts, _, err := e.TopicsPage(ctx, "bench.t10000", 100); err != nil || len(ts) != 100 {
				b.Fatalf("%d topics, %v", len(ts), err)
			}
		}
	})
	b.Run("Topics", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if ts, err := e.Topics(ctx); err != nil || len(ts) != topics {
				b.Fatalf("%d topics, %v", len(ts), err)
			}
		}
	})
}
