package router

// Held shared-subscription deliveries (mqtt_group.go) around a seek: a
// redelivery that reaches the session between the seek's mark and the
// engine's Seek, and a topic deletion whose mark and drop a failed seek
// falls between.

import (
	"context"
	"errors"
	"testing"

	"github.com/coder/websocket"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/mqtt"
	"github.com/switchyard/switchyard/session"
)

// hookSeek is an engine whose Seek runs before, then returns err; it
// serves nothing else.
type hookSeek struct {
	engine.Engine
	before func()
	err    error
}

func (e hookSeek) Seek(context.Context, string, string, int, engine.Start) error {
	e.before()
	return e.err
}

// heldPositions lists the held group deliveries as (partition, offset).
func heldPositions(s *mqttSession) [][2]int64 {
	var got [][2]int64
	if s.groupHeld == nil {
		return nil
	}
	for _, h := range s.groupHeld.q {
		got = append(got, [2]int64{int64(h.d.Record.Partition), h.d.Record.Offset})
	}
	return got
}

// TestMQTTHeldSeekRedeliveredBeforeEngineSeek checks that a held delivery
// whose lease a seek drops is dropped even when the group delivered it
// again between the seek's mark (heldSeek heldMark) and the engine's
// Seek: an ack timeout fires there (the engine's timers run under the lock
// its Seek takes, so the redelivery comes before the Seek, and the Seek
// drops that new lease too). The redelivery replaces the held one
// unmarked, so heldDrop keeps it: held with no lease, and stamped newer
// than every live one, so past the bound a live delivery is dropped in its
// place. The membership's window is 2: partition 0 offset 1 and partition
// 1 offset 1 are held; a seek of partition 1 drops its lease; the group
// then leases partition 0 offset 2.
func TestMQTTHeldSeekRedeliveredBeforeEngineSeek(t *testing.T) {
	rt, s, deliver := heldRig(t, 2)
	deliver(0, 1, 1)
	deliver(1, 1, 1)
	// Partition 1 offset 1's ack timeout fires before the engine's Seek
	// takes its lock: attempt 2, whose lease the Seek then drops.
	rt.eng = hookSeek{before: func() { deliver(1, 1, 2) }}
	if err := rt.seek(context.Background(), "g", "t", 1, engine.Start{Kind: engine.StartLatest}); err != nil {
		t.Fatal(err)
	}
	deliver(0, 2, 1) // the member holds one lease (partition 0 offset 1): room for another
	got := heldPositions(s)
	for _, h := range got {
		if h == [2]int64{1, 1} {
			t.Fatalf("held (partition, offset) %v after a seek of partition 1 that succeeded: partition 1 offset 1, whose lease the seek dropped, is still held (to be written to a client the group no longer leases it to)", got)
		}
	}
	live := false
	for _, h := range got {
		live = live || h == [2]int64{0, 1}
	}
	if !live {
		t.Fatalf("held %v: partition 0 offset 1, whose lease is live, was dropped", got)
	}
}

// TestMQTTHeldTopicDeletedDuringFailedSeek checks that the held
// deliveries of a deleted topic are dropped whatever a seek of that topic
// does meanwhile. heldTopicDeleted drops them in one step under imu, not
// through the seeking mark a seek shares (marking, then dropping those
// marked, a failed seek's unmark could come between the two and keep
// them: held deliveries of a deleted topic, written when the window has
// room). Here the topic is deleted while a seek of it runs (its held
// delivery marked), the seek fails (the engine refusing a deleted
// topic), a delivery held after it is unmarked, and the topic is deleted
// once more: nothing of it stays held, marked or not.
func TestMQTTHeldTopicDeletedDuringFailedSeek(t *testing.T) {
	rt := &Router{mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}, conns: map[*conn]struct{}{}}
	s := &mqttSession{rt: rt, version: mqtt.Version5, window: 1, inflight: map[uint16]struct{}{1: {}}}
	s.cn = &conn{rt: rt, kind: transportMQTT, mqtt: s}
	rt.conns[s.cn] = struct{}{}
	sub := &subscription{c: s.cn, pattern: "t", group: "g", leases: 2}
	sub.mqttQoS.Store(1)
	hold := func(off int64) {
		t.Helper()
		d := engine.Delivery{Group: "g", Record: &engine.Record{Topic: "t", Offset: off, Data: []byte(`1`)}, Attempt: 1}
		if b := s.groupFrame(sub, d); len(b) != 0 {
			t.Fatalf("offset %d written with the window full", off)
		}
	}
	hold(1)
	rt.eng = hookSeek{before: func() { rt.heldTopicDeleted("t") }, err: errors.New("topic deleted")}
	if err := rt.seek(context.Background(), "g", "t", 0, engine.Start{Kind: engine.StartEarliest}); err == nil {
		t.Fatal("the seek succeeded; want the engine's error")
	}
	if got := heldPositions(s); len(got) != 0 {
		t.Fatalf("held (partition, offset) %v of topic t after it was deleted during a seek of it that failed", got)
	}
	hold(2) // no seek runs: unmarked
	rt.heldTopicDeleted("t")
	if got := heldPositions(s); len(got) != 0 {
		t.Fatalf("held (partition, offset) %v of topic t after it was deleted: an unmarked held delivery was kept", got)
	}
}

// TestMQTTHeldSeekAllPartitionsPartlyFailed checks that a seek of every
// partition (partition -1) which the engine carries out for some
// partitions and then fails drops the held deliveries of those it moved.
// jsengine's Seek seeks the partitions one by one (seekOne: dropWindow,
// the leases gone, under gmu), and returns the first error, leaving the
// partitions before it moved; the error does not say which, so the router
// drops the held deliveries of every partition (Router.seek), rather than
// keep one whose lease the engine dropped: written later, to a client the
// group no longer leases it to, a record the seek skipped. The engine
// here stands for one that moved partition 0 and failed on partition 1,
// as jsengine does when the store refuses the second write.
func TestMQTTHeldSeekAllPartitionsPartlyFailed(t *testing.T) {
	rt := &Router{mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}, conns: map[*conn]struct{}{}}
	s := &mqttSession{rt: rt, version: mqtt.Version5, window: 1, inflight: map[uint16]struct{}{1: {}}}
	s.cn = &conn{rt: rt, kind: transportMQTT, mqtt: s}
	rt.conns[s.cn] = struct{}{}
	sub := &subscription{c: s.cn, pattern: "t", group: "g", leases: 2}
	sub.mqttQoS.Store(1)
	for part := range 2 {
		d := engine.Delivery{Group: "g", Record: &engine.Record{Topic: "t", Partition: part, Offset: 1, Data: []byte(`1`)}, Attempt: 1}
		if b := s.groupFrame(sub, d); len(b) != 0 {
			t.Fatalf("partition %d written with the window full", part)
		}
	}
	// Partition 0 moved (its lease dropped), partition 1's write refused.
	rt.eng = hookSeek{before: func() {}, err: errors.New("jsengine: seek: store unavailable")}
	if err := rt.seek(context.Background(), "g", "t", -1, engine.Start{Kind: engine.StartLatest}); err == nil {
		t.Fatal("the seek succeeded; want the engine's error")
	}
	for _, h := range heldPositions(s) {
		if h == [2]int64{0, 1} {
			t.Fatalf("held (partition, offset) %v after a seek of every partition that moved partition 0 and failed on partition 1: partition 0 offset 1, whose lease the seek dropped, is still held, to be written though the seek skipped it", heldPositions(s))
		}
	}
}

// TestPullHandBackLateDeliveryIsAttempt checks the hand-back of a pull
// member the way TestMQTTHeldAfterHandBackReadIsAttempt checks an MQTT
// member's: a graceful shutdown reads a pull member's buffer (never
// polled: handed back as unsent) and then the engine takes the member
// back; a delivery the engine makes in between comes after the buffer
// was read, and no poll will come (the member has left rt.pulls). It is
// listed as late (the member left) and handed back as unsent through
// MemberRef.Later, not counted as an attempt no client got.
func TestPullHandBackLateDeliveryIsAttempt(t *testing.T) {
	eng := &handBackEngine{}
	rt := &Router{m: newMetrics(prometheus.NewRegistry()), mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}, eng: eng}
	pm := &pullMember{group: "g", pattern: "t", member: pullPrefix + "1", client: "c", wake: make(chan struct{}, 1)}
	rt.pulls = map[string]*pullMember{"g": pm}
	rt.pullsBy = map[string]int{"c": 1}
	pos := engine.Position{Topic: "t", Offset: 7}
	eng.deliver = func() {
		pm.Deliver(engine.Delivery{Group: "g", Record: &engine.Record{Topic: pos.Topic, Offset: pos.Offset, Data: []byte(`1`)}, Attempt: 1})
	}
	rt.handBack(context.Background(), nil)
	for _, r := range eng.refs {
		for _, p := range r.Unsent {
			if p == pos {
				return
			}
		}
	}
	t.Fatalf("handed back %+v; buffered and never polled: %d; offset %d is not handed back as unsent: the engine counts an attempt no client got", eng.refs, len(pm.buf), pos.Offset)
}

// TestMQTTHeldPlainNoSelfWakeWindowFull checks that hold's own wake does
// not spin the writer under a client that never acks: with the window
// full, holding plain deliveries queues no wake, and a writer pass woken
// for nothing (an empty batch) neither writes nor queues one.
func TestMQTTHeldPlainNoSelfWakeWindowFull(t *testing.T) {
	rt := &Router{mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}}
	rt.opts.Session.QueueMessages = 16
	rt.mq.opts.MaxHeldBytes = 1 << 20
	s := &mqttSession{rt: rt, version: mqtt.Version5, window: 1, inflight: map[uint16]struct{}{1: {}}}
	s.cn = &conn{rt: rt, kind: transportMQTT, mqtt: s}
	s.cn.sess = session.NewOneWay("no-spin", session.Options{EncodeGap: s.encodeGap}, session.Transport{
		Write:    s.write,
		Close:    func(websocket.StatusCode, string) error { return nil },
		CloseNow: func() error { return nil },
	}) // never run: what is queued stays, to count
	pkt, err := mqtt.EncodePublishFrame(packets.Packet{TopicName: "p", Payload: []byte(`1`),
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}}, mqtt.Version5)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := s.write(context.Background(), pkt); err != nil {
			t.Fatal(err)
		}
		if err := s.write(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	if q := s.cn.sess.Stats().Queued; q != 0 || len(s.held) != 3 {
		t.Fatalf("window full, never acked: %d held, %d wakes queued; want 3 held and none queued", len(s.held), q)
	}
}
