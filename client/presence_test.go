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
	next := func() client.PresenceEvent {
		t.Helper()
		select {
		case e := <-events:
			return e
		case <-time.After(wait):
			t.Fatal("no presence event")
		}
		return client.PresenceEvent{}
	}
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
