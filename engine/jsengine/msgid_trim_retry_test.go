package jsengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestMsgIDRetryAfterTrimUnderLoad: a record with a MsgID appended while
// more than half the node's asynchronous publishes are pending (under
// load), then trimmed by its topic's MaxMessages: a retry of its MsgID
// within the window still answers the first record's position with
// Duplicate set.
func TestMsgIDRetryAfterTrimUnderLoad(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	e := newNode(t, nodeOpts{url: url, prefix: prefix})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic = "trimmed"
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 1, MaxMessages: 1}); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	sink := prefix + ".trimretry.sink"
	sub, err := nc.SubscribeSync(sink) // takes the publishes, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := e.PublishAsyncUnanswered(sink, jsengine.MaxPipelined/2+1); err != nil {
		t.Fatal(err)
	}
	type res struct {
		a   engine.Appended
		err error
	}
	ch := make(chan res, 1)
	e.AppendAsync(ctx, engine.Message{Topic: topic, MsgID: "m", Data: []byte("first")}, func(a engine.Appended, err error) { ch <- res{a, err} })
	var first res
	select {
	case first = <-ch:
	case <-ctx.Done():
		t.Fatal("timed out waiting for the append")
	}
	if first.err != nil {
		t.Fatal(first.err)
	}
	if _, err := e.Append(ctx, engine.Message{Topic: topic, Data: []byte("next")}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first record trimmed", func() bool {
		recs, _, err := e.Read(ctx, topic, 0, 0, 10)
		return err == nil && len(recs) > 0 && recs[0].Offset > first.a.Offset
	})
	a, err := e.Append(ctx, engine.Message{Topic: topic, MsgID: "m", Data: []byte("retry")})
	if err != nil || !a.Duplicate || a.Offset != first.a.Offset {
		t.Fatalf("retry: %+v, %v; want offset %d with Duplicate set", a, err, first.a.Offset)
	}
}
