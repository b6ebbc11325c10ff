package jsengine_test

import (
	"sync"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestTrimWithAppendInBetween: when another node appends to a partition
// (and trims it) between a node's append that trims it to MaxMessages and
// that node's trim, the trimming node's view of the partition's earliest
// offset (where Topics and ReadSeen start) is the earliest record NATS
// still holds, not one before it.
func TestTrimWithAppendInBetween(t *testing.T) {
	url := natstest.URL(t)
	a, b := twoNodes(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url)})
	ctx := t.Context()
	const topic, max = "trim.between", 5
	if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 1, MaxMessages: max, OnFull: engine.DropOldest}); err != nil {
		t.Fatal(err)
	}
	for i := range max {
		if _, err := a.Append(ctx, engine.Message{Topic: topic, Data: []byte{'0' + byte(i)}}); err != nil {
			t.Fatal(err)
		}
	}
	var once sync.Once
	var between error
	a.SetBeforeTrim(func() {
		once.Do(func() {
			_, between = b.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"b"`)})
		})
	})
	if _, err := a.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"a"`)}); err != nil {
		t.Fatal(err)
	}
	if between != nil {
		t.Fatalf("the other node's append: %v", between)
	}
	view, _ := a.PartitionView(topic, 0)
	info, err := b.Topic(ctx, topic) // loaded from NATS by the other node
	if err != nil {
		t.Fatal(err)
	}
	held := info.Parts[0]
	recs, _, err := b.Read(ctx, topic, 0, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("NATS holds offsets %d..%d (%d records); the trimming node's view starts at %d", held.Earliest, held.Next-1, len(recs), view)
	if len(recs) == 0 || recs[0].Offset != held.Earliest {
		t.Fatalf("read from NATS starts at %v, info says %d", recs, held.Earliest)
	}
	if view != held.Earliest {
		t.Errorf("after its trim the node's view starts at offset %d, NATS holds from %d", view, held.Earliest)
	}
}
