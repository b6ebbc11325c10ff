package router

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard/switchyard/engine"
)

// TestGroupDeliveryToEndedSubscriptionNotCounted: the engine may hand a
// delivery to a group subscription that has just ended (its member is
// leaving); nothing is queued to the session, so
// switchyard_deliveries_total{kind="group"}, "message frames queued to
// sessions", must not count it.
func TestGroupDeliveryToEndedSubscriptionNotCounted(t *testing.T) {
	rt := &Router{m: newMetrics(prometheus.NewRegistry())}
	s := &subscription{c: &conn{rt: rt}, id: 1, pattern: "t", group: "g", ended: true}
	s.Deliver(engine.Delivery{Record: &engine.Record{Topic: "t", Offset: 3}, Attempt: 1})
	var m dto.Metric
	if err := rt.m.deliveriesGroup.Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetCounter().GetValue(); n != 0 {
		t.Fatalf("a delivery to an ended subscription counted %v group deliveries, want 0", n)
	}
}
