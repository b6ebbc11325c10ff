package jsengine_test

import (
	"testing"

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
