package jsengine_test

// The acknowledgement inbox at the engine's level: they hold
// on the code they were written against.

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestAckInboxTwoNodesContendExactlyOnce: two nodes on one prefix chain
// records into the same partitions at once, so refusals and re-appends
// happen; every AppendAsync is answered exactly once, and every record is
// stored exactly once, at the offset it was answered with.
func TestAckInboxTwoNodesContendExactlyOnce(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	a, b := twoNodes(t, nodeOpts{url: url, prefix: prefix})
	ctx := context.Background()
	const topic, perNode, parts = "rvjs.contend", 300, 2
	if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	type ans struct {
		a     engine.Appended
		err   error
		calls int
	}
	var mu sync.Mutex
	got := map[string]*ans{}
	var wg sync.WaitGroup
	for i := range perNode {
		for n, e := range []interface {
			AppendAsync(context.Context, engine.Message, func(engine.Appended, error))
		}{a, b} {
			data := fmt.Sprintf("%d-%d", n, i)
			mu.Lock()
			got[data] = &ans{}
			mu.Unlock()
			wg.Add(1)
			e.AppendAsync(ctx, engine.Message{Topic: topic, Key: fmt.Sprint(i % 4), Priority: 1, Data: []byte(data)}, func(ap engine.Appended, err error) {
				mu.Lock()
				g := got[data]
				g.calls++
				first := g.calls == 1
				if first {
					g.a, g.err = ap, err
				}
				mu.Unlock()
				if first {
					wg.Done()
				}
			})
		}
	}
	waitGroup(t, &wg)
	stored := map[string]int{}
	at := map[string]engine.Appended{}
	for p := range parts {
		recs, _, err := a.Read(ctx, topic, p, 0, 4*perNode)
		if err != nil {
			t.Fatal(err)
		}
		for i, r := range recs {
			if r.Offset != int64(i) {
				t.Fatalf("partition %d: record %d at offset %d", p, i, r.Offset)
			}
			stored[string(r.Data)]++
			at[string(r.Data)] = engine.Appended{Partition: p, Offset: r.Offset}
		}
	}
	t.Logf("pipelined %d+%d, re-appended %d+%d", a.Pipelined(), b.Pipelined(), a.Reappends(), b.Reappends())
	if a.Pipelined()+b.Pipelined() == 0 {
		t.Fatal("no record was chained: the test did not reach the inbox")
	}
	mu.Lock()
	defer mu.Unlock()
	for data, g := range got {
		switch {
		case g.calls != 1:
			t.Errorf("%s answered %d times", data, g.calls)
		case g.err != nil:
			t.Errorf("%s: %v", data, g.err)
		case stored[data] != 1:
			t.Errorf("%s stored %d times", data, stored[data])
		case at[data].Partition != g.a.Partition || at[data].Offset != g.a.Offset:
			t.Errorf("%s answered at %d/%d, stored at %d/%d", data, g.a.Partition, g.a.Offset, at[data].Partition, at[data].Offset)
		}
	}
}

// TestAckInboxCloseMidStreamAnswersOnce: a node closed while its chained
// records are in flight answers every AppendAsync exactly once.
func TestAckInboxCloseMidStreamAnswersOnce(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	e := newNode(t, nodeOpts{url: url, prefix: prefix})
	ctx := context.Background()
	const topic, n = "rvjs.closemid", 2000
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 3}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := make([]int, n)
	var wg sync.WaitGroup
	wg.Add(n)
	half := make(chan struct{})
	go func() { // exits once every record is handed to AppendAsync
		for i := range n {
			if i == n/2 {
				close(half)
			}
			e.AppendAsync(ctx, engine.Message{Topic: topic, Key: fmt.Sprint(i), Data: []byte("x")}, func(engine.Appended, error) {
				mu.Lock()
				calls[i]++
				c := calls[i]
				mu.Unlock()
				if c == 1 {
					wg.Done()
				}
			})
		}
	}()
	<-half
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if err := e.Close(cctx); err != nil {
		t.Errorf("Close: %v", err)
	}
	cancel()
	waitGroup(t, &wg)
	mu.Lock()
	defer mu.Unlock()
	for i, c := range calls {
		if c != 1 {
			t.Errorf("record %d answered %d times", i, c)
		}
	}
}
