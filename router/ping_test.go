package router_test

import "testing"

// TestPingOp: a ping is answered with a pong that repeats its id, after
// the replies to the requests before it.
func TestPingOp(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	c.send(t, map[string]any{"op": "publish", "id": "p", "topic": "a", "data": 1})
	c.send(t, map[string]any{"op": "ping", "id": "live-1"})
	first, second := c.next(t), c.next(t)
	if first["op"] != "published" || first["id"] != "p" {
		t.Fatalf("first reply %v, want the publish's", first)
	}
	if second["op"] != "pong" || second["id"] != "live-1" || len(second) != 2 {
		t.Fatalf("reply to ping %v, want {op:pong, id:live-1}", second)
	}
	if m := c.mustOK(t, map[string]any{"op": "ping"}, "pong"); len(m) != 2 {
		t.Fatalf("pong %v", m)
	}
}
