package router

// Held shared-subscription deliveries (mqtt_group.go) where the writer,
// the reader, a seek and a graceful shutdown interleave: a slot freed
// while the writer is about to hold a plain delivery, a seek the engine
// refuses, a delivery that comes during a hand-back; and the DUP of a
// redelivery whose earlier attempt was held and dropped.

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

// TestMQTTHeldPlainLostWake checks that a slot freed while the writer is
// about to hold a plain delivery wakes the writer: it finds the
// window full for a plain QoS 1 delivery (takeID fails) and holds it
// (hold) with no lock between the two; a PUBACK read meanwhile frees the
// slot while the writer holds nothing yet (heldN 0), so acked neither
// wakes the writer nor has a held group delivery to give the slot to.
// Without hold's own wake, once it has stored the plain delivery and
// stamped plainFirst, the window is empty and none is queued: the delivery waits until
// something else is queued to the session (a PINGRESP, another
// delivery); for a client with keepalive 0 and nothing else coming, for
// ever. plainFirst also makes a group delivery that finds the window
// empty wait behind it (mustHoldLocked), until the same wake. The steps
// are those of mqttSession.write and of the reader, in the order the race
// gives them.
func TestMQTTHeldPlainLostWake(t *testing.T) {
	rt := &Router{mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}}
	rt.opts.Session.QueueMessages = 16
	rt.mq.opts.MaxHeldBytes = 1 << 20
	s := fullWindowSession(rt)
	s.cn.sess = session.NewOneWay("lost-wake", session.Options{EncodeGap: s.encodeGap}, session.Transport{
		Write:    s.write,
		Close:    func(websocket.StatusCode, string) error { return nil },
		CloseNow: func() error { return nil },
	}) // never run: what is queued stays, to count
	sub := &subscription{c: s.cn, pattern: "t", group: "g", leases: 4}
	sub.mqttQoS.Store(1)

	pkt, err := mqtt.EncodePublishFrame(packets.Packet{TopicName: "p", Payload: []byte(`1`),
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}}, mqtt.Version5)
	if err != nil {
		t.Fatal(err)
	}
	_, idAt, _ := mqtt.Span(pkt)

	// The writer (mqttSession.write): nothing held, the window is full.
	if _, ok := s.takeID(trackPos{}); ok {
		t.Fatal("took an identifier with the window full")
	}
	// The reader: the client's PUBACK of identifier 1.
	s.acked(1)
	// The writer again: it holds the delivery that did not fit.
	s.hold(pkt, idAt, trackPos{}, false)

	// groupFrame alone (not Deliver, whose queued item would wake the
	// writer): a group delivery finds the window empty yet waits.
	d := engine.Delivery{Record: &engine.Record{Topic: "t", Offset: 1, Data: []byte(`1`)}, Attempt: 1}
	gb := s.groupFrame(sub, d)

	if woken := s.cn.sess.Stats().Queued > 0; len(s.inflight) == 0 && len(s.held) > 0 && !woken {
		t.Fatalf("window %d with %d in flight, %d plain deliveries held, and no wake queued for the writer: the plain delivery waits for a PUBACK the client does not owe (a group delivery meanwhile: %d bytes written)",
			s.window, len(s.inflight), len(s.held), len(gb))
	}
}

// failingSeek is an engine whose Seek fails (a store that times out); it
// serves nothing else.
type failingSeek struct{ engine.Engine }

func (failingSeek) Seek(context.Context, string, string, int, engine.Start) error {
	return errors.New("store unavailable")
}

// TestMQTTHeldFailedSeekDropsLive checks that a seek the engine refuses
// unmarks the held deliveries it marked: a seek marks those of the
// partition it moves (the first to drop past the bound) before the
// engine's Seek, and a failed Seek leaves their leases live. The membership's window is 2;
// offset 1 of partitions 0 and 1 is held. A seek of partition 1 fails.
// Partition 0's lease, the older, runs out and goes to another member,
// and the group leases offset 2 of partition 1 to this member: past the
// bound, the held delivery to drop is partition 0's (its lease ran out),
// not partition 1's offset 1, whose lease is live and which, dropped, is
// left unseen to the group's ack timeout, an attempt spent.
func TestMQTTHeldFailedSeekDropsLive(t *testing.T) {
	rt := &Router{mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())},
		eng: failingSeek{}, conns: map[*conn]struct{}{}}
	s := fullWindowSession(rt)
	rt.conns[s.cn] = struct{}{}
	sub := &subscription{c: s.cn, pattern: "t", group: "g", leases: 2}
	sub.mqttQoS.Store(1)
	deliver := func(part int, off int64) {
		t.Helper()
		d := engine.Delivery{Record: &engine.Record{Topic: "t", Partition: part, Offset: off, Data: []byte(`1`)}, Attempt: 1}
		if b := s.groupFrame(sub, d); len(b) != 0 {
			t.Fatalf("partition %d offset %d: wrote %d bytes with the window full", part, off, len(b))
		}
	}
	deliver(0, 1)
	deliver(1, 1)
	if err := rt.seek(context.Background(), "g", "t", 1, engine.Start{Kind: engine.StartEarliest}); err == nil {
		t.Fatal("the seek succeeded; want the engine's error")
	}
	deliver(1, 2) // partition 0's lease, the older, ran out and went elsewhere
	var got [][2]int64
	for _, h := range s.groupHeld.q {
		got = append(got, [2]int64{int64(h.d.Record.Partition), h.d.Record.Offset})
	}
	for _, h := range got {
		if h == [2]int64{1, 1} {
			return
		}
	}
	t.Fatalf("held (partition, offset) %v after a seek that failed: partition 1 offset 1, whose lease is live, was dropped; want partition 0 offset 1 (its lease began first) dropped", got)
}

// handBackEngine records the members handed back, with their unsent
// deliveries read as an engine reads them (MemberRef.AllUnsent, under the
// lock its deliveries are made under); before it takes them back it runs
// deliver, a delivery the engine leased to the member before the
// hand-back that reaches the session only now (the engine delivers from
// its own goroutine). It serves nothing else.
type handBackEngine struct {
	engine.Engine
	deliver func()
	refs    []engine.MemberRef
}

func (e *handBackEngine) HandBack(_ context.Context, refs []engine.MemberRef) error {
	e.deliver()
	for _, r := range refs {
		e.refs = append(e.refs, engine.MemberRef{Group: r.Group, Member: r.Member, Unsent: r.AllUnsent()})
	}
	return nil
}

// TestMQTTHeldAfterHandBackReadIsAttempt checks that a delivery that
// comes while a graceful shutdown hands its member back, and is not
// written, is handed back as unsent. A graceful shutdown reads an MQTT member's held deliveries (takeHeldFor) and its
// queued ones (unsentPositions), then the engine takes the member back; a
// delivery the engine leased before that and which reaches the session in
// between finds the window full; held, it would be in neither list, so
// the engine counts it as an attempt, yet it is never written: the
// session closes with the shutdown, and what it holds is dropped, not
// flushed (a native member's queued delivery is flushed). The hand-back
// promises an attempt not counted, never one counted and not made
// (takeHeldFor).
func TestMQTTHeldAfterHandBackReadIsAttempt(t *testing.T) {
	eng := &handBackEngine{}
	rt := &Router{m: newMetrics(prometheus.NewRegistry()), mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}, eng: eng}
	s := fullWindowSession(rt)
	s.cn.sess = session.NewOneWay("hand-back", session.Options{EncodeGap: s.encodeGap}, session.Transport{
		Write:    s.write,
		Close:    func(websocket.StatusCode, string) error { return nil },
		CloseNow: func() error { return nil },
	})
	sub := &subscription{c: s.cn, id: 1, pattern: "t", group: "g", member: "m1", leases: 2}
	sub.mqttQoS.Store(1)
	s.cn.byID = map[uint64]*subscription{sub.id: sub}
	pos := engine.Position{Topic: "t", Offset: 7}
	eng.deliver = func() {
		sub.Deliver(engine.Delivery{Record: &engine.Record{Topic: pos.Topic, Offset: pos.Offset, Data: []byte(`1`)}, Attempt: 1})
	}
	rt.handBack(context.Background(), []*conn{s.cn})
	unsent := false
	for _, r := range eng.refs {
		for _, p := range r.Unsent {
			unsent = unsent || p == pos
		}
	}
	written := false
	for _, ga := range s.groupAcks {
		written = written || ga.pos == pos
	}
	if !written && !unsent {
		t.Fatalf("handed back %+v: offset %d was never written (the window is full) and not handed back as unsent: the engine counts an attempt the client never got", eng.refs, pos.Offset)
	}
}

// TestMQTTHeldDroppedThenRedeliveredDup checks the DUP of a redelivery
// whose earlier attempt this client never received: a held first attempt
// that the session drops past its membership's bound is never written;
// when the group delivers that record again to this member, it is written
// with DUP, as a redelivery to a member other than the one the earlier
// attempt went to is (docs/mqtt.md): DUP says the group delivered the
// record before, which [MQTT-3.3.1-1] allows ("might be re-delivery").
// Only a held attempt replaced in place keeps the DUP of the one it
// replaces, which the session knows was never written.
func TestMQTTHeldDroppedThenRedeliveredDup(t *testing.T) {
	rt := &Router{mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}}
	s := fullWindowSession(rt)
	sub := &subscription{c: s.cn, pattern: "t", group: "g", leases: 1}
	sub.holding = true // what writeHeld queues stays in sub.held, to read
	sub.mqttQoS.Store(1)
	d := func(off int64, attempt int) engine.Delivery {
		return engine.Delivery{Record: &engine.Record{Topic: "t", Offset: off, Data: []byte(`1`)}, Attempt: attempt}
	}
	if b := s.groupFrame(sub, d(1, 1)); len(b) != 0 {
		t.Fatal("offset 1 written with the window full")
	}
	// Offset 1's lease ran out unwritten; the group leases offset 2: past
	// the bound of 1, offset 1 is dropped, never written.
	if b := s.groupFrame(sub, d(2, 1)); len(b) != 0 {
		t.Fatal("offset 2 written with the window full")
	}
	s.acked(1) // offset 2 is written
	if len(sub.held) != 1 || sub.held[0].Offset != 2 {
		t.Fatalf("%d written, want offset 2", len(sub.held))
	}
	for id := range s.groupAcks {
		s.acked(id)
	}
	// The group delivers offset 1 again, to this member: the window has room.
	b := s.groupFrame(sub, d(1, 2))
	if len(b) == 0 {
		t.Fatal("offset 1's second attempt not written with the window empty")
	}
	if b[0]&dupFlag == 0 {
		t.Fatalf("offset 1's second attempt written without DUP; a redelivery carries DUP")
	}
}
