package router_test

import (
	"testing"

	"github.com/switchyard/switchyard/router"
)

// TestPublishPipelineMadeByFirstPublish: a WebSocket session that only
// subscribes holds no publish pipeline, and its refused requests are
// answered without one; its first publish makes it, and the ops after
// it are answered in request order as before.
func TestPublishPipelineMadeByFirstPublish(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	c.send(t, map[string]any{"op": "subscribe", "id": "sub", "pattern": "lazypipe.a"})
	c.send(t, map[string]any{"op": "publish", "id": "bad", "topic": "lazypipe.a"}) // no data
	expectReplies(t, c, [][2]string{{"sub", "subscribed"}, {"bad", "error"}})
	if n, pipes := router.SessionPipes(g.rt); n != 1 || pipes != 0 {
		t.Fatalf("%d sessions, %d with a publish pipeline; want 1 without one before any publish", n, pipes)
	}
	c.send(t, map[string]any{"op": "publish", "id": "p1", "topic": "lazypipe.b", "data": 1})
	c.send(t, map[string]any{"op": "publish", "id": "bad2", "topic": "lazypipe.b"})
	c.send(t, map[string]any{"op": "subscribe", "id": "sub2", "pattern": "lazypipe.b"})
	expectReplies(t, c, [][2]string{{"p1", "published"}, {"bad2", "error"}, {"sub2", "subscribed"}})
	if n, pipes := router.SessionPipes(g.rt); n != 1 || pipes != 1 {
		t.Fatalf("%d sessions, %d with a publish pipeline; want the publishing one with one", n, pipes)
	}
}

// expectReplies reads c's next frames and checks their ids and ops.
func expectReplies(t *testing.T, c *client, want [][2]string) {
	t.Helper()
	for _, w := range want {
		m := c.next(t)
		if m["id"] != w[0] || m["op"] != w[1] {
			t.Fatalf("got %v, want %s %s", m, w[1], w[0])
		}
	}
}
