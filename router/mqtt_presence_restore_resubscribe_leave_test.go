package router_test

// A native presence member's view of a restored MQTT session whose client
// subscribes to its presence filter again (as clients that subscribe on
// every connect do).

import "testing"

// TestPresenceRestoreResubscribeNoLeave: a native presence member
// sees a restored MQTT session join its topic; when that client subscribes
// to the filter again with presence (it is in the set already), the member
// must not see the session leave (and join again): it never left.
func TestPresenceRestoreResubscribeNoLeave(t *testing.T) {
	g := newGateway(t, withMQTT)
	ann := g.dial(t)
	ann.subscribe(t, "rvpf.room", "presence", true)

	c, _ := dialSession(t, g, 5, "tcp", "rvpf-1", false, 600)
	subscribePresence(t, c.v5, "rvpf/room")
	first := ann.nextOp(t, "join")
	c.leave(t, g, "rvpf-1")
	if l := ann.nextOp(t, "leave"); l["session"] != first["session"] {
		t.Fatalf("leave %v, want %v", l, first["session"])
	}

	c2, present := dialSession(t, g, 5, "tcp", "rvpf-1", false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	restoredJoin := ann.nextOp(t, "join") // the restore
	subscribePresence(t, c2.v5, "rvpf/room")

	// A native session joining after the SUBACK marks the end of what the
	// SUBSCRIBE announced.
	bob := g.dial(t)
	bob.subscribe(t, "rvpf.room", "presence", true)
	var seen []map[string]any
	for f := ann.next(t); f["op"] != "join" || f["session"] != bob.welcome["session"]; f = ann.next(t) {
		if seen = append(seen, f); len(seen) > 8 {
			t.Fatalf("no join of %v among %v", bob.welcome["session"], seen)
		}
	}
	for _, f := range seen {
		if f["session"] == restoredJoin["session"] {
			t.Fatalf("the restored session %v, still subscribed with presence, was announced again: %v "+
				"(frames between its SUBSCRIBE and the next join: %v)", restoredJoin["session"], f["op"], seen)
		}
	}
}
