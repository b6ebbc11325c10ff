package router

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/mqtt"
)

// TestMQTTGroupDeliveryWithoutFreePacketID: a group delivery to an MQTT
// member all of whose 65,535 packet identifiers are in flight (a window
// the lease bound allows with a large --queue-messages) is not written
// and takes no identifier; it is held until one is free (mqtt_group.go).
// Before, the search for a free identifier never ended, with the
// engine's locks held.
func TestMQTTGroupDeliveryWithoutFreePacketID(t *testing.T) {
	rt := &Router{mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}}
	s := &mqttSession{rt: rt, version: mqtt.Version5, window: 0xffff, inflight: make(map[uint16]struct{}, 1<<16),
		groupAcks: make(map[uint16]groupAck)}
	s.cn = &conn{rt: rt, kind: transportMQTT, mqtt: s}
	for id := 1; id <= 0xffff; id++ {
		s.inflight[uint16(id)] = struct{}{}
	}
	sub := &subscription{c: s.cn, pattern: "t", group: "g", leases: 1}
	sub.mqttQoS.Store(1)
	done := make(chan []byte, 1)
	go func() { // returns at once with the fix; spins for ever without
		done <- s.groupFrame(sub, engine.Delivery{Record: &engine.Record{Topic: "t", Offset: 7, Data: []byte(`1`)}, Attempt: 1})
	}()
	select {
	case b := <-done:
		if len(b) != 0 || len(s.inflight) != 0xffff || len(s.groupAcks) != 0 {
			t.Fatalf("wrote %d bytes, %d identifiers in flight, %d group acks owed; want nothing written or taken", len(b), len(s.inflight), len(s.groupAcks))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the group delivery still looks for a free packet identifier after 10s")
	}
	if s.groupHeld == nil || len(s.groupHeld.q) != 1 {
		t.Fatal("the group delivery is not held for a free packet identifier")
	}
	var m dto.Metric
	if err := rt.mq.m.windowWaits.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.GetCounter().GetValue() != 1 {
		t.Fatalf("inflight_waits = %v, want 1", m.GetCounter().GetValue())
	}
}
