package router

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/mqtt"
)

// TestMQTTGroupDeliveryAfterUnsubscribe: a group delivery that reaches a
// shared subscription the session has just ended (the engine delivering
// while UNSUBSCRIBE leaves the group) is not queued, and must give back
// the packet identifier it took: one never written is never acked and
// would shrink the session's window for good.
func TestMQTTGroupDeliveryAfterUnsubscribe(t *testing.T) {
	rt := &Router{mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}}
	s := &mqttSession{rt: rt, version: mqtt.Version5, window: 4, inflight: make(map[uint16]struct{}),
		groupAcks: make(map[uint16]groupAck)}
	cn := &conn{rt: rt, kind: transportMQTT, mqtt: s}
	s.cn = cn
	sub := &subscription{c: cn, pattern: "t", group: "g", ended: true} // dropSub has run
	sub.mqttQoS.Store(1)
	sub.Deliver(engine.Delivery{Record: &engine.Record{Topic: "t", Offset: 7, Data: []byte(`1`)}, Attempt: 1})
	if len(s.inflight) != 0 || len(s.groupAcks) != 0 {
		t.Fatalf("%d packet identifiers in flight and %d group acks owed after a delivery that was not queued; want none",
			len(s.inflight), len(s.groupAcks))
	}
}
