package jsengine_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestPipelinedMsgIDRetryElsewhereKeepsOffsets: node a pipelines X (a
// MsgID) then Y (none) into one partition. Before X is published, node c
// appends Q to the partition, so X is refused; before Y is published, a
// retry of X's MsgID on node b stores it under the claim's Nats-Msg-Id
// (after Q). Y is chained on X's Nats-Msg-Id, which b's record now
// carries: Y must not be stored at the offset a reserved for it behind X
// (b's record holds it). Every offset of the partition is held once.
func TestPipelinedMsgIDRetryElsewhereKeepsOffsets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic = "pipe.retry"
	a, b, c := retryNodes(ctx, t, topic, 1)
	var calls int
	var hookErr error
	a.SetBeforePipelinedPublish(func() { // runs in a's AppendAsync calls, one at a time
		calls++
		switch calls {
		case 1: // before X: another node's record moves the partition on
			_, hookErr = c.Append(ctx, engine.Message{Topic: topic, Data: []byte("Q")})
		case 2: // before Y: a retry of X's MsgID on node b, under a's claim
			if hookErr == nil {
				_, hookErr = b.Append(ctx, engine.Message{Topic: topic, MsgID: "m", Data: []byte("X")})
			}
		}
	})
	got, errs := appendAllAsync(ctx, t, a, []engine.Message{{Topic: topic, MsgID: "m", Data: []byte("X")}, {Topic: topic, Data: []byte("Y")}})
	if hookErr != nil || len(errs) > 0 {
		t.Fatalf("hook: %v, appends: %v", hookErr, errs)
	}
	recs, _, err := a.Read(ctx, topic, 0, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for i, r := range recs {
		seen = append(seen, string(r.Data))
		if r.Offset != int64(i) {
			t.Fatalf("partition holds %q at offsets %v; want each offset once (a's answers %+v)", seen, recOffsets(recs), got)
		}
	}
	if len(recs) != 3 || got["X"].Offset == got["Y"].Offset {
		t.Fatalf("partition holds %q at offsets %v, a's answers %+v; want Q, X, Y once each", seen, recOffsets(recs), got)
	}
}

// retryNodes starts three nodes sharing one prefix and creates topic
// with parts partitions: a pipelines, b retries, c moves a partition on.
func retryNodes(ctx context.Context, t *testing.T, topic string, parts int) (a, b, c *jsengine.Engine) {
	t.Helper()
	url := natstest.URL(t)
	o := nodeOpts{url: url, prefix: natstest.Prefix(t, url)}
	a, b = twoNodes(t, o)
	c = newNode(t, o)
	if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	return a, b, c
}

// appendAllAsync hands msgs to e's AppendAsync, in order, and waits for
// every answer: the answers by message data, and the errors.
func appendAllAsync(ctx context.Context, t *testing.T, e *jsengine.Engine, msgs []engine.Message) (map[string]engine.Appended, []error) {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	got := map[string]engine.Appended{}
	var errs []error
	for _, m := range msgs {
		wg.Add(1)
		e.AppendAsync(ctx, m, func(ap engine.Appended, err error) {
			mu.Lock()
			got[string(m.Data)] = ap
			if err != nil {
				errs = append(errs, err)
			}
			mu.Unlock()
			wg.Done()
		})
	}
	waitGroup(t, &wg)
	return got, errs
}

func recOffsets(recs []*engine.Record) []int64 {
	var out []int64
	for _, r := range recs {
		out = append(out, r.Offset)
	}
	return out
}

// TestPipelinedMsgIDRetryElsewhereThroughOtherPartition: as
// TestPipelinedMsgIDRetryElsewhereKeepsOffsets, with a record of another
// partition between: a pipelines X (a MsgID, partition 1), Y (partition
// 0), W (partition 1). c's record moves partition 1 on before X, b's
// retry of X's MsgID is stored after it before Y: Y is chained on X's
// Nats-Msg-Id (passing on b's record), W on Y's. W must not be stored at
// the offset a reserved for it behind X, which b's record holds.
func TestPipelinedMsgIDRetryElsewhereThroughOtherPartition(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const topic = "pipe.retry2"
	a, b, c := retryNodes(ctx, t, topic, 2)
	var k0, k1 string
	for i := 0; i < 100 && (k0 == "" || k1 == ""); i++ {
		k := "k" + strconv.Itoa(i)
		if engine.KeyPartition(k, 2) == 0 {
			k0 = k
		} else {
			k1 = k
		}
	}
	var calls int
	var hookErr error
	wPublishing := make(chan struct{})
	// The ack reader answers X only once W is being published (W holds
	// its partition until it is), or once W is appended one at a time
	// (it then waits for X's answer).
	oneAtATime := a.OneAtATime()
	a.SetBeforeSettle(func() {
		for a.OneAtATime() == oneAtATime && ctx.Err() == nil {
			select {
			case <-wPublishing:
				return
			case <-time.After(time.Millisecond):
			}
		}
	})
	a.SetBeforePipelinedPublish(func() {
		calls++
		switch calls {
		case 3:
			close(wPublishing)
		case 1:
			_, hookErr = c.Append(ctx, engine.Message{Topic: topic, Key: k1, Data: []byte("Q")})
		case 2:
			if hookErr == nil {
				_, hookErr = b.Append(ctx, engine.Message{Topic: topic, Key: k1, MsgID: "m", Data: []byte("X")})
			}
		}
	})
	got, errs := appendAllAsync(ctx, t, a, []engine.Message{
		{Topic: topic, Key: k1, MsgID: "m", Data: []byte("X")},
		{Topic: topic, Key: k0, Data: []byte("Y")},
		{Topic: topic, Key: k1, Data: []byte("W")},
	})
	if hookErr != nil || len(errs) > 0 {
		t.Fatalf("hook: %v, appends: %v", hookErr, errs)
	}
	recs, _, err := a.Read(ctx, topic, 1, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, r := range recs {
		seen = append(seen, string(r.Data))
	}
	if len(recs) != 3 || got["X"].Offset == got["W"].Offset {
		t.Fatalf("partition 1 holds %q at offsets %v, a's answers %+v; want Q, X, W once each", seen, recOffsets(recs), got)
	}
	for i, r := range recs {
		if r.Offset != int64(i) {
			t.Fatalf("partition 1 holds %q at offsets %v; want each offset once", seen, recOffsets(recs))
		}
	}
}
