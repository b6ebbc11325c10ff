package jsengine_test

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/switchyard/switchyard/engine"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestScaledUnderARunningNode: a node started with one replica keeps
// running while another node, started with three, scales the record
// stream up; both then pipeline appends into one partition at once. The
// first node must follow the stream's new count (atomic batches, not the
// message-ID chain a replicated stream cannot take: its first refused link
// stops the stream) and every append is answered once, without an error,
// in order.
func TestScaledUnderARunningNode(t *testing.T) {
	c := natstest.NewCluster(t, 3)
	a, err := openReplicas(c.URLs(0), "scaledr", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeEngine(t, a) })
	b, err := openReplicas(c.URLs(1), "scaledr", 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeEngine(t, b) })
	pipelinedShare(t, a, b, 300)
	if a.Batches() == 0 {
		t.Errorf("the node started with one replica published no batch into the three-replica stream")
	}
	t.Logf("batches: a %d, b %d; one at a time: a %d, b %d", a.Batches(), b.Batches(), a.OneAtATime(), b.OneAtATime())
}

// TestBatchRefusedManyTimes: a node's batch is refused again and again
// because another node appends to its partition before each of its
// resends (150 times, more than the count that used to end it). The batch
// is sent again each time, within a bound of time rather than of tries,
// and its records are stored once the other node stops, in order, without
// an error. Before: "too much contention: engine: unavailable" after 100
// refusals.
func TestBatchRefusedManyTimes(t *testing.T) {
	c := natstest.NewCluster(t, 3)
	a, err := openReplicas(c.URLs(0), "refused", 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeEngine(t, a) })
	b, err := openReplicas(c.URLs(1), "refused", 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeEngine(t, b) })
	const topic = "refused.t"
	if _, err := a.CreateTopic(t.Context(), engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	// a knows the partition's state; b's append makes it stale, so a's
	// first batch is refused.
	if _, err := a.Append(t.Context(), engine.Message{Topic: topic, Data: []byte(`"a"`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Append(t.Context(), engine.Message{Topic: topic, Data: []byte(`"b"`)}); err != nil {
		t.Fatal(err)
	}
	const interfere = 150
	var bErr error
	cut := 0
	a.SetBeforeBatchResend(func() { // on a's ack reader, one at a time
		if cut < interfere && bErr == nil {
			cut++
			_, bErr = b.Append(context.Background(), engine.Message{Topic: topic, Data: []byte(`"b"`)})
		}
	})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var got []engine.Appended
	var errs []error
	wg.Add(10)
	for i := range 10 {
		a.AppendAsync(t.Context(), engine.Message{Topic: topic, Data: []byte(strconv.Itoa(i))}, func(ap engine.Appended, err error) {
			mu.Lock()
			got = append(got, ap)
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
			wg.Done()
		})
	}
	waitGroup(t, &wg)
	if bErr != nil {
		t.Fatalf("b's append: %v", bErr)
	}
	if len(errs) > 0 {
		t.Fatalf("after %d refusals: %v", cut, errs[0])
	}
	if cut != interfere {
		t.Fatalf("the batch was refused %d times, want %d: the test did not interfere as meant", cut, interfere)
	}
	for i, ap := range got {
		if i > 0 && ap.Offset != got[i-1].Offset+1 {
			t.Fatalf("offsets %v, want a's records back to back in call order", got)
		}
	}
}
