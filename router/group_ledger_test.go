package router_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// TestGroupMadeByOtherJoinStaysCounted: a WebSocket subscribe charges the
// new group it is to make, but a poll of the same client makes the group
// first (with another pattern) and the subscribe's join then fails. The
// group exists, made through this gateway: it must still count against
// the client's bound, or a client racing its own requests makes groups
// the bound never sees.
func TestGroupMadeByOtherJoinStaysCounted(t *testing.T) {
	pj := &parkedJoin{group: "raced", parked: make(chan struct{}), gate: make(chan struct{})}
	g := newGateway(t, func(c *gwConfig) {
		c.wrap = func(e engine.Engine) engine.Engine { pj.Engine = e; return pj }
	})
	c := g.dial(t)
	pj.armed.Store(true)
	c.send(t, map[string]any{"op": "subscribe", "id": "join", "pattern": "a", "group": "raced"})
	select {
	case <-pj.parked:
	case <-time.After(waitTimeout):
		t.Fatal("the subscribe never reached Join")
	}
	if code, body, _ := g.httpDo(t, "POST", "/v1/groups/raced/poll", map[string]any{"pattern": "b"}); code != 200 {
		t.Fatalf("poll: %d %v", code, body)
	}
	close(pj.gate)
	m := c.next(t)
	t.Logf("subscribe answered %v", m)
	if _, err := g.eng.Group(context.Background(), "raced"); err != nil {
		t.Fatalf("the group the poll made: %v", err)
	}
	if got := metricValue(t, g.reg, "switchyard_groups_made", nil); got != 1 {
		t.Fatalf("switchyard_groups_made = %v with group %q made through the gateway, want 1", got, "raced")
	}
}
