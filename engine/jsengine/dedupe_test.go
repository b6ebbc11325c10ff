package jsengine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// replicatingKV is a dedupe bucket in which another node's claim of every
// key is proposed and not yet applied, as a replicated bucket shows it for
// the time replication takes: a create of a key is refused with wrong last
// sequence while a get does not find it. The claim lands (land runs, once)
// at the first get made lag after the first refusal; from then on the
// bucket is itself.
type replicatingKV struct {
	jetstream.KeyValue
	lag  time.Duration
	land func()

	mu      sync.Mutex // guards following
	first   time.Time  // of the first refusal
	refused int
	landed  bool
}

func (kv *replicatingKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	kv.mu.Lock()
	refuse := !kv.landed
	if refuse {
		if kv.refused == 0 {
			kv.first = time.Now()
		}
		kv.refused++
	}
	kv.mu.Unlock()
	if refuse {
		return 0, &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant, Description: "wrong last sequence"}
	}
	return kv.KeyValue.Create(ctx, key, value, opts...)
}

func (kv *replicatingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	kv.mu.Lock()
	land := !kv.landed && kv.refused > 0 && time.Since(kv.first) >= kv.lag
	kv.landed = kv.landed || land
	kv.mu.Unlock()
	if land {
		kv.land()
	}
	return kv.KeyValue.Get(ctx, key)
}

func (kv *replicatingKV) refusals() int {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	return kv.refused
}

// TestMsgIDWhileClaimReplicates: a publish with a MsgID that another node
// has just claimed, while that claim is still being replicated (the
// bucket refuses the create and does not show the claim yet), waits for the
// claim with growing pauses and returns the other node's record with
// Duplicate set; it neither fails as unavailable after a burst of tries
// nor stores the record twice.
func TestMsgIDWhileClaimReplicates(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	a, b := twoNodes(t, nodeOpts{url: url, prefix: prefix})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const topic, id, lag = "claim.replicating", "order-1", 300 * time.Millisecond
	if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	var first engine.Appended
	var firstErr error
	var kv *replicatingKV
	b.WrapDedupe(func(inner jetstream.KeyValue) jetstream.KeyValue {
		kv = &replicatingKV{KeyValue: inner, lag: lag, land: func() {
			first, firstErr = a.Append(ctx, engine.Message{Topic: topic, MsgID: id, Data: []byte(`"a"`)})
		}}
		return kv
	})
	start := time.Now()
	got, err := b.Append(ctx, engine.Message{Topic: topic, MsgID: id, Data: []byte(`"b"`)})
	t.Logf("retry answered after %v and %d refused claims", time.Since(start), kv.refusals())
	if err != nil {
		t.Fatalf("append while another node's claim of the msg_id replicates: %v", err)
	}
	if firstErr != nil {
		t.Fatalf("the other node's append: %v", firstErr)
	}
	if !got.Duplicate || got.Partition != first.Partition || got.Offset != first.Offset || first.Duplicate {
		t.Fatalf("retry = %+v, first = %+v; want the retry to be a duplicate of the first", got, first)
	}
	// Growing pauses, not a spin: about log2(lag/1ms) tries, far fewer
	// on a slow machine.
	if n := kv.refusals(); n > 20 {
		t.Errorf("%d refused claims in %v: the retry spins instead of pausing", n, lag)
	}
	recs, _, err := b.Read(ctx, topic, 0, 0, 10)
	if err != nil || len(recs) != 1 {
		t.Fatalf("read: %d records, %v; want one", len(recs), err)
	}
}

// TestMsgIDClaimReplicationOutlivesContext: a claim in process for longer
// than the publish's context fails the publish with the context's error
// once it ends, not before.
func TestMsgIDClaimReplicationOutlivesContext(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	b := newNode(t, nodeOpts{url: url, prefix: prefix})
	var kv *replicatingKV
	b.WrapDedupe(func(inner jetstream.KeyValue) jetstream.KeyValue {
		kv = &replicatingKV{KeyValue: inner, lag: time.Hour, land: func() {}}
		return kv
	})
	const wait = 200 * time.Millisecond
	// start before the context: the deadline is then at least wait after
	// it, however long the goroutine waits between the two lines.
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err := b.Append(ctx, engine.Message{Topic: "claim.stuck", MsgID: "x", Data: []byte(`1`)})
	took := time.Since(start)
	t.Logf("failed after %v, %d refused claims: %v", took, kv.refusals(), err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("append while a claim stays in process: %v, want the context's deadline", err)
	}
	if took < wait {
		t.Errorf("gave up after %v, before the context's %v", took, wait)
	}
}

// TestMsgIDRetriesOnCluster: on a three-server cluster with three
// replicas, the same MsgIDs appended at once through three nodes (each on
// its own server) all succeed, with one record per MsgID: one append
// stores it and the others report its position with Duplicate set.
func TestMsgIDRetriesOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a NATS cluster")
	}
	c := natstest.NewCluster(t, 3)
	nodes := replicaNodes(t, c, "dedupe", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic, ids = "dedupe.cluster", 30
	if _, err := nodes[0].CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	type answer struct {
		a   engine.Appended
		err error
	}
	answers := make([][]answer, ids)
	var wg sync.WaitGroup
	for i := range ids {
		answers[i] = make([]answer, len(nodes))
		for j, e := range nodes {
			wg.Go(func() {
				a, err := e.Append(ctx, engine.Message{Topic: topic, Key: fmt.Sprint(j), MsgID: fmt.Sprint("id-", i), Data: []byte{byte(j)}})
				answers[i][j] = answer{a, err}
			})
		}
	}
	wg.Wait()
	for i, as := range answers {
		stored := 0
		var ref *engine.Appended // the first answer without an error
		for j, an := range as {
			if an.err != nil {
				t.Errorf("id-%d through node %d: %v", i, j, an.err)
				continue
			}
			if !an.a.Duplicate {
				stored++
			}
			if ref == nil {
				ref = &as[j].a
			} else if an.a.Partition != ref.Partition || an.a.Offset != ref.Offset {
				t.Errorf("id-%d: node %d got %+v, another node %+v; want one position", i, j, an.a, *ref)
			}
		}
		if stored > 1 {
			t.Errorf("id-%d: %d appends stored it, want one: %+v", i, stored, as)
		}
	}
	info, err := nodes[1].Topic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, p := range info.Parts {
		total += p.Next
	}
	if total != ids {
		t.Errorf("%d records stored for %d MsgIDs", total, ids)
	}
}

// TestMsgIDRetryWhileFirstPublishHeld: an append with a MsgID whose
// publish is held up after it claimed the MsgID, and a retry through
// another node meanwhile, store one record between them, reported once as
// stored and once as a duplicate. The retry publishes under the first
// one's claim (its Nats-Msg-Id), which the stream deduplicates, rather
// than waiting for a claim whose node may be gone; past the claim's
// window on the engine's clock too, when the first publish, still to
// come, would land inside the stream's duplicate window: taking a new
// claim then stored the MsgID twice, at once. Also when the first node
// appended to the partition before, so its view of it is behind when its
// held publish goes out: the stream then refuses the publish as not
// following the partition's last record, which is the retry's, and the
// first append reports that record as a duplicate, not as its own.
func TestMsgIDRetryWhileFirstPublishHeld(t *testing.T) {
	const window = time.Minute
	for _, tc := range []struct {
		name    string
		advance time.Duration
		behind  bool // the first node appended to the partition before
	}{
		{"within the window", 0, false},
		{"past the claim's window", window + time.Second, false},
		{"first node's view behind", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := natstest.URL(t)
			clock := enginetest.NewFakeClock(time.Now())
			o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Clock: clock, Policy: engine.GroupPolicy{DedupeWindow: window}}}
			a, b := twoNodes(t, o)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			const topic, id = "claim.held", "order-7"
			if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
				t.Fatal(err)
			}
			var before []engine.Appended
			if tc.behind {
				w, err := a.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"before"`)})
				if err != nil {
					t.Fatal(err)
				}
				before = append(before, w)
			}
			held, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			a.SetBeforeClaimedPublish(func() {
				once.Do(func() {
					close(held)
					<-release
				})
			})
			var first engine.Appended
			var firstErr error
			firstDone := make(chan struct{})
			go func() { // the first append; ends once release is closed
				defer close(firstDone)
				first, firstErr = a.Append(ctx, engine.Message{Topic: topic, MsgID: id, Data: []byte(`"first"`)})
			}()
			var releaseOnce sync.Once
			releaseFirst := func() { releaseOnce.Do(func() { close(release) }); <-firstDone }
			defer releaseFirst()
			select {
			case <-held:
			case <-ctx.Done():
				t.Fatal("the first append never claimed the msg_id")
			}
			clock.Advance(tc.advance)
			retry, err := b.Append(ctx, engine.Message{Topic: topic, MsgID: id, Data: []byte(`"retry"`)})
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			releaseFirst()
			if firstErr != nil {
				t.Fatalf("first append: %v", firstErr)
			}
			t.Logf("first: %+v; retry: %+v", first, retry)
			recs, _, err := b.Read(ctx, topic, 0, 0, 10)
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != len(before)+1 {
				t.Fatalf("%d records stored for one msg_id after %d without: %v", len(recs), len(before), recs)
			}
			if first.Offset != retry.Offset || first.Duplicate == retry.Duplicate {
				t.Errorf("first %+v and retry %+v: want one record, reported once as stored and once as a duplicate", first, retry)
			}
		})
	}
}

// noConfirmKV is a dedupe bucket whose updates fail: an append's claim
// stays unconfirmed although its record was stored.
type noConfirmKV struct{ jetstream.KeyValue }

func (noConfirmKV) Update(context.Context, string, []byte, uint64) (uint64, error) {
	return 0, errors.New("update lost")
}

// TestMsgIDUnconfirmedClaimExpires: a MsgID whose claim was never
// confirmed, although its record was stored, is stored again by a repeat
// after the dedupe window (on the engine's clock), as after a confirmed
// claim, and the repeat's record is deduplicated from then on.
func TestMsgIDUnconfirmedClaimExpires(t *testing.T) {
	url := natstest.URL(t)
	const window = time.Minute
	clock := enginetest.NewFakeClock(time.Now())
	o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Clock: clock, Policy: engine.GroupPolicy{DedupeWindow: window}}}
	a, b := twoNodes(t, o)
	a.WrapDedupe(func(kv jetstream.KeyValue) jetstream.KeyValue { return noConfirmKV{kv} })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const topic, id = "claim.unconfirmed", "order-9"
	first, err := a.Append(ctx, engine.Message{Topic: topic, MsgID: id, Data: []byte(`1`)})
	if err != nil || first.Duplicate || first.Offset != 0 {
		t.Fatalf("first append: %+v, %v", first, err)
	}
	if got, err := b.Append(ctx, engine.Message{Topic: topic, MsgID: id, Data: []byte(`2`)}); err != nil || !got.Duplicate || got.Offset != 0 {
		t.Fatalf("repeat within the window: %+v, %v; want a duplicate of offset 0", got, err)
	}
	clock.Advance(window + time.Second)
	later, err := b.Append(ctx, engine.Message{Topic: topic, MsgID: id, Data: []byte(`3`)})
	if err != nil || later.Duplicate || later.Offset != 1 {
		t.Fatalf("repeat after the window: %+v, %v; want a new record at offset 1", later, err)
	}
	if got, err := b.Append(ctx, engine.Message{Topic: topic, MsgID: id, Data: []byte(`4`)}); err != nil || !got.Duplicate || got.Offset != 1 {
		t.Fatalf("repeat of the new record: %+v, %v; want a duplicate of offset 1", got, err)
	}
}
