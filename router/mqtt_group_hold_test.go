package router

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/mqtt"
)

// TestMQTTGroupHeldBound: the group deliveries a session holds for want of
// room in its window are bounded by the membership's window (its leases):
// a delivery the group makes again replaces the held one in its place
// with a new lease, one past the bound drops the held one whose lease
// began first (counted window_full), a
// membership that left holds nothing, and neither does a session that
// ended. Held deliveries of a subscription that ended are not written
// when the window frees, and give their packet identifiers back.
func TestMQTTGroupHeldBound(t *testing.T) {
	rt := &Router{mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}}
	s := fullWindowSession(rt)
	sub := &subscription{c: s.cn, pattern: "t", group: "g", leases: 2}
	sub.mqttQoS.Store(1)
	deliver := func(off int64, attempt int) { t.Helper(); deliverHeld(t, s, sub, off, attempt) }
	held := func(want ...[2]int64) {
		t.Helper()
		var got [][2]int64
		if s.groupHeld != nil {
			for _, h := range s.groupHeld.q {
				got = append(got, [2]int64{h.d.Record.Offset, int64(h.d.Attempt)})
			}
		}
		if len(got) != len(want) {
			t.Fatalf("held (offset, attempt) %v, want %v", got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("held (offset, attempt) %v, want %v", got, want)
			}
		}
	}
	dropped := func() float64 {
		var m dto.Metric
		if err := rt.mq.m.skipped.WithLabelValues("window_full").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	deliver(1, 1)
	deliver(2, 1)
	held([2]int64{1, 1}, [2]int64{2, 1})
	deliver(1, 2) // its lease ran out and the group delivered it again
	held([2]int64{1, 2}, [2]int64{2, 1})
	deliver(3, 1) // past the membership's window: offset 2's lease began first, and ran out
	held([2]int64{1, 2}, [2]int64{3, 1})
	if got := dropped(); got != 1 {
		t.Fatalf("window_full %v, want 1", got)
	}
	if len(s.inflight) != 1 || len(s.groupAcks) != 0 {
		t.Fatalf("%d identifiers in flight, %d group acks; want only the plain one", len(s.inflight), len(s.groupAcks))
	}

	// The subscription ends (UNSUBSCRIBE); the window frees: nothing is
	// written, every identifier is free again.
	sub.ended = true
	s.acked(1)
	held()
	if len(s.inflight) != 0 || len(s.groupAcks) != 0 || s.groupHeld.sending {
		t.Fatalf("%d identifiers in flight, %d group acks, sending %v after the release; want none",
			len(s.inflight), len(s.groupAcks), s.groupHeld.sending)
	}

	s.inflight[1] = struct{}{}
	sub.leases = 0 // the membership left its group
	deliver(4, 1)
	held()
	sub.leases = 2
	s.dropHeld() // the session ended
	deliver(5, 1)
	held()
	if got := dropped(); got != 2 {
		t.Fatalf("window_full %v, want 2", got)
	}
}

// TestMQTTGroupHeldKeepsOrder: a group delivery that comes while group
// deliveries are held, or while one taken off the held list is being
// queued, is held behind them even when the window has room, so that a
// partition's deliveries reach the client in order.
func TestMQTTGroupHeldKeepsOrder(t *testing.T) {
	rt := &Router{mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}}
	s := &mqttSession{rt: rt, version: mqtt.Version5, window: 4}
	s.cn = &conn{rt: rt, kind: transportMQTT, mqtt: s}
	sub := &subscription{c: s.cn, pattern: "t", group: "g", leases: 4}
	sub.mqttQoS.Store(1)
	d := func(off int64) engine.Delivery {
		return engine.Delivery{Record: &engine.Record{Topic: "t", Offset: off, Data: []byte(`1`)}, Attempt: 1}
	}
	for _, tc := range []struct {
		name string
		hold groupHold
	}{
		{"behind held deliveries", groupHold{q: []heldGroup{{sub: sub, d: d(1), qos: 1}}}},
		{"behind one being queued", groupHold{sending: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := tc.hold
			s.groupHeld = &h
			if b := s.groupFrame(sub, d(2)); len(b) != 0 {
				t.Fatalf("offset 2 written (%d bytes) ahead of the held deliveries", len(b))
			}
			if n := len(h.q); n == 0 || h.q[n-1].d.Record.Offset != 2 {
				t.Fatalf("offset 2 not held last: %d held", n)
			}
			if len(s.inflight) != 0 {
				t.Fatalf("%d identifiers taken, want none", len(s.inflight))
			}
		})
	}
	s.groupHeld = nil
	if b := s.groupFrame(sub, d(3)); len(b) == 0 || len(s.inflight) != 1 {
		t.Fatalf("with nothing held and room in the window: %d bytes, %d identifiers taken; want it written", len(b), len(s.inflight))
	}
}

// fullWindowSession returns an MQTT 5 session of rt whose window of one is
// taken (packet identifier 1 in flight), so that every QoS 1 or 2 group
// delivery to it is held.
func fullWindowSession(rt *Router) *mqttSession {
	s := &mqttSession{rt: rt, version: mqtt.Version5, window: 1, inflight: map[uint16]struct{}{1: {}}}
	s.cn = &conn{rt: rt, kind: transportMQTT, mqtt: s}
	return s
}

// deliverHeld makes the group deliver offset off of topic t to sub at
// attempt, and fails unless the delivery was held (nothing written).
func deliverHeld(t *testing.T, s *mqttSession, sub *subscription, off int64, attempt int) {
	t.Helper()
	d := engine.Delivery{Record: &engine.Record{Topic: "t", Offset: off, Data: []byte(`1`)}, Attempt: attempt}
	if b := s.groupFrame(sub, d); len(b) != 0 {
		t.Fatalf("offset %d: wrote %d bytes with the window full", off, len(b))
	}
}
