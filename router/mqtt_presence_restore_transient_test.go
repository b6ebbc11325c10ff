package router_test

// A persistent MQTT session's presence filter restored while the engine's
// presence store fails for a moment (a timeout): the filter asked
// presence and nothing refused it.

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
)

// flakyPresence is the memory engine whose PresenceList fails once when
// armed.
type flakyPresence struct {
	*memengine.Engine
	fail atomic.Bool
}

func (f *flakyPresence) PresenceList(ctx context.Context, topic string, limit int) ([]engine.PresenceMember, int, error) {
	if f.fail.CompareAndSwap(true, false) {
		return nil, 0, errors.New("presence store: timeout")
	}
	return f.Engine.PresenceList(ctx, topic, limit)
}

// TestPresenceRestoreTransientFailure: the presence store fails
// once while the session is restored: that connection goes without
// presence, but the session must keep the filter's presence (no policy or
// bound refused it; the client has no SUBACK telling it to ask again), so
// the next restore, the store healthy, joins the set.
func TestPresenceRestoreTransientFailure(t *testing.T) {
	flaky := &flakyPresence{}
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.wrap = func(e engine.Engine) engine.Engine { flaky.Engine = e.(*memengine.Engine); return flaky }
	})
	c, _ := dialSession(t, g, 5, "tcp", "rvpt-1", false, 600)
	subscribePresence(t, c.v5, "rvpt/room")
	waitPresence(t, g, "rvpt.room", 1)
	c.leave(t, g, "rvpt-1")

	flaky.fail.Store(true)
	c2, present := dialSession(t, g, 5, "tcp", "rvpt-1", false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	restored(t, c2)
	if flaky.fail.Load() {
		t.Fatal("the restore did not list the presence set")
	}
	c2.leave(t, g, "rvpt-1")
	rec, ok, err := g.eng.(engine.MQTTSessionStore).LoadMQTTSession(context.Background(), "rvpt-1", time.Now())
	if err != nil || !ok {
		t.Fatalf("stored session: %v %v", ok, err)
	}
	i := slices.IndexFunc(rec.Subs, func(sb engine.MQTTSubscription) bool { return sb.Filter == "rvpt/room" })
	if i < 0 {
		t.Fatalf("stored filters %+v: rvpt/room is gone", rec.Subs)
	}
	if !rec.Subs[i].Presence {
		t.Errorf("stored %+v: the filter lost its presence for good after one failed call of the presence store", rec.Subs[i])
	}

	c3, present := dialSession(t, g, 5, "tcp", "rvpt-1", false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	restored(t, c3)
	if ids := presenceSessions(t, g, "rvpt.room"); len(ids) != 1 {
		t.Fatalf("presence of rvpt.room restored with the store healthy again: %v, want the session", ids)
	}
}
