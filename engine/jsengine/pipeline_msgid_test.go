package jsengine_test

import (
	"fmt"
	"strconv"
	"sync"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestPipelinedMsgID: AppendAsync pipelines records with a MsgID (their
// acknowledgements are not waited for one by one), in call order with
// contiguous offsets; each MsgID is stored once: a repeat while the first
// is in flight, and every repeat afterwards, asynchronous or not, gets the
// first record's position with Duplicate set, and nothing more is stored.
func TestPipelinedMsgID(t *testing.T) {
	url := natstest.URL(t)
	e := newNode(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url)})
	const topic = "pipe.ids"
	if _, err := e.CreateTopic(t.Context(), engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	const n = 200
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	first := make([]engine.Appended, n)
	fail := func(err error) {
		mu.Lock()
		if firstErr == nil {
			firstErr = err
		}
		mu.Unlock()
	}
	last := int64(-1)
	before := e.Pipelined()
	wg.Add(n)
	for i := range n {
		e.AppendAsync(t.Context(), engine.Message{Topic: topic, MsgID: "id-" + strconv.Itoa(i), Data: []byte(strconv.Itoa(i))},
			func(a engine.Appended, err error) {
				defer wg.Done()
				mu.Lock()
				ok := err == nil && !a.Duplicate && a.Offset == last+1
				last = a.Offset
				first[i] = a
				mu.Unlock()
				if !ok {
					fail(fmt.Errorf("append %d: offset %d duplicate %v err %v, want the next offset", i, a.Offset, a.Duplicate, err))
				}
			})
	}
	waitGroup(t, &wg)
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	// A record is not chained on a MsgID's record in flight (another
	// node's retry could store under its Nats-Msg-Id: see
	// TestPipelinedMsgIDRetryElsewhereKeepsOffsets), so how many are
	// pipelined depends on how fast the acknowledgements come; the first
	// always is.
	if p := e.Pipelined() - before; p < 1 {
		t.Fatalf("%d of %d appends with a MsgID were pipelined", p, n)
	}
	// Every repeat, pipelined or not, is the first record.
	wg.Add(n)
	for i := range n {
		m := engine.Message{Topic: topic, MsgID: "id-" + strconv.Itoa(i), Data: []byte("again")}
		check := func(a engine.Appended, err error) {
			if err != nil || !a.Duplicate || a.Offset != first[i].Offset {
				fail(fmt.Errorf("repeat of %d: offset %d duplicate %v err %v, want offset %d duplicate", i, a.Offset, a.Duplicate, err, first[i].Offset))
			}
		}
		if i%2 == 0 {
			e.AppendAsync(t.Context(), m, func(a engine.Appended, err error) { check(a, err); wg.Done() })
		} else {
			check(e.Append(t.Context(), m))
			wg.Done()
		}
	}
	waitGroup(t, &wg)
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	// A repeat while the first is in flight waits for it.
	wg.Add(4)
	var got [4]engine.Appended
	for j := range 4 {
		e.AppendAsync(t.Context(), engine.Message{Topic: topic, MsgID: "burst", Data: []byte("b")}, func(a engine.Appended, err error) {
			if err != nil {
				fail(err)
			}
			got[j] = a
			wg.Done()
		})
	}
	waitGroup(t, &wg)
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	for j, a := range got {
		if a.Offset != n || a.Duplicate != (j > 0) {
			t.Errorf("append %d of one MsgID: offset %d duplicate %v, want offset %d, duplicate after the first", j, a.Offset, a.Duplicate, n)
		}
	}
	info, err := e.Topic(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if o := info.Parts[0]; o.Next != n+1 {
		t.Errorf("partition's next offset %d, want %d: every MsgID once", o.Next, n+1)
	}
}

// TestPipelinedMsgIDTwoNodes: two nodes pipeline the same MsgIDs into one
// partition at once: each MsgID is stored once, both nodes report its one
// position, and exactly one of them reports it as stored (not Duplicate).
func TestPipelinedMsgIDTwoNodes(t *testing.T) {
	url := natstest.URL(t)
	o := nodeOpts{url: url, prefix: natstest.Prefix(t, url)}
	a, b := twoNodes(t, o)
	const topic = "pipe.ids2"
	if _, err := a.CreateTopic(t.Context(), engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	const n = 150
	var mu sync.Mutex
	res := make([][]engine.Appended, n)
	var errs []error
	var wg sync.WaitGroup
	for _, e := range []engine.AsyncAppender{a, b} {
		wg.Add(n)
		go func() {
			for i := range n {
				e.AppendAsync(t.Context(), engine.Message{Topic: topic, MsgID: "id-" + strconv.Itoa(i), Data: []byte(strconv.Itoa(i))},
					func(ap engine.Appended, err error) {
						mu.Lock()
						if err != nil {
							errs = append(errs, fmt.Errorf("append %d: %w", i, err))
						}
						res[i] = append(res[i], ap)
						mu.Unlock()
						wg.Done()
					})
			}
		}()
	}
	waitGroup(t, &wg)
	if len(errs) > 0 {
		t.Fatal(errs[0])
	}
	seen := map[int64]int{}
	for i, r := range res {
		if len(r) != 2 || r[0].Offset != r[1].Offset || r[0].Duplicate == r[1].Duplicate {
			t.Fatalf("MsgID %d: answers %+v, want one position, stored once", i, r)
		}
		seen[r[0].Offset]++
	}
	info, err := a.Topic(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if o := info.Parts[0]; o.Next != n || len(seen) != n {
		t.Errorf("partition's next offset %d, %d distinct positions; want %d of each", o.Next, len(seen), n)
	}
	t.Logf("pipelined: a %d, b %d", a.Pipelined(), b.Pipelined())
}
