package jsengine_test

import (
	"testing"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestPipelinedReplicatedShare: two nodes, each on its own server of a
// three-server cluster, pipeline appends into one partition of a
// three-replica stream at once, in atomic batches that keep refusing each
// other. Every append is answered once, in time, without an error;
// offsets are 0..n-1; each node's records are stored in its call order.
// Chained as on one server (Nats-Expected-Last-Msg-Id), the first refusal
// stopped the stream: "0/0: jsengine: load partition: engine:
// unavailable: context deadline exceeded", the servers logging "last
// msgid mismatch ... critical write error".
func TestPipelinedReplicatedShare(t *testing.T) {
	c := natstest.NewCluster(t, 3)
	nodes := replicaNodes(t, c, "piper3", 2)
	pipelinedShare(t, nodes[0], nodes[1], 300)
	if n := nodes[0].OneAtATime() + nodes[1].OneAtATime(); n > 0 {
		t.Errorf("%d appends went one at a time", n)
	}
	b := nodes[0].Batches() + nodes[1].Batches()
	t.Logf("batches published (refused ones counted again): %d for 600 records", b)
	if b == 0 || b >= 600 {
		t.Errorf("%d batches for 600 records: the appends were not batched", b)
	}
}
