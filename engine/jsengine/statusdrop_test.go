package jsengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestStatusChangesDroppedWhileReconnecting: the NATS client drops a
// status change when its listener's channel (ten changes) is full, as it
// is when the connection flaps faster than the engine's watcher reads.
// Here the last change read says "reconnecting" while the connection is
// up again: the engine must still serve calls once the connection is
// back. It refused every call as unavailable for good (the fault scenario
// lossy-gateway-links: one gateway's subscribers got nothing and its dead
// letters call failed "unavailable" for a minute after the links healed).
func TestStatusChangesDroppedWhileReconnecting(t *testing.T) {
	url := natstest.URL(t)
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectBufSize(-1),
		nats.ReconnectWait(time.Millisecond), nats.ReconnectJitter(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := jsengine.New(ctx, jsengine.Options{Conn: nc, Prefix: natstest.Prefix(t, url)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	if _, err := e.Append(ctx, engine.Message{Topic: "flap", Data: []byte(`0`)}); err != nil {
		t.Fatal(err)
	}

	// flap reconnects once and waits until the connection is back.
	flap := func() {
		t.Helper()
		if err := nc.ForceReconnect(); err != nil {
			t.Fatal(err)
		}
		waitUntil(t, "the connection back", func() bool { return nc.Status() == nats.CONNECTED })
	}
	release := e.HoldConnWatcher()
	// The watcher takes the first change (reconnecting) and waits; the
	// second (connected) stays in its channel.
	flap()
	waitUntil(t, "the watcher holding the first change", func() bool { return e.PendingStatusChanges() == 1 })
	// Five more flaps fill the channel with its last change "reconnecting";
	// the sixth's "connected" is dropped.
	for range 5 {
		flap()
	}
	if n := e.PendingStatusChanges(); n != 10 {
		release()
		t.Fatalf("%d status changes pending, want the channel full (10)", n)
	}
	release()
	waitUntil(t, "the watcher reading every change", func() bool { return e.PendingStatusChanges() == 0 })

	actx, acancel := context.WithTimeout(ctx, 10*time.Second)
	defer acancel()
	var lastErr error
	ok := false
	for range 50 { // bounded: the watcher has applied every change it will get
		if _, lastErr = e.Append(actx, engine.Message{Topic: "flap", Data: []byte(`1`)}); lastErr == nil {
			ok = true
			break
		}
		select {
		case <-actx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !ok {
		t.Fatalf("appends after the connection came back: %v", lastErr)
	}
}
