package jsengine_test

import (
	"context"
	"fmt"
	"maps"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestRecordMetadataRoundTrip: a record's key, headers and priority come
// back as appended, on the layouts the metadata header's fast paths take
// and on those they leave to encoding/json (escapes, HTML characters,
// non-ASCII), whether appended with Append or AppendAsync, announced by
// another node's tail, or read from the stream by a node that did not
// see them appended.
func TestRecordMetadataRoundTrip(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	a, b := twoNodes(t, nodeOpts{url: url, prefix: prefix})
	ctx := context.Background()
	const topic = "meta.roundtrip"
	if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	obs := &tailObs{}
	defer b.Watch(obs)()
	msgs := []engine.Message{
		{Priority: 1},
		{Key: "user-42"},
		{Key: "user-42", Priority: 255},
		{Key: "k", Headers: map[string]string{"trace": "0af7", "b": ""}, Priority: 1},
		{Key: `q"<&>é\`, Headers: map[string]string{"é": "\u2028", "a\tb": `"x"`}, Priority: 3},
		{Headers: map[string]string{"only": "headers"}},
		{},
	}
	for i := range msgs {
		msgs[i].Topic, msgs[i].Data = topic, fmt.Appendf(nil, "%d", i)
	}
	for i, m := range msgs {
		if i%2 == 0 {
			if _, err := a.Append(ctx, m); err != nil {
				t.Fatal(err)
			}
			continue
		}
		done := make(chan error, 1)
		a.AppendAsync(ctx, m, func(_ engine.Appended, err error) { done <- err })
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	check := func(from string, recs []*engine.Record) {
		t.Helper()
		if len(recs) != len(msgs) {
			t.Fatalf("%s: %d records, want %d", from, len(recs), len(msgs))
		}
		for i, r := range recs {
			m := msgs[i]
			if r.Offset != int64(i) || r.Key != m.Key || r.Priority != m.Priority || !maps.Equal(r.Headers, m.Headers) || (len(m.Headers) == 0) != (r.Headers == nil) {
				t.Errorf("%s: record %d has key %q, headers %#v, priority %d; appended key %q, headers %#v, priority %d",
					from, r.Offset, r.Key, r.Headers, r.Priority, m.Key, m.Headers, m.Priority)
			}
		}
	}
	waitUntil(t, "node b's tail to announce every record", func() bool {
		recs, _ := obs.snapshot()
		return len(recs) >= len(msgs)
	})
	recs, _ := obs.snapshot()
	check("b's tail", recs)
	c := newNode(t, nodeOpts{url: url, prefix: prefix})
	recs, _, err := c.Read(ctx, topic, 0, 0, len(msgs))
	if err != nil {
		t.Fatal(err)
	}
	check("a read on a new node", recs)
}
