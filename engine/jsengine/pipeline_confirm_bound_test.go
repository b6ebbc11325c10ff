package jsengine_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// TestBatchConfirmationsKeepBound: a burst of records with MsgIDs
// into a replicated stream goes in batches; each stored batch's claims are
// confirmed on the node's ack reader, record by record, before the
// record's answer (settleBatch -> confirmClaim). With more than
// maxPipelined/2 publishes pending (another producer's burst, handed over
// as the link goes silent) every confirmation is a synchronous Update of
// up to claimConfirmWait (5 s): the ack reader stays in the batch for 5 s
// per record, and the batch's stored records, and everything else the
// node pipelines, are answered long past appendMax (8 s).
func TestBatchConfirmationsKeepBound(t *testing.T) {
	e, px := stalledReplicas(t, "rvjsconfirm")
	ctx := t.Context()
	for _, tp := range []string{"ca", "cb"} {
		if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: tp, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
		if _, errs := appendAllAsync(ctx, t, e, []engine.Message{{Topic: tp, MsgID: "warm", Data: []byte("warm")}}); len(errs) > 0 {
			t.Fatal(errs[0])
		}
	}
	const n, other = 300, 600
	var (
		mu       sync.Mutex
		called   = make([]time.Time, n)
		answered = make([]time.Time, n)
		errs     = make([]error, n)
		left     = n + other
		answers  int
		once     sync.Once
	)
	// The other producer's burst, handed over from the answer of the
	// first record of the first burst's second batch, as the link goes
	// silent.
	second := func() {
		px.Stall()
		for i := range other {
			e.AppendAsync(ctx, engine.Message{Topic: "cb", MsgID: fmt.Sprintf("b%d", i), Data: []byte("b")}, func(engine.Appended, error) {
				mu.Lock()
				left--
				mu.Unlock()
			})
		}
	}
	// The burst is handed over with the link silent for 4 s, so every
	// claim is answered at once after it: the first record goes alone,
	// the next 256 in one batch, stored within the bound.
	px.Stall()
	for i := range n {
		mu.Lock()
		called[i] = time.Now()
		mu.Unlock()
		e.AppendAsync(ctx, engine.Message{Topic: "ca", MsgID: fmt.Sprintf("a%d", i), Data: []byte("a")}, func(_ engine.Appended, err error) {
			mu.Lock()
			answered[i], errs[i] = time.Now(), err
			left--
			answers++
			k := answers
			mu.Unlock()
			if k == 2 { // the first record of the burst's second batch (of 256: see below)
				once.Do(second)
			}
		})
	}
	// A silence of 4 s (the claims' acknowledgements, 5 s at most in
	// nats.go, come after it).
	time.Sleep(4 * time.Second)
	px.Resume()
	// Polled: a goroutine waiting for answers that may never come would
	// outlive the test.
	wait := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			mu.Lock()
			l := left
			mu.Unlock()
			if l == 0 {
				return
			}
		}
	}
	wait(20 * time.Second)
	px.Resume()
	wait(60 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	var late, unanswered int
	var worst time.Duration
	for i := range n {
		if answered[i].IsZero() {
			unanswered++
			continue
		}
		if d := answered[i].Sub(called[i]); d > 8500*time.Millisecond {
			late++
			worst = max(worst, d)
		}
	}
	var last time.Duration
	for i := range n {
		if !answered[i].IsZero() {
			last = max(last, answered[i].Sub(called[0]))
		}
	}
	t.Logf("last of the first burst answered %v after its first call; first burst errors: %v", last, errs[n-1])
	if late > 0 || unanswered > 0 || left > 0 {
		t.Errorf("of %d appends: %d answered past 8 s (worst %v after its AppendAsync), %d not answered; %d of both bursts unanswered at the end", n, late, worst, unanswered, left)
	}
}
