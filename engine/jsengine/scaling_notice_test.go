package jsengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestScalingNoticeOutlastsHeartbeat: a node told that the record stream's
// replicas are about to change appends one at a time until it reads the
// new configuration. A heartbeat between the notice and the change reads
// the configuration as it still is: that must not end the hold, or the
// node chains its records by message ID into a stream being scaled.
func TestScalingNoticeOutlastsHeartbeat(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	e := newNode(t, nodeOpts{url: url, prefix: prefix, ttl: 900 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(ctx, prefix+"_live")
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, "n.*", jetstream.UpdatesOnly())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := nc.Publish(prefix+".replicas", []byte("scaling")); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the notice", e.ScalingNow)
	// Two heartbeats: the first one's read of the configuration is done
	// once the second one writes its mark.
	for beats := 0; beats < 2; {
		select {
		case u := <-w.Updates():
			if u != nil {
				beats++
			}
		case <-ctx.Done():
			t.Fatal("timed out waiting for the heartbeats")
		}
	}
	if !e.ScalingNow() {
		t.Fatal("a heartbeat that read the unchanged configuration ended the scaling hold")
	}
}
