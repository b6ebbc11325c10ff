package router_test

import (
	"testing"

	"github.com/eclipse/paho.golang/paho"
)

// TestMQTTSessionsStoredFollowsStores: switchyard_mqtt_sessions_stored
// follows the store as sessions are stored and removed, with no sweep
// (the sweeper's interval is the default minute): a persistent CONNECT
// counts when its CONNACK is read, a clean one does not, an MQTT 5
// DISCONNECT with expiry 0 and a clean start remove theirs.
func TestMQTTSessionsStoredFollowsStores(t *testing.T) {
	g := newGateway(t, withMQTT)
	stored := func() float64 { return metricValue(t, g.reg, "switchyard_mqtt_sessions_stored", nil) }
	if v := stored(); v != 0 {
		t.Fatalf("stored %v at start", v)
	}
	c4, _ := dialSession(t, g, 4, "tcp", "stored-4", false, 0)
	if v := stored(); v != 1 {
		t.Fatalf("stored %v after a 3.1.1 persistent CONNECT, want 1", v)
	}
	c5, _ := dialSession(t, g, 5, "tcp", "stored-5", false, 60)
	if v := stored(); v != 2 {
		t.Fatalf("stored %v after an MQTT 5 CONNECT with an expiry, want 2", v)
	}
	dialSession(t, g, 5, "tcp", "stored-clean", true, 0)
	if v := stored(); v != 2 {
		t.Fatalf("stored %v after a clean CONNECT, want 2", v)
	}
	zero := uint32(0)
	if err := c5.v5.Disconnect(&paho.Disconnect{Properties: &paho.DisconnectProperties{SessionExpiryInterval: &zero}}); err != nil {
		t.Fatal(err)
	}
	waitMetric(t, g, "switchyard_mqtt_sessions_stored", nil, 1)
	c4.leave(t, g, "stored-4")
	if v := stored(); v != 1 {
		t.Fatalf("stored %v once the 3.1.1 session outlives its connection, want 1", v)
	}
	dialSession(t, g, 4, "tcp", "stored-4", true, 0)
	if v := stored(); v != 0 {
		t.Fatalf("stored %v after a clean start of its client id, want 0", v)
	}
}
