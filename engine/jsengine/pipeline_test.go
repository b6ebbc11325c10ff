package jsengine_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestPipelinedNodesShareAPartition: two nodes pipeline appends to one
// partition at once, so their chains keep breaking each other. Offsets
// stay 0..n-1 without gaps or repeats, every append is answered once and
// succeeds, and each node's records are stored in its call order.
func TestPipelinedNodesShareAPartition(t *testing.T) {
	t.Run("one server", func(t *testing.T) {
		url := natstest.URL(t)
		prefix := natstest.Prefix(t, url)
		pipelinedShare(t, newNode(t, nodeOpts{url: url, prefix: prefix}), newNode(t, nodeOpts{url: url, prefix: prefix}), 300)
	})
	t.Run("three servers, three replicas", func(t *testing.T) {
		// With three replicas AppendAsync appends one at a time (see
		// pipeline.go); the guarantees are the same.
		c := natstest.NewCluster(t, 3)
		nodes := replicaNodes(t, c, "pipe", 2)
		pipelinedShare(t, nodes[0], nodes[1], 100)
	})
}

func pipelinedShare(t *testing.T, a, b *jsengine.Engine, each int) {
	nodes := []*jsengine.Engine{a, b}
	const topic = "pipe.shared"
	if _, err := nodes[0].CreateTopic(t.Context(), engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	answers := map[string]int{}
	var firstErr error
	for ni, n := range nodes {
		wg.Add(each)
		go func() { // one producer per node; exits once it has handed over every append
			for i := range each {
				data := fmt.Sprintf("%d/%d", ni, i)
				n.AppendAsync(t.Context(), engine.Message{Topic: topic, Data: []byte(data)}, func(_ engine.Appended, err error) {
					mu.Lock()
					answers[data]++
					if err != nil && firstErr == nil {
						firstErr = fmt.Errorf("%s: %w", data, err)
					}
					mu.Unlock()
					wg.Done()
				})
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }() // exits when every append is answered
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("appends not answered within 60s")
	}
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	for d, n := range answers {
		if n != 1 {
			t.Fatalf("%s answered %d times", d, n)
		}
	}
	recs, _, err := nodes[1].Read(t.Context(), topic, 0, 0, 2*each+1)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2*each {
		t.Fatalf("stored %d records, want %d", len(recs), 2*each)
	}
	next := []int{0, 0}
	for i, r := range recs {
		if r.Offset != int64(i) {
			t.Fatalf("record %d has offset %d", i, r.Offset)
		}
		node, seq, _ := strings.Cut(string(r.Data), "/")
		ni, _ := strconv.Atoi(node)
		si, _ := strconv.Atoi(seq)
		if si != next[ni] {
			t.Fatalf("node %d's record %d stored where %d was due", ni, si, next[ni])
		}
		next[ni]++
	}
	t.Logf("refused and appended again: node 0 %d, node 1 %d", nodes[0].Reappends(), nodes[1].Reappends())
	if nodes[0].Reappends()+nodes[1].Reappends() == 0 {
		t.Log("no chain broke: the nodes' appends did not interleave this time")
	}
}

// TestPipelinedCloseInFlight: Close with pipelined appends in flight
// answers each exactly once, and every append answered without an error
// is stored (read back by another node).
func TestPipelinedCloseInFlight(t *testing.T) {
	t.Run("one server", func(t *testing.T) {
		url := natstest.URL(t)
		prefix := natstest.Prefix(t, url)
		pipelinedCloseInFlight(t, newNode(t, nodeOpts{url: url, prefix: prefix}), func() *jsengine.Engine {
			return newNode(t, nodeOpts{url: url, prefix: prefix})
		})
	})
	t.Run("three servers, three replicas", func(t *testing.T) {
		// Atomic batches (pipeline_batch.go), some in flight and some
		// queued as Close comes.
		c := natstest.NewCluster(t, 3)
		open := func() *jsengine.Engine {
			e, err := openReplicas(c.URLs(0), "pipeclose", 3)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = e.Close(t.Context()) })
			return e
		}
		pipelinedCloseInFlight(t, open(), open)
	})
}

func pipelinedCloseInFlight(t *testing.T, e *jsengine.Engine, other func() *jsengine.Engine) {
	const topic, n = "pipe.close", 400
	var wg sync.WaitGroup
	var mu sync.Mutex
	calls := make([]int, n)
	ok := map[int64]string{}
	quarter := make(chan struct{}) // closed once more than n/4 are answered without error
	wg.Add(n)
	for i := range n {
		data := strconv.Itoa(i)
		e.AppendAsync(t.Context(), engine.Message{Topic: topic, Data: []byte(data)}, func(a engine.Appended, err error) {
			mu.Lock()
			calls[i]++
			if err == nil {
				ok[a.Offset] = data
				if len(ok) == n/4+1 {
					close(quarter)
				}
			}
			mu.Unlock()
			wg.Done()
		})
		if i == n/4 {
			// The first quarter answered, then Close with the rest going in.
			select {
			case <-quarter:
			case <-time.After(30 * time.Second):
				t.Fatal("the first appends not answered within 30s")
			}
			go func() { _ = e.Close(t.Context()) }() // returns once the engine's goroutines did
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }() // exits when every append is answered
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("appends not answered within 30s of Close")
	}
	for i, c := range calls {
		if c != 1 {
			t.Fatalf("append %d answered %d times", i, c)
		}
	}
	recs, _, err := other().Read(t.Context(), topic, 0, 0, n+1)
	if err != nil {
		t.Fatal(err)
	}
	stored := map[int64]string{}
	for _, r := range recs {
		stored[r.Offset] = string(r.Data)
	}
	if len(ok) <= n/4 {
		t.Fatalf("only %d appends answered without error", len(ok))
	}
	for off, data := range ok {
		if stored[off] != data {
			t.Fatalf("acknowledged append %s at offset %d: stored %q", data, off, stored[off])
		}
	}
	t.Logf("%d of %d answered without error before and during Close; %d stored", len(ok), n, len(recs))
}

// TestPipelinedAtTheCap: a large drop_oldest partition that has reached
// its MaxMessages keeps pipelining. It trims back to the cap once per
// trimSlack records (holding at most cap + slack records) instead of
// appending and trimming one record at a time, which before made every
// append of a full topic wait for a publish and a purge round trip.
func TestPipelinedAtTheCap(t *testing.T) {
	url := natstest.URL(t)
	e := newNode(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url)})
	const topic, cap, slack, extra = "pipe.cap", 32768, 2048, 8192
	if _, err := e.CreateTopic(t.Context(), engine.TopicConfig{Name: topic, Partitions: 1, MaxMessages: cap, OnFull: engine.DropOldest}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	last := int64(-1)
	for i := range cap + extra {
		wg.Add(1)
		e.AppendAsync(t.Context(), engine.Message{Topic: topic, Data: []byte(strconv.Itoa(i))}, func(a engine.Appended, err error) {
			mu.Lock()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if err == nil && a.Offset != last+1 && firstErr == nil {
				firstErr = fmt.Errorf("append %d stored at offset %d after %d", i, a.Offset, last)
			}
			last = a.Offset
			mu.Unlock()
			wg.Done()
		})
		if i == cap-1 {
			wg.Wait() // the partition is at its cap
		}
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }() // exits once every append is answered
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("appends not answered within 60 s")
	}
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	// Past the cap, about one append in slack trims; the others pipeline.
	if n := e.OneAtATime(); n > extra/4 {
		t.Errorf("%d of the %d appends past the cap went one at a time, want about one per %d", n, extra, slack)
	}
	info, err := e.Topic(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	o := info.Parts[0]
	if held := o.Next - o.Earliest; o.Next != cap+extra || held < cap || held > cap+slack {
		t.Errorf("partition holds offsets %d..%d (%d records), want next %d and %d to %d records", o.Earliest, o.Next, held, cap+extra, cap, cap+slack)
	}
}
