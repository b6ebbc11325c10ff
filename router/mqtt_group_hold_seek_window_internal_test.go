package router

// Held shared-subscription deliveries around a seek, continued: the fresh
// window a seek delivers while it runs, a seek whose engine call panics,
// and a seek whose caller gave up before the engine was asked.

import (
	"context"
	"testing"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/mqtt"
	"github.com/switchyard/switchyard/session"
)

// heldRig is one MQTT session with a full window (one identifier in
// flight) and a shared subscription of group g on topic t with leases
// leases; deliver fails unless what it delivers is held.
func heldRig(t *testing.T, leases int) (*Router, *mqttSession, func(part int, off int64, attempt int)) {
	t.Helper()
	rt := &Router{mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}, conns: map[*conn]struct{}{}}
	s := &mqttSession{rt: rt, version: mqtt.Version5, window: 1, inflight: map[uint16]struct{}{1: {}}}
	s.cn = &conn{rt: rt, kind: transportMQTT, mqtt: s}
	rt.conns[s.cn] = struct{}{}
	sub := &subscription{c: s.cn, pattern: "t", group: "g", leases: leases}
	sub.mqttQoS.Store(1)
	deliver := func(part int, off int64, attempt int) {
		t.Helper()
		d := engine.Delivery{Group: "g", Record: &engine.Record{Topic: "t", Partition: part, Offset: off, Data: []byte(`1`)}, Attempt: attempt}
		if b := s.groupFrame(sub, d); len(b) != 0 {
			t.Fatalf("partition %d offset %d: wrote %d bytes with the window full", part, off, len(b))
		}
	}
	return rt, s, deliver
}

func heldHas(s *mqttSession, part int, off int64) bool {
	for _, h := range heldPositions(s) {
		if h == [2]int64{int64(part), off} {
			return true
		}
	}
	return false
}

// TestMQTTHeldSeekFreshWindowKept checks that the window a seek delivers
// is kept held. The engine's Seek delivers the new position's window
// before it returns (memengine Seek: gp.Drop, then e.pump →
// DeliverReady → Deliver, all under g.mu, inside the call); with the
// client's window still full of the records sent before the seek, those
// deliveries are held. They are new leases the seek made, not ones it
// dropped: a seek that succeeded must not drop them, else each waits out
// an ack timeout before the group delivers it again.
func TestMQTTHeldSeekFreshWindowKept(t *testing.T) {
	rt, s, deliver := heldRig(t, 4)
	deliver(0, 1, 1) // held before the seek: its lease the seek drops
	// The engine seeks partition 0 to offset 10 and delivers it at once.
	rt.eng = hookSeek{before: func() { deliver(0, 10, 1) }}
	if err := rt.seek(context.Background(), "g", "t", 0, engine.Start{Kind: engine.StartOffset, Offset: 10}); err != nil {
		t.Fatal(err)
	}
	if heldHas(s, 0, 1) {
		t.Fatalf("held %v: offset 1, whose lease the seek dropped, is still held", heldPositions(s))
	}
	if !heldHas(s, 0, 10) {
		t.Fatalf("held %v after a seek that succeeded: offset 10, the first of the window the seek itself delivered (a live lease), was dropped: it waits out the group's ack timeout", heldPositions(s))
	}
}

// TestMQTTSeekOtherGroupOrPartitionNotMarked checks that a delivery held
// while a seek runs is marked only for the seek's own group and
// partition: a seek of group g2, or of partition 1, on topic t leaves a
// delivery of group g on partition 0 unmarked and held.
func TestMQTTSeekOtherGroupOrPartitionNotMarked(t *testing.T) {
	rt, s, deliver := heldRig(t, 4)
	rt.eng = hookSeek{before: func() { deliver(0, 1, 1) }}
	if err := rt.seek(context.Background(), "g2", "t", 0, engine.Start{Kind: engine.StartLatest}); err != nil {
		t.Fatal(err)
	}
	rt.eng = hookSeek{before: func() { deliver(0, 2, 1) }}
	if err := rt.seek(context.Background(), "g", "t", 1, engine.Start{Kind: engine.StartLatest}); err != nil {
		t.Fatal(err)
	}
	if !heldHas(s, 0, 1) || !heldHas(s, 0, 2) {
		t.Fatalf("held %v: a delivery of group g partition 0 held during a seek of group g2, or of partition 1, was dropped", heldPositions(s))
	}
}

// TestMQTTHeldSeekFreshWindowKeptMemengine is TestMQTTHeldSeekFreshWindowKept
// on the memory engine, whose Seek delivers the new position's window
// inside the call: a member with window 2 and a client whose window is
// full holds offsets 0 and 1; a seek to offset 3 drops their leases and
// leases offsets 3 and 4, held as they come. The seek must keep those.
func TestMQTTHeldSeekFreshWindowKeptMemengine(t *testing.T) {
	ctx := context.Background()
	eng := memengine.New(memengine.Options{})
	defer func() { _ = eng.Close(ctx) }()
	if _, err := eng.CreateTopic(ctx, engine.TopicConfig{Name: "t", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := eng.Append(ctx, engine.Message{Topic: "t", Data: []byte(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	rt := &Router{m: newMetrics(prometheus.NewRegistry()), mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}, conns: map[*conn]struct{}{}, eng: eng}
	rt.opts.Session.QueueMessages = 16
	s := &mqttSession{rt: rt, version: mqtt.Version5, window: 1, inflight: map[uint16]struct{}{1: {}}}
	s.cn = &conn{rt: rt, kind: transportMQTT, mqtt: s}
	s.cn.sess = session.NewOneWay("fresh-window", session.Options{EncodeGap: s.encodeGap}, session.Transport{
		Write:    s.write,
		Close:    func(websocket.StatusCode, string) error { return nil },
		CloseNow: func() error { return nil },
	}) // never run
	rt.conns[s.cn] = struct{}{}
	sub := &subscription{c: s.cn, pattern: "t", group: "g", leases: 4}
	sub.mqttQoS.Store(1)
	if _, err := eng.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "t", Member: "m", MaxInFlight: 2}, sub); err != nil {
		t.Fatal(err)
	}
	if !heldHas(s, 0, 0) || !heldHas(s, 0, 1) {
		t.Fatalf("held %v before the seek; want offsets 0 and 1", heldPositions(s))
	}
	if err := rt.seek(ctx, "g", "t", 0, engine.Start{Kind: engine.StartOffset, Offset: 3}); err != nil {
		t.Fatal(err)
	}
	if heldHas(s, 0, 0) || !heldHas(s, 0, 3) || !heldHas(s, 0, 4) {
		t.Fatalf("held %v after a seek to offset 3 that succeeded; want offsets 3 and 4, the window the seek leased (offsets 0 and 1 gone with their leases)", heldPositions(s))
	}
}
