package client_test

import (
	"testing"
	"time"

	"github.com/switchyard/switchyard/client"
	"github.com/switchyard/switchyard/engine"
)

func TestPresence(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	events := make(chan client.PresenceEvent, 8)
	c1 := dial(t, g, &client.Options{OnPresence: func(e client.PresenceEvent) { events <- e }})
	if _, err := c1.SubscribeChan(testCtx(t), "rooms.7", client.SubscribeOptions{Presence: true}); err != nil {
		t.Fatal(err)
	}
	c2 := dial(t, g, nil)
	if _, err := c2.SubscribeChan(testCtx(t), "rooms.7", client.SubscribeOptions{Presence: true}); err != nil {
		t.Fatal(err)
	}
	next := func() client.PresenceEvent { t.Helper(); return nextPresence(t, events) }
	if e := next(); !e.Joined || e.Topic != "rooms.7" || e.Member.Session != c2.Welcome().Session {
		t.Fatalf("join %+v", e)
	}
	list, err := c1.Presence(testCtx(t), "rooms.7")
	if err != nil || list.Count != 2 || len(list.Members) != 2 {
		t.Fatalf("Presence: %+v, %v", list, err)
	}
	_ = c2.Close()
	if e := next(); e.Joined || e.Member.Session != c2.Welcome().Session {
		t.Fatalf("leave %+v", e)
	}
	if _, err := c1.SubscribeChan(testCtx(t), "rooms.*", client.SubscribeOptions{Presence: true}); err == nil {
		t.Fatal("presence on a wildcard pattern accepted")
	}
}

// TestPresenceResync: on the gateway's resync frame the client lists the
// topic again and hands the list to OnPresence in order with the events
// around it.
func TestPresenceResync(t *testing.T) {
	listed := make(chan map[string]any, 1)
	g := newFakeGateway(t, func(n int, fc *fakeConn) {
		if n != 1 || !fc.welcome("e1") {
			return
		}
		req := fc.request()
		if req == nil {
			return
		}
		fc.send(map[string]any{"op": "subscribed", "id": req["id"], "pattern": "rooms.7"})
		fc.send(map[string]any{"op": "join", "topic": "rooms.7", "session": "x", "user": "xavier"})
		fc.send(map[string]any{"op": "presence", "topic": "rooms.7", "resync": true})
		req = fc.request()
		if req == nil {
			return
		}
		listed <- req
		fc.send(map[string]any{"op": "presence", "id": req["id"], "topic": "rooms.7", "count": 2,
			"members": []any{map[string]any{"session": "y", "user": "yvonne"}, map[string]any{"session": "me", "user": ""}}})
		fc.send(map[string]any{"op": "leave", "topic": "rooms.7", "session": "y", "user": "yvonne"})
		fc.hold()
	})
	events := make(chan client.PresenceEvent, 8)
	c, err := client.Dial(testCtx(t), g.URL, &client.Options{OnPresence: func(e client.PresenceEvent) { events <- e }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.SubscribeChan(testCtx(t), "rooms.7", client.SubscribeOptions{Presence: true}); err != nil {
		t.Fatal(err)
	}
	next := func() client.PresenceEvent { t.Helper(); return nextPresence(t, events) }
	if e := next(); !e.Joined || e.Member.Session != "x" || e.Resync {
		t.Fatalf("first event %+v, want x's join", e)
	}
	select {
	case req := <-listed:
		if req["op"] != "presence" || req["topic"] != "rooms.7" {
			t.Fatalf("request after the resync frame: %v", req)
		}
	case <-time.After(wait):
		t.Fatal("the client did not list the topic again")
	}
	e := next()
	if !e.Resync || e.Topic != "rooms.7" || e.List.Count != 2 || len(e.List.Members) != 2 || e.List.Members[0].Session != "y" {
		t.Fatalf("second event %+v, want the resync's list", e)
	}
	if e := next(); e.Joined || e.Resync || e.Member.Session != "y" {
		t.Fatalf("third event %+v, want y's leave", e)
	}
}

// nextPresence returns the next event of events, failing the test when
// none comes within wait.
func nextPresence(t *testing.T, events <-chan client.PresenceEvent) client.PresenceEvent {
	t.Helper()
	select {
	case e := <-events:
		return e
	case <-time.After(wait):
		t.Fatal("no presence event")
	}
	return client.PresenceEvent{}
}
