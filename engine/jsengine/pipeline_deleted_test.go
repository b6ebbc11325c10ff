package jsengine_test

import (
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestDeletedWhileClaimQueued: a record with a MsgID into a
// replicated stream waits in its partition's queue for its claim; its
// topic is deleted before its batch is published. An append whose topic
// is deleted meanwhile fails, or goes to the topic's next incarnation
// (appendAsyncOnce's errTopicGone): it must never be answered as stored
// at a position no read finds. The batch path checks nothing of the
// kind: the batch, refused for its stale expected sequence, is sent again
// after reloading the purged partition and stored in the deleted
// incarnation, and the record is answered as stored.
func TestDeletedWhileClaimQueued(t *testing.T) {
	c := natstest.NewCluster(t, 3)
	nodes := replicaNodes(t, c, "rvjsdel", 1)
	e := nodes[0]
	ctx := t.Context()
	const topic = "gone"
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if _, errs := appendAllAsync(ctx, t, e, []engine.Message{{Topic: topic, MsgID: "warm", Data: []byte("warm")}}); len(errs) > 0 {
		t.Fatal(errs[0])
	}
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.SetBeforeBatchSend(func() {
		once.Do(func() {
			close(held)
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
		})
	})
	type answer struct {
		a   engine.Appended
		err error
	}
	ans := make(chan answer, 1)
	e.AppendAsync(ctx, engine.Message{Topic: topic, MsgID: "x", Data: []byte("x")}, func(a engine.Appended, err error) {
		ans <- answer{a, err}
	})
	select {
	case <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the batch was never sent")
	}
	err := e.DeleteTopic(ctx, topic)
	close(release)
	if err != nil {
		t.Fatal(err)
	}
	var got answer
	select {
	case got = <-ans:
	case <-time.After(30 * time.Second):
		t.Fatal("x not answered")
	}
	if got.err != nil {
		t.Logf("x failed: %v (allowed)", got.err)
		return
	}
	recs, _, err := e.Read(ctx, topic, got.a.Partition, got.a.Offset, 1)
	if err != nil || len(recs) != 1 || string(recs[0].Data) != "x" {
		var data []string
		for _, r := range recs {
			data = append(data, string(r.Data))
		}
		t.Fatalf("x answered stored at partition %d offset %d (duplicate %v) after its topic was deleted; a read there finds %q, %v", got.a.Partition, got.a.Offset, got.a.Duplicate, data, err)
	}
}
