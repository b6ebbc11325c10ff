package router_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/engine"
)

// parkedJoin parks a Join of group, once armed, until gate is closed,
// closing parked when it does.
type parkedJoin struct {
	engine.Engine
	group  string
	armed  atomic.Bool
	parked chan struct{}
	gate   chan struct{}
}

func (p *parkedJoin) Join(ctx context.Context, req engine.JoinRequest, c engine.Consumer) (string, error) {
	if req.Group == p.group && p.armed.CompareAndSwap(true, false) {
		close(p.parked)
		select {
		case <-p.gate:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	return p.Engine.Join(ctx, req, c)
}

// TestGroupDeletedWhileJoining: a group deleted (DELETE /v1/groups/{group})
// while a WebSocket subscribe to it is joining must not leave a member
// behind that no session holds: once the session has ended the engine's
// group has no member of it.
func TestGroupDeletedWhileJoining(t *testing.T) {
	pj := &parkedJoin{group: "doomed", parked: make(chan struct{}), gate: make(chan struct{})}
	g := newGateway(t, func(c *gwConfig) {
		c.wrap = func(e engine.Engine) engine.Engine { pj.Engine = e; return pj }
	})
	c := g.dial(t)
	// The group exists, with no member.
	c.subscribe(t, "t", "group", "doomed")
	c.mustOK(t, map[string]any{"op": "unsubscribe", "pattern": "t", "group": "doomed"}, "unsubscribed")

	pj.armed.Store(true)
	c.send(t, map[string]any{"op": "subscribe", "id": "join", "pattern": "t", "group": "doomed"})
	select {
	case <-pj.parked:
	case <-time.After(waitTimeout):
		t.Fatal("the subscribe never reached Join")
	}
	if code, body, _ := g.httpDo(t, "DELETE", "/v1/groups/doomed", nil); code != 204 {
		t.Fatalf("delete: %d %v", code, body)
	}
	close(pj.gate)
	for {
		m := c.next(t)
		t.Logf("frame: %v", m)
		if m["id"] == "join" {
			if m["op"] == "subscribed" {
				t.Errorf("a subscribe whose group was deleted while it joined is answered %v", m)
			}
			break
		}
	}
	if err := c.conn.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Logf("close: %v", err)
	}
	deadline := time.Now().Add(waitTimeout)
	for metricValue(t, g.reg, "switchyard_connections", nil) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the session never ended")
		}
		time.Sleep(5 * time.Millisecond)
	}
	info, err := g.eng.Group(context.Background(), "doomed")
	if err == nil && len(info.Members) > 0 {
		t.Fatalf("group %q keeps %d member(s) after its only session ended: %+v", "doomed", len(info.Members), info.Members)
	}
	if got := metricValue(t, g.reg, "switchyard_group_session_leases_reserved", nil); got != 0 {
		t.Errorf("leases reserved after every session ended: %v", got)
	}
}
