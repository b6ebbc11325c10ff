package router

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
)

// TestMQTTGroupHeldBoundDropsExpiredLease: past its membership's window a
// session drops the held group delivery whose lease ran out first, not a
// live one. With a window of 2, offsets 1 and 2 are held; offset 1's lease
// runs out and the group delivers it to this member again (a fresh lease,
// the newest); offset 2's lease runs out and the group gives it to another
// member; so the member has a lease free and the group delivers offset 3.
// Offset 2 (its lease gone, the record another member's) is the one to
// drop; offset 1's second attempt is live and must stay held. Dropping it
// leaves it unseen until a further ack timeout, an attempt spent on a
// record the client never got (a dead letter at max attempts 2), while
// offset 2 is written to this client as well as to the other member.
func TestMQTTGroupHeldBoundDropsExpiredLease(t *testing.T) {
	rt := &Router{mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}}
	s := fullWindowSession(rt)
	sub := &subscription{c: s.cn, pattern: "t", group: "g", leases: 2}
	sub.mqttQoS.Store(1)
	deliver := func(off int64, attempt int) { t.Helper(); deliverHeld(t, s, sub, off, attempt) }
	deliver(1, 1)
	deliver(2, 1)
	deliver(1, 2) // offset 1's lease ran out; delivered to this member again
	deliver(3, 1) // offset 2's lease ran out and went to another member
	var got [][2]int64
	for _, h := range s.groupHeld.q {
		got = append(got, [2]int64{h.d.Record.Offset, int64(h.d.Attempt)})
	}
	live := false
	for _, h := range got {
		if h == [2]int64{1, 2} {
			live = true
		}
	}
	if !live {
		t.Fatalf("held (offset, attempt) %v: the live second attempt of offset 1 was dropped; want offset 2 (its lease ran out first) dropped", got)
	}
}

// TestMQTTGroupHeldDupOnlyIfWritten: a held first attempt the group
// delivers again to this member before the window frees is written
// without DUP (MQTT: DUP only for a packet that may have been sent
// before; the client never got attempt 1), while a delivery held first at
// a later attempt, whose earlier attempt may have reached the client,
// keeps it.
func TestMQTTGroupHeldDupOnlyIfWritten(t *testing.T) {
	rt := &Router{mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}}
	s := fullWindowSession(rt)
	sub := &subscription{c: s.cn, pattern: "t", group: "g", leases: 2}
	sub.holding = true // what writeHeld queues stays in sub.held, to read
	sub.mqttQoS.Store(1)
	deliver := func(off int64, attempt int) { t.Helper(); deliverHeld(t, s, sub, off, attempt) }
	deliver(1, 1)
	deliver(1, 2) // attempt 1's lease ran out while held; delivered here again
	deliver(2, 2) // held first at attempt 2
	written := func(i int) (int64, bool) {
		t.Helper()
		if len(sub.held) <= i {
			t.Fatalf("%d deliveries written, want %d", len(sub.held), i+1)
		}
		it := sub.held[i]
		return it.Offset, it.Frame[0]&dupFlag != 0
	}
	s.acked(1) // the window frees: offset 1 is written
	if off, dup := written(0); off != 1 || dup {
		t.Fatalf("wrote offset %d with DUP %v; want offset 1 without DUP: its first attempt never reached the client", off, dup)
	}
	for id := range s.groupAcks {
		s.acked(id)
	}
	if off, dup := written(1); off != 2 || !dup {
		t.Fatalf("wrote offset %d with DUP %v; want offset 2 with DUP", off, dup)
	}
}

// TestMQTTGroupHeldBoundBytes: the held deliveries of a membership with a
// bound on leased bytes stay within it: the engine leases another record
// only while the member holds fewer bytes than its bound, so held
// deliveries at or past it include one whose lease ran out, and the one
// whose lease began first is dropped.
func TestMQTTGroupHeldBoundBytes(t *testing.T) {
	rt := &Router{mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}}
	s := fullWindowSession(rt)
	sub := &subscription{c: s.cn, pattern: "t", group: "g", leases: 10, leaseBytes: 10}
	sub.mqttQoS.Store(1)
	for off := int64(1); off <= 4; off++ {
		d := engine.Delivery{Record: &engine.Record{Topic: "t", Offset: off, Data: []byte(`1234`)}, Attempt: 1}
		if b := s.groupFrame(sub, d); len(b) != 0 {
			t.Fatalf("offset %d: wrote %d bytes with the window full", off, len(b))
		}
	}
	var got []int64
	for _, h := range s.groupHeld.q {
		got = append(got, h.d.Record.Offset)
	}
	if len(got) != 3 || got[0] != 2 {
		t.Fatalf("held offsets %v of 4-byte records, membership bound 10 bytes; want [2 3 4] (offset 1 dropped once 12 bytes were held)", got)
	}
}
