package jsengine_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// streamReplicas returns the replica count of every stream on url whose
// name contains prefix.
func streamReplicas(t *testing.T, url, prefix string) map[string]int {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := map[string]int{}
	l := js.ListStreams(ctx)
	for si := range l.Info() {
		if name := si.Config.Name; name == prefix+"_rec" || name == prefix+"_dl" || name == "KV_"+prefix+"_topics" ||
			name == "KV_"+prefix+"_groups" || name == "KV_"+prefix+"_live" || name == "KV_"+prefix+"_dedupe" {
			got[name] = si.Config.Replicas
		}
	}
	if err := l.Err(); err != nil {
		t.Fatal(err)
	}
	return got
}

func openReplicas(url, prefix string, replicas int) (*jsengine.Engine, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return jsengine.New(ctx, jsengine.Options{URL: url, Prefix: prefix, Replicas: replicas})
}

// replicaNodes opens n engines with three replicas under prefix, node i
// on server i of c; each closes when the test ends.
func replicaNodes(t *testing.T, c *natstest.Cluster, prefix string, n int) []*jsengine.Engine {
	t.Helper()
	var nodes []*jsengine.Engine
	for i := range n {
		e, err := openReplicas(c.URLs(i), prefix, 3)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeEngine(t, e) })
		nodes = append(nodes, e)
	}
	return nodes
}

func closeEngine(t *testing.T, e *jsengine.Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestReplicas: on a three-server cluster the engine creates its six
// streams (two streams, four buckets) with Options.Replicas copies, and a
// node started later with another count scales the existing ones to it,
// keeping their records.
func TestReplicas(t *testing.T) {
	c := natstest.NewCluster(t, 3)
	url := c.URLs(0)
	const prefix = "repl"
	e, err := openReplicas(url, prefix, 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.Append(ctx, engine.Message{Topic: "r.a", Data: []byte("kept")}); err != nil {
		t.Fatal(err)
	}
	closeEngine(t, e)
	for name, n := range streamReplicas(t, url, prefix) {
		if n != 1 {
			t.Errorf("%s: %d replicas, want 1", name, n)
		}
	}
	e, err = openReplicas(url, prefix, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer closeEngine(t, e)
	got := streamReplicas(t, url, prefix)
	if len(got) != 6 {
		t.Errorf("streams %v, want 6", got)
	}
	for name, n := range got {
		if n != 3 {
			t.Errorf("%s: %d replicas, want 3", name, n)
		}
	}
	// The read waits for the scaled streams to have their leaders again,
	// which on a loaded machine took longer than what was left of the
	// first context (load partition: unavailable: context deadline
	// exceeded): it gets its own bound, counted from here.
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	recs, _, err := e.Read(rctx, "r.a", 0, 0, 10)
	if err != nil || len(recs) != 1 || string(recs[0].Data) != "kept" {
		t.Fatalf("after scaling: %v %v", recs, err)
	}
}

// TestReplicasRefused: a count out of 1..5, or more than 1 on a server that
// is not clustered, fails New with engine.ErrInvalidConfig and says why.
func TestReplicasRefused(t *testing.T) {
	for _, n := range []int{-1, 6} {
		if _, err := openReplicas("nats://127.0.0.1:1", "refused", n); !errors.Is(err, engine.ErrInvalidConfig) {
			t.Errorf("replicas %d: %v, want ErrInvalidConfig", n, err)
		}
	}
	s := natstest.NewServer(t)
	t.Run("new streams", func(t *testing.T) {
		_, err := openReplicas(s.URL(), "refused", 3)
		if !errors.Is(err, engine.ErrInvalidConfig) {
			t.Fatalf("3 replicas on one server: %v, want ErrInvalidConfig", err)
		}
		t.Log(err)
	})
	t.Run("existing streams", func(t *testing.T) {
		e, err := openReplicas(s.URL(), "existing", 1)
		if err != nil {
			t.Fatal(err)
		}
		closeEngine(t, e)
		_, err = openReplicas(s.URL(), "existing", 3)
		if !errors.Is(err, engine.ErrInvalidConfig) {
			t.Fatalf("3 replicas on one server: %v, want ErrInvalidConfig", err)
		}
		t.Log(err)
	})
}

// TestReplicasReadYourWrites: with three replicas, nodes that auto-create
// the same topics at once all append (none is told unknown_topic), and a
// read right after an append finds the record, on any node. Reads served
// by a lagging follower (direct gets) failed both.
func TestReplicasReadYourWrites(t *testing.T) {
	c := natstest.NewCluster(t, 3)
	nodes := replicaNodes(t, c, "ryw", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topics = 40
	errs := make(chan error, topics*len(nodes))
	var wg sync.WaitGroup
	for i := range topics {
		for j, e := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				topic := fmt.Sprintf("ryw.t%d", i)
				a, err := e.Append(ctx, engine.Message{Topic: topic, Data: []byte{byte(j)}})
				if err != nil {
					errs <- fmt.Errorf("node %d: append %s: %w", j, topic, err)
					return
				}
				other := nodes[(j+1)%len(nodes)]
				recs, _, err := other.Read(ctx, topic, a.Partition, a.Offset, 1)
				if err != nil || len(recs) != 1 || recs[0].Data[0] != byte(j) {
					errs <- fmt.Errorf("node %d: read %s/%d/%d on the next node: %v %v", j, topic, a.Partition, a.Offset, recs, err)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// inProcessKV is a bucket in which another node's write of key is
// proposed and not yet applied, as a replicated bucket shows it: a create
// of key is refused with wrong last sequence (10164) while a get does not
// find the key. The write lands (land runs) after misses gets of key have
// missed it since the first refusal; from then on the bucket is itself.
type inProcessKV struct {
	jetstream.KeyValue
	key    string
	misses int
	land   func()

	mu      sync.Mutex // guards following
	refused bool
	missed  int
	landed  bool
}

func (kv *inProcessKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	kv.mu.Lock()
	refuse := key == kv.key && !kv.landed
	kv.refused = kv.refused || refuse
	kv.mu.Unlock()
	if refuse {
		return 0, &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant, Description: "wrong last sequence"}
	}
	return kv.KeyValue.Create(ctx, key, value, opts...)
}

func (kv *inProcessKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	ent, err := kv.KeyValue.Get(ctx, key)
	kv.mu.Lock()
	land := false
	if key == kv.key && kv.refused && !kv.landed && errors.Is(err, jetstream.ErrKeyNotFound) {
		kv.missed++
		land = kv.missed == kv.misses
		kv.landed = land
	}
	kv.mu.Unlock()
	if land {
		kv.land()
	}
	return ent, err
}

// TestCreateWhileInProcess: a node that creates a topic (by appending to
// it) or a group (by joining it) while another node's create of the same
// key is still being replicated is refused as if the key existed, and does
// not find it yet. It must wait for that create rather than report the
// topic unknown (TestReplicasReadYourWrites on a cluster) or go on with a
// group definition of its own that the bucket does not hold.
func TestCreateWhileInProcess(t *testing.T) {
	url := natstest.URL(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	t.Run("topic", func(t *testing.T) {
		prefix := natstest.Prefix(t, url)
		a, b := twoNodes(t, nodeOpts{url: url, prefix: prefix})
		const topic = "inproc"
		var landErr error
		b.WrapBuckets(func(kv jetstream.KeyValue) jetstream.KeyValue {
			return &inProcessKV{KeyValue: kv, key: jsengine.TopicKey(topic), misses: 1, land: func() {
				_, landErr = a.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"a"`)})
			}}
		})
		if _, err := b.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"b"`)}); err != nil {
			t.Fatalf("append creating the topic while another node's create is in process: %v", err)
		}
		if landErr != nil {
			t.Fatalf("the other node's append: %v", landErr)
		}
		recs, _, err := b.Read(ctx, topic, 0, 0, 10)
		if err != nil || len(recs) != 2 {
			t.Fatalf("read: %d records, %v; want both appends", len(recs), err)
		}
	})
	t.Run("group", func(t *testing.T) {
		prefix := natstest.Prefix(t, url)
		a, b := twoNodes(t, nodeOpts{url: url, prefix: prefix})
		var landErr error
		b.WrapBuckets(func(kv jetstream.KeyValue) jetstream.KeyValue {
			return &inProcessKV{KeyValue: kv, key: jsengine.GroupKey("g"), misses: 2, land: func() {
				_, landErr = a.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "x.#", Member: "ma"}, newManual())
			}}
		})
		_, err := b.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "y.#", Member: "mb"}, newManual())
		if landErr != nil {
			t.Fatalf("the other node's join: %v", landErr)
		}
		if !errors.Is(err, engine.ErrGroupConflict) {
			t.Fatalf("join with another pattern while the group's creation is in process: %v, want ErrGroupConflict", err)
		}
	})
}
