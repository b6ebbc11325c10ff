package router_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
)

func TestEmbeddedAsyncDropsToDeadLetters(t *testing.T) {
	g := newGateway(t)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	var mu sync.Mutex
	var got []int64
	ls, err := g.rt.Subscribe("e.*", router.LocalOptions{Mode: router.Async, Queue: 2, Name: "audit"}, func(r *engine.Record) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
		mu.Lock()
		got = append(got, r.Offset)
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	publish := func(i int) {
		if _, err := g.rt.Publish(ctx, engine.Message{Topic: "e.x", Data: []byte(`1`)}); err != nil {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	publish(0)
	<-started // the worker holds offset 0; the queue (2) fills behind it
	for i := 1; i <= 5; i++ {
		publish(i)
	}
	close(release)
	deadline := time.Now().Add(waitTimeout)
	for ls.Stats().Delivered < 3 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	ls.Unsubscribe()
	mu.Lock()
	defer mu.Unlock()
	// drop_old: offsets 1-3 were evicted, 4 and 5 remain.
	if len(got) != 3 || got[0] != 0 || got[1] != 4 || got[2] != 5 {
		t.Fatalf("handled offsets %v, want [0 4 5]", got)
	}
	if st := ls.Stats(); st.Dropped != 3 || st.Delivered != 3 {
		t.Fatalf("stats %+v", st)
	}
	deadline = time.Now().Add(waitTimeout)
	for {
		dls, err := g.eng.DeadLetters(ctx, engine.DeadLetterFilter{Reason: engine.ReasonQueueFull})
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) == 3 {
			if dls[0].Subscriber != "audit e.*" || dls[0].Record.Offset != 1 {
				t.Fatalf("dead letter %+v", dls[0])
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d dead letters, want 3", len(dls))
		}
		time.Sleep(time.Millisecond)
	}
}

func TestEmbeddedSyncIsolatesFailures(t *testing.T) {
	g := newGateway(t)
	var calls int
	if _, err := g.rt.Subscribe("p", router.LocalOptions{}, func(*engine.Record) error { panic("boom") }); err != nil {
		t.Fatal(err)
	}
	ok, _ := g.rt.Subscribe("p", router.LocalOptions{}, func(*engine.Record) error { calls++; return nil })
	c := g.dial(t)
	c.subscribe(t, "p")
	if _, err := g.rt.Publish(context.Background(), engine.Message{Topic: "p", Data: []byte(`"x"`)}); err != nil {
		t.Fatal(err)
	}
	if calls != 1 || ok.Stats().Delivered != 1 {
		t.Fatalf("healthy subscriber ran %d times", calls)
	}
	if m := c.nextOp(t, "message"); m["data"] != "x" {
		t.Fatalf("WebSocket subscriber got %v", m)
	}
	if _, err := g.rt.Publish(context.Background(), engine.Message{Topic: "$sys.x", Data: []byte(`1`)}); err == nil {
		t.Fatal("in-process publish to a $ topic succeeded")
	}
	if _, err := g.rt.Subscribe("a*", router.LocalOptions{}, func(*engine.Record) error { return nil }); err == nil {
		t.Fatal("invalid pattern accepted")
	}
}
