package jsengine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestPipelinedReplicatedMsgIDBurst: on a three-server cluster with three
// replicas, a burst of records with new MsgIDs from one producer goes in
// the partition's atomic batches, as a burst without MsgIDs does: it takes
// at most a few times as long as the same burst without MsgIDs, measured
// in the same test, and far fewer batches than records. The records keep
// the call order with contiguous offsets, and the same burst retried
// through another node (on another server) gets every first record's
// position with Duplicate set, storing nothing more. Appended one at a
// time (claim, publish, tail, confirmation: the producer waiting for each),
// the burst took 15-40 times as long as the plain one and no batch.
func TestPipelinedReplicatedMsgIDBurst(t *testing.T) {
	c := natstest.NewCluster(t, 3)
	nodes := replicaNodes(t, c, "idbatch", 2)
	e := nodes[0]
	const topic = "ids.r3"
	if _, err := e.CreateTopic(t.Context(), engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	const n = 300
	// burst hands n appends to node x (one producer, as a session's
	// reader) and waits for every answer; it returns them and the time
	// from the first call to the last answer.
	burst := func(x *jsengine.Engine, id func(i int) string) ([]engine.Appended, time.Duration) {
		t.Helper()
		got := make([]engine.Appended, n)
		var (
			mu       sync.Mutex
			firstErr error
			wg       sync.WaitGroup
		)
		wg.Add(n)
		start := time.Now()
		for i := range n {
			x.AppendAsync(t.Context(), engine.Message{Topic: topic, MsgID: id(i), Data: []byte(strconv.Itoa(i))}, func(a engine.Appended, err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				got[i] = a
				if err != nil && firstErr == nil {
					firstErr = fmt.Errorf("append %d: %w", i, err)
				}
			})
		}
		waitGroup(t, &wg)
		took := time.Since(start)
		if firstErr != nil {
			t.Fatal(firstErr)
		}
		return got, took
	}
	_, warm := burst(e, func(int) string { return "" }) // leaders and partition state settle
	// Three rounds, each a burst without MsgIDs and one with new MsgIDs,
	// compared by their medians.
	var plain, ids [3]time.Duration
	var first []engine.Appended
	var batches int64 // of the bursts with MsgIDs
	for r := range 3 {
		_, plain[r] = burst(e, func(int) string { return "" })
		b := e.Batches()
		var got []engine.Appended
		got, ids[r] = burst(e, func(i int) string { return fmt.Sprintf("m-%d-%d", r, i) })
		batches += e.Batches() - b
		base := int64(n + 2*n*r + n)
		for i, a := range got {
			if a.Duplicate || a.Offset != base+int64(i) {
				t.Fatalf("round %d, record %d with a MsgID: offset %d duplicate %v, want offset %d, stored", r, i, a.Offset, a.Duplicate, base+int64(i))
			}
		}
		if r == 0 {
			first = got
		}
	}
	slices.Sort(plain[:])
	slices.Sort(ids[:])
	ratio := float64(ids[1]) / float64(plain[1])
	t.Logf("%d records: warm-up %v, without MsgIDs %v, with new MsgIDs %v (medians %.1f×); %d batches for the %d records with MsgIDs", n, warm, plain, ids, ratio, batches, 3*n)
	if batches == 0 || batches > 3*n/4 {
		t.Errorf("%d batches for %d records with MsgIDs: they were not batched", batches, 3*n)
	}
	if ratio > 5 {
		t.Errorf("records with MsgIDs took %v (median), %.1f times the %v of the same bursts without: not pipelined", ids[1], ratio, plain[1])
	}
	again, _ := burst(nodes[1], func(i int) string { return fmt.Sprintf("m-0-%d", i) })
	for i, a := range again {
		if !a.Duplicate || a.Offset != first[i].Offset {
			t.Fatalf("retry of %d through another node: offset %d duplicate %v, want offset %d, duplicate", i, a.Offset, a.Duplicate, first[i].Offset)
		}
	}
	info, err := e.Topic(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	if next := info.Parts[0].Next; next != 7*n {
		t.Errorf("partition's next offset %d, want %d: every MsgID once", next, 7*n)
	}
}

// TestReplicatedMsgIDBatchRefusedForRetry: node A queues records with
// MsgIDs x, a, b into a replicated stream; before A's first batch (holding
// x) is published, node B appends x (as a client retrying x through
// another gateway would), under A's unconfirmed claim. A's batch is
// refused for x's Nats-Msg-Id, nothing of it stored; A then reports x at
// B's position as a duplicate and stores a and b after it, in order: x
// once, offsets contiguous.
func TestReplicatedMsgIDBatchRefusedForRetry(t *testing.T) {
	c := natstest.NewCluster(t, 3)
	nodes := replicaNodes(t, c, "idrefuse", 2)
	a, b := nodes[0], nodes[1]
	const topic = "ids.refuse"
	if _, err := a.CreateTopic(t.Context(), engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a.SetBeforeBatchSend(func() {
		once.Do(func() {
			close(held)
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
		})
	})
	ids := []string{"x", "a", "b"}
	got := make([]engine.Appended, len(ids))
	errs := make([]error, len(ids))
	var wg sync.WaitGroup
	wg.Add(len(ids))
	for i, id := range ids {
		a.AppendAsync(t.Context(), engine.Message{Topic: topic, MsgID: id, Data: []byte("A " + id)}, func(r engine.Appended, err error) {
			got[i], errs[i] = r, err
			wg.Done()
		})
	}
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("A's first batch was never sent")
	}
	retry, err := b.Append(t.Context(), engine.Message{Topic: topic, MsgID: "x", Data: []byte("B x")})
	close(release)
	if err != nil || retry.Duplicate || retry.Offset != 0 {
		t.Fatalf("B's append of x: %+v %v, want offset 0, stored", retry, err)
	}
	waitGroup(t, &wg)
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatalf("A's %s: %v", id, errs[i])
		}
	}
	if !got[0].Duplicate || got[0].Offset != 0 {
		t.Errorf("A's x: %+v, want B's record (offset 0) as a duplicate", got[0])
	}
	if got[1].Duplicate || got[1].Offset != 1 || got[2].Duplicate || got[2].Offset != 2 {
		t.Errorf("A's a and b: %+v %+v, want offsets 1 and 2, stored", got[1], got[2])
	}
	recs, _, err := a.Read(t.Context(), topic, 0, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var data []string
	for _, r := range recs {
		data = append(data, string(r.Data))
	}
	if want := []string{"B x", "A a", "A b"}; !slices.Equal(data, want) {
		t.Errorf("log %q, want %q", data, want)
	}
}

// TestAsyncPublishTimeoutIsUnavailable: a pipelined record (or batch, or
// claim) whose acknowledgement nats.go gave up waiting for fails with
// engine.ErrUnavailable (its outcome unknown: a retry with its MsgID is
// safe), as a synchronous publish that timed out does. It reached clients
// as `internal` (faults: isolate-nats-leader, once records with a MsgID
// went in batches).
func TestAsyncPublishTimeoutIsUnavailable(t *testing.T) {
	if err := jsengine.Unavailable("append", jetstream.ErrAsyncPublishTimeout); !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("an acknowledgement nats.go stopped waiting for: %v, want engine.ErrUnavailable", err)
	}
}

// TestReplicatedMsgIDBurstAcrossLeaderChange: node A hands a burst of
// records with new MsgIDs to AppendAsync while the record stream's leader
// steps down in the middle of it; then node B (on another server) appends
// every MsgID again, as clients retrying through another gateway would.
// Whatever A's answers were (stored, or unavailable with the outcome
// unknown), every retry succeeds, A's stored answers and B's agree on each
// MsgID's position, and the log holds each MsgID exactly once.
func TestReplicatedMsgIDBurstAcrossLeaderChange(t *testing.T) {
	c := natstest.NewCluster(t, 3)
	nodes := replicaNodes(t, c, "idlead", 2)
	a, b := nodes[0], nodes[1]
	const topic, n = "ids.leader", 200
	if _, err := a.CreateTopic(t.Context(), engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(c.URLs(2))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	type answer struct {
		a   engine.Appended
		err error
	}
	first := make([]answer, n)
	var wg sync.WaitGroup
	wg.Add(n)
	for i := range n {
		if i == n/2 {
			before := c.StreamLeader("idlead_rec")
			resp, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN.idlead_rec", nil, 10*time.Second)
			if err != nil || !strings.Contains(string(resp.Data), `"success":true`) {
				t.Fatalf("leader step-down: %v %s", err, resp.Data)
			}
			t.Logf("the leader (server %d) stepped down after %d appends", before, i)
		}
		a.AppendAsync(t.Context(), engine.Message{Topic: topic, MsgID: "l-" + strconv.Itoa(i), Data: []byte("l-" + strconv.Itoa(i))}, func(r engine.Appended, err error) {
			first[i] = answer{r, err}
			wg.Done()
		})
	}
	waitGroup(t, &wg)
	failed := 0
	for _, an := range first {
		if an.err != nil {
			failed++
			if !errors.Is(an.err, engine.ErrUnavailable) {
				t.Errorf("A: %v, want a stored record or engine.ErrUnavailable", an.err)
			}
		}
	}
	retry := make([]answer, n)
	for i := range n {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		var r engine.Appended
		err := whenUp(ctx, func() (err error) {
			r, err = b.Append(ctx, engine.Message{Topic: topic, MsgID: "l-" + strconv.Itoa(i), Data: []byte("l-" + strconv.Itoa(i))})
			return err
		})
		cancel()
		retry[i] = answer{r, err}
		if err != nil {
			t.Fatalf("B's retry of l-%d: %v", i, err)
		}
		if f := first[i]; f.err == nil && (!r.Duplicate || r.Offset != f.a.Offset) {
			t.Errorf("l-%d: A stored it at %d, B's retry got %+v", i, f.a.Offset, r)
		}
	}
	recs, _, err := b.Read(t.Context(), topic, 0, 0, 2*n)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, r := range recs {
		count[string(r.Data)]++
	}
	for i := range n {
		id := "l-" + strconv.Itoa(i)
		if count[id] != 1 {
			t.Errorf("%s stored %d times", id, count[id])
		}
		if int(retry[i].a.Offset) >= len(recs) || string(recs[retry[i].a.Offset].Data) != id {
			t.Errorf("%s: B's answer names offset %d, which does not hold it", id, retry[i].a.Offset)
		}
	}
	t.Logf("%d of %d first appends failed across the leader change; %d records", failed, n, len(recs))
}

// whenUp runs fn until it does not fail with engine.ErrUnavailable or ctx
// ends (a leader being elected).
func whenUp(ctx context.Context, fn func() error) error {
	for {
		err := fn()
		if !errors.Is(err, engine.ErrUnavailable) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}
