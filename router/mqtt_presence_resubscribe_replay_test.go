package router_test

// A restored session whose client subscribes to its filter again (as
// clients that subscribe on every connect do) while the session replays
// what was published while it was away.

import (
	"strconv"
	"testing"
	"time"
)

// TestPresenceResubscribeDuringReplay: the messages published at
// QoS 1 while a persistent session was away all arrive after it resumes,
// though its client subscribes to the same filter again at once: MQTT
// replaces the subscription without interrupting its flow [MQTT-3.8.4-3].
func TestPresenceResubscribeDuringReplay(t *testing.T) {
	// Past the session's queue bound (--queue-messages, 1024): the
	// replay is paced by the in-flight window, so none of it is dropped
	// from the deliveries held for the window, with or without a
	// SUBSCRIBE.
	const n = 2500
	g := newGateway(t, withMQTT)
	c, _ := dialSession(t, g, 5, "tcp", "rvpq-1", false, 600)
	if rc := c.subscribe(t, "rvpq/t", 1); rc != 1 {
		t.Fatalf("SUBACK %#x", rc)
	}
	c.leave(t, g, "rvpq-1")
	pub, _ := dialSession(t, g, 5, "tcp", "rvpq-pub", true, 0)
	for i := range n {
		pub.publish(t, "rvpq/t", 1, strconv.Itoa(i))
	}
	c2, present := dialSession(t, g, 5, "tcp", "rvpq-1", false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	if rc := c2.subscribe(t, "rvpq/t", 1); rc != 1 {
		t.Fatalf("SUBACK %#x", rc)
	}
	pub.publish(t, "rvpq/t", 1, "live")
	seen := map[string]bool{}
	timeout := time.NewTimer(waitTimeout)
	defer timeout.Stop()
	for len(seen) < n+1 {
		select {
		case m := <-c2.msgs:
			seen[m.payload] = true
		case <-timeout.C:
			t.Fatalf("%d distinct messages of %d (the %d published while away, then one after the SUBSCRIBE, "+
				"which arrived: %v): the replaced subscription's replay stopped", len(seen), n+1, n, seen["live"])
		}
	}
}
