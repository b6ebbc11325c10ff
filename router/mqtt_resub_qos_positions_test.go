package router_test

// A persistent session's filter subscribed again from QoS 1 to 0 and back
// to 1: what it delivered at QoS 0 is not replayed by a later resume.

import (
	"testing"
	"time"
)

// TestMQTTResubQoSDownUpNoReplay: the filter delivers "q1" at QoS 1, is
// subscribed again at QoS 0 and delivers "q0-a" and "q0-b", then at QoS 1
// again; the client leaves with nothing published since. On resume the
// first message must be the one published after it, not the QoS 0 ones
// (tracked from the SUBSCRIBE at QoS 1, mqtt_subscribe.go).
func TestMQTTResubQoSDownUpNoReplay(t *testing.T) {
	g := newGateway(t, withMQTT)
	const id, topic = "rvsubp-1", "rvsubp/t"
	pub, _ := dialSession(t, g, 5, "tcp", "rvsubp-pub", true, 0)
	c, _ := dialSession(t, g, 5, "tcp", id, false, 600)
	if rc := c.subscribe(t, topic, 1); rc != 1 {
		t.Fatalf("SUBACK %#x", rc)
	}
	pub.publish(t, topic, 1, "q1")
	c.expectPayloads(t, "q1")
	if rc := c.subscribe(t, topic, 0); rc != 0 {
		t.Fatalf("SUBACK %#x", rc)
	}
	pub.publish(t, topic, 1, "q0-a")
	pub.publish(t, topic, 1, "q0-b")
	for _, w := range []string{"q0-a", "q0-b"} {
		if m := c.next(t); m.payload != w || m.qos != 0 {
			t.Fatalf("got %q at QoS %d, want %q at QoS 0", m.payload, m.qos, w)
		}
	}
	if rc := c.subscribe(t, topic, 1); rc != 1 {
		t.Fatalf("SUBACK %#x", rc)
	}
	c.leave(t, g, id)
	c2, present := dialSession(t, g, 5, "tcp", id, false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	pub.publish(t, topic, 1, "live")
	seen := map[string]bool{}
	timeout := time.NewTimer(waitTimeout)
	defer timeout.Stop()
	for !seen["live"] {
		select {
		case m := <-c2.msgs:
			if m.payload == "q0-a" || m.payload == "q0-b" {
				t.Fatalf("resume replayed %q, delivered before at QoS 0: "+
					"the positions of the QoS 1 subscription outlived the QoS 0 period", m.payload)
			}
			seen[m.payload] = true
		case <-timeout.C:
			t.Fatal("no live message after resume")
		}
	}
}
