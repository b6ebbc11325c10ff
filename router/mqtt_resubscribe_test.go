package router_test

// A SUBSCRIBE of a filter the session holds already: the subscription is
// replaced in place [MQTT-3.8.4-3], its new options apply to what is
// delivered after its SUBACK.

import "testing"

// TestMQTTResubscribeChangesQoS: a filter subscribed again at another QoS
// delivers at the new QoS, up and down, and once per message.
func TestMQTTResubscribeChangesQoS(t *testing.T) {
	g := newGateway(t, withMQTT)
	c, _ := dialSession(t, g, 5, "tcp", "rsq-1", true, 0)
	pub, _ := dialSession(t, g, 5, "tcp", "rsq-pub", true, 0)
	for i, q := range []byte{0, 1, 2, 0} {
		if rc := c.subscribe(t, "rsq/t", q); rc != q {
			t.Fatalf("SUBACK %#x, want %d", rc, q)
		}
		payload := string(rune('a' + i))
		pub.publish(t, "rsq/t", 2, payload)
		if m := c.next(t); m.payload != payload || m.qos != q {
			t.Fatalf("after SUBSCRIBE at QoS %d got %q at QoS %d, want %q at QoS %d", q, m.payload, m.qos, payload, q)
		}
	}
	pub.publish(t, "rsq/t", 1, "last")
	if m := c.next(t); m.payload != "last" {
		t.Fatalf("got %q, want one copy of last", m.payload)
	}
	select {
	case m := <-c.msgs:
		t.Fatalf("an extra delivery %+v: the filter is held once", m)
	default:
	}
}
