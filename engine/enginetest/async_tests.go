package enginetest

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// Tests of engine.AsyncAppender; they skip for an engine without it.

// asyncResult is one AppendAsync call's outcome, in call order.
type asyncResult struct {
	calls int
	a     engine.Appended
	err   error
	order int // position among the done calls of its partition
}

// countingObserver counts the records announced per topic.
type countingObserver struct {
	mu sync.Mutex
	n  map[string]int
}

func (o *countingObserver) Appended(r *engine.Record) {
	o.mu.Lock()
	o.n[r.Topic]++
	o.mu.Unlock()
}

func (*countingObserver) TopicDeleted(string) {}

func (o *countingObserver) count(topic string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[topic]
}

// testAsyncAppendOrder: many AppendAsync calls in flight, over keys and
// partitions, with Appends of another producer mixed in. Every done runs
// once, after the record was announced; each partition's done calls come
// in call order; offsets are contiguous; and every key's records are
// stored in the order they were appended. It is one scenario of about
// 100 lines: the producers, the observer and the checks share its state.
func testAsyncAppendOrder(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	aa, ok := env.e.(engine.AsyncAppender)
	if !ok {
		t.Skip("engine has no AppendAsync")
	}
	name := env.topic("async")
	const parts, keys, n, syncN = 3, 7, 600, 60
	env.create(engine.TopicConfig{Name: name, Partitions: parts, Partitioner: engine.KeyHash})
	obs := &countingObserver{n: map[string]int{}}
	stop := env.e.Watch(obs)
	defer stop()

	var mu sync.Mutex
	results := make([]asyncResult, n)
	doneSeq := make([]int, parts) // done calls per partition so far
	var wg sync.WaitGroup
	wg.Add(n)
	var mixed sync.WaitGroup
	mixErr := make(chan error, 1)
	mixed.Go(func() { // a second producer with Append, on keys of its own
		for i := range syncN {
			if _, err := env.e.Append(ctx(), engine.Message{Topic: name, Key: "sync-" + strconv.Itoa(i%3), Data: []byte("s/" + strconv.Itoa(i))}); err != nil {
				mixErr <- err
				return
			}
		}
	})
	for i := range n {
		key := fmt.Sprintf("k%d", i%keys)
		m := engine.Message{Topic: name, Key: key, Data: fmt.Appendf(nil, "%s/%d", key, i/keys)}
		aa.AppendAsync(ctx(), m, func(a engine.Appended, err error) {
			seen := obs.count(name)
			mu.Lock()
			r := &results[i]
			r.calls++
			r.a, r.err = a, err
			if err == nil {
				r.order = doneSeq[a.Partition]
				doneSeq[a.Partition]++
				if seen == 0 {
					r.err = fmt.Errorf("done ran before any record was announced")
				}
			}
			mu.Unlock()
			wg.Done()
		})
	}
	waitGroupOrFail(t, &wg, 6*env.timeout, "every done call")
	mixed.Wait()
	select {
	case err := <-mixErr:
		t.Fatalf("Append beside AppendAsync: %v", err)
	default:
	}

	mu.Lock()
	defer mu.Unlock()
	last := make([]asyncResult, parts)
	for p := range last {
		last[p] = asyncResult{order: -1, a: engine.Appended{Offset: -1}}
	}
	for i, r := range results {
		if r.calls != 1 {
			t.Fatalf("call %d: done ran %d times", i, r.calls)
		}
		if r.err != nil {
			t.Fatalf("call %d: %v", i, r.err)
		}
		p := r.a.Partition
		if r.order != last[p].order+1 || r.a.Offset <= last[p].a.Offset {
			t.Fatalf("call %d on partition %d: done #%d at offset %d after done #%d at offset %d", i, p, r.order, r.a.Offset, last[p].order, last[p].a.Offset)
		}
		last[p] = r
	}
	total := 0
	for p := range parts {
		recs, _ := env.read(name, p, 0, n+syncN)
		next := map[string]int{}
		for i, r := range recs {
			if r.Offset != int64(i) {
				t.Fatalf("partition %d: record %d has offset %d", p, i, r.Offset)
			}
			key, seqText, _ := strings.Cut(string(r.Data), "/")
			if key == "s" {
				continue
			}
			seq, err := strconv.Atoi(seqText)
			if err != nil || key != r.Key {
				t.Fatalf("record %q with key %q is not what was appended", r.Data, r.Key)
			}
			if seq != next[key] {
				t.Fatalf("partition %d: key %s record %d stored where %d was due", p, key, seq, next[key])
			}
			next[key]++
		}
		total += len(recs)
	}
	if total != n+syncN {
		t.Fatalf("stored %d records, want %d", total, n+syncN)
	}
	if got := obs.count(name); got != n+syncN {
		t.Fatalf("observer saw %d records, want %d", got, n+syncN)
	}
}

// testAsyncAppendErrors: AppendAsync reports what Append would, through
// done, once: an unknown topic on a strict engine.
func testAsyncAppendErrors(t *testing.T, s *suite) {
	env := s.env(t, Config{Strict: true})
	aa, ok := env.e.(engine.AsyncAppender)
	if !ok {
		t.Skip("engine has no AppendAsync")
	}
	got := make(chan error, 2)
	aa.AppendAsync(ctx(), engine.Message{Topic: env.topic("missing"), Data: []byte("x")}, func(_ engine.Appended, err error) {
		got <- err
	})
	select {
	case err := <-got:
		if err == nil || !errors.Is(err, engine.ErrUnknownTopic) {
			t.Fatalf("AppendAsync to a missing topic on a strict engine: %v, want ErrUnknownTopic", err)
		}
	case <-time.After(env.timeout):
		t.Fatal("done not called")
	}
}

func waitGroupOrFail(t *testing.T, wg *sync.WaitGroup, d time.Duration, what string) {
	t.Helper()
	ch := make(chan struct{})
	go func() { // exits when wg is done; the test fails (and ends) first otherwise
		wg.Wait()
		close(ch)
	}()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("%s: not within %v", what, d)
	}
}
