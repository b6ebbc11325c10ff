package jsengine_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// TestSerialOnAckReaderKeepsBound: a pipelined record is answered
// within appendMax (8 s) of its AppendAsync call (pipeline.go; docs/
// protocol.md: `unavailable` within 8 s). Record Y (no MsgID, topic q)
// waits behind q's batch in flight; a retry of MsgID "s" (topic p,
// replicated stream) is handed over 5 s later, its claim's create is
// refused (claimed before), so it goes as by Append on the node's ack
// reader (settleClaim -> sendQueued -> appendQueued). The link goes
// silent just then: that append waits its round trip's 5 s on the ack
// reader, which meanwhile reads no acknowledgement and fires no deadline,
// so Y, on another topic, is answered long after its 8 s.
func TestSerialOnAckReaderKeepsBound(t *testing.T) {
	e, px := stalledReplicas(t, "rvjsbound")
	ctx := t.Context()
	for _, tp := range []string{"p", "q"} {
		if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: tp, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
		if _, errs := appendAllAsync(ctx, t, e, []engine.Message{{Topic: tp, Data: []byte("warm")}}); len(errs) > 0 {
			t.Fatal(errs[0])
		}
	}
	// "s" stored once: its retry's claim create is refused.
	if _, errs := appendAllAsync(ctx, t, e, []engine.Message{{Topic: "p", MsgID: "s", Data: []byte("s")}}); len(errs) > 0 {
		t.Fatal(errs[0])
	}
	var settles atomic.Int32
	e.SetBeforeSettle(func() {
		if settles.Add(1) == 2 { // S's claim, refused: S goes as by Append next, on this goroutine
			px.Stall()
		}
	})
	px.Stall()
	type answer struct {
		took time.Duration
		err  error
	}
	yAns := make(chan answer, 1)
	sAns := make(chan error, 1)
	e.AppendAsync(ctx, engine.Message{Topic: "q", Data: []byte("q0")}, func(engine.Appended, error) {})
	yAt := time.Now()
	e.AppendAsync(ctx, engine.Message{Topic: "q", Data: []byte("y")}, func(_ engine.Appended, err error) {
		yAns <- answer{time.Since(yAt), err}
	})
	time.Sleep(5 * time.Second) // S is handed over 5 s after Y: S's own bound ends later
	e.AppendAsync(ctx, engine.Message{Topic: "p", MsgID: "s", Data: []byte("s again")}, func(_ engine.Appended, err error) {
		sAns <- err
	})
	px.Resume() // the acknowledgements of q0's batch and of S's claim come; the hook stalls again
	select {
	case a := <-yAns:
		t.Logf("Y answered after %v: %v", a.took, a.err)
		if a.took > 8500*time.Millisecond {
			t.Errorf("Y answered %v after its AppendAsync (err %v), want within 8 s", a.took, a.err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Y not answered within 20 s")
	}
	px.Resume()
	select {
	case err := <-sAns:
		t.Logf("S: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("S not answered")
	}
}
