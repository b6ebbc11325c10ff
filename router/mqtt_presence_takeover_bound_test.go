package router_test

// A persistent MQTT session listed in a topic's presence set, taken over
// through another node of a shared store while the topic's set is at its
// bound (--max-presence-per-topic).

import (
	"context"
	"slices"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
	"github.com/switchyard/switchyard/router"
)

// slowLeave is a JetStream engine whose presence leaves of topic wait
// for release (bounded by their context): the connection taken over is
// still listed while the new one is restored, as when its node is slower.
type slowLeave struct {
	*jsengine.Engine
	topic   string
	release chan struct{}
}

func (s *slowLeave) PresenceLeave(ctx context.Context, topic, session string) error {
	if topic == s.topic {
		select {
		case <-s.release:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Engine.PresenceLeave(ctx, topic, session)
}

// TestPresenceTakeoverAtBound: topics list one member
// (MaxPresencePerTopic 1). A session listed on rvpk.room is taken over
// through the other node; the connection taken over leaves after the new
// one is restored. The set then holds the new connection alone: it must
// be listed, as the one it replaced was (the takeover leaves the session
// in the set once, as the new connection).
func TestPresenceTakeoverAtBound(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	slow := &slowLeave{topic: "rvpk.room", release: make(chan struct{})}
	a := newJSGatewayWith(t, url, prefix, nil, router.Options{MaxPresencePerTopic: 1}, func(e *jsengine.Engine) engine.Engine {
		slow.Engine = e
		return slow
	})
	b := newJSGatewayWith(t, url, prefix, nil, router.Options{MaxPresencePerTopic: 1}, nil)
	released := false
	defer func() {
		if !released {
			close(slow.release)
		}
	}()

	old := dialTaken(t, a, "rvpk-1", false, 600)
	subscribePresence(t, old.c, "rvpk/room")
	first := waitPresence(t, b, "rvpk.room", 1) // listed, on both nodes
	waitPresence(t, a, "rvpk.room", 1)

	nw, present := dialSession(t, b, 5, "tcp", "rvpk-1", false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	old.expectTakenOver(t)
	restored(t, nw)
	close(slow.release)
	released = true

	// Once the old connection's leave has landed, the set holds one
	// session: the new connection, listed.
	var count int64
	var listed []any
	waitUntil(t, "the connection taken over has left rvpk.room", func() bool {
		st, body, _ := b.httpDo(t, "GET", "/v1/presence/rvpk.room", nil)
		if st != 200 {
			t.Fatalf("GET /v1/presence/rvpk.room: %d %v", st, body)
		}
		count = num(body, "count")
		listed, _ = body["members"].([]any)
		return !slices.ContainsFunc(listed, func(m any) bool {
			mm, _ := m.(map[string]any)
			return mm["session"] == first[0]
		}) && count <= 1
	})
	if count != 1 || len(listed) != 1 {
		t.Fatalf("presence of rvpk.room after the takeover: count %d, members %v; want the new connection, listed "+
			"(the session was listed before it moved; the one it replaced was still in the set when it joined)", count, listed)
	}
}
