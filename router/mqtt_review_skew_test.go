package router_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
	"github.com/switchyard/switchyard/router"
)

// aheadClock is a node's clock that runs ahead of the others by d.
type aheadClock struct{ d time.Duration }

func (c aheadClock) Now() time.Time { return time.Now().Add(c.d) }

func (aheadClock) AfterFunc(d time.Duration, f func()) engine.Timer { return time.AfterFunc(d, f) }

// newJSGatewayClock is newJSGateway with the engine's clock and
// --mqtt-max-session-bytes given (0: the default).
func newJSGatewayClock(t *testing.T, url, prefix string, clock engine.Clock, sessionBytes int64) *gateway {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	eng, err := jsengine.New(ctx, jsengine.Options{URL: url, Prefix: prefix, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	rt, err := router.New(router.Options{Engine: eng, Registry: reg, StatsInterval: -1,
		MQTT: router.MQTTOptions{Addr: "127.0.0.1:0", MaxSessionBytes: sessionBytes}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt)
	g := &gateway{t: t, eng: eng, rt: rt, srv: srv, reg: reg}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		srv.Close()
		if err := eng.Close(ctx); err != nil {
			t.Errorf("engine close: %v", err)
		}
	})
	return g
}

// TestMQTTSessionGapNodeClockAhead: a topic is made through a node whose
// clock runs a minute ahead, while a persistent session on another node
// is connected and subscribed; the client gets every record of it live
// while retention trims the oldest. The session's record keeps no
// position of it (its bytes bound). Nothing was lost to the client, so its resume must count no
// session gap: the topic was not made after the session's connection
// ended, whatever the time the other node stamped on it.
func TestMQTTSessionGapNodeClockAhead(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	// The session's record has room for its filter and no position
	// (--mqtt-max-session-bytes): a partition left out resumes from the
	// subscription's start (duplicates, not loss).
	a := newJSGatewayClock(t, url, prefix, engine.SystemClock{}, 150)
	b := newJSGatewayClock(t, url, prefix, aheadClock{time.Minute}, 0)
	pub, _ := dialSession(t, a, 5, "tcp", "rvs-pub", true, 0)
	c, _ := dialSession(t, a, 5, "tcp", "rvs-1", false, 600)
	c.subscribe(t, "rvs/#", 1)
	code, _, _ := b.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "rvs.y", "partitions": 1,
		"retention": map[string]any{"max_messages": 2}, "on_full": "drop_oldest"})
	if code != 201 {
		t.Fatalf("topic not made: %d", code)
	}
	for i := range 5 {
		pub.publish(t, "rvs/y", 1, fmt.Sprint("live", i))
	}
	c.expectPayloads(t, "live0", "live1", "live2", "live3", "live4")
	c.leave(t, a, "rvs-1")
	c2, present := dialSession(t, a, 5, "tcp", "rvs-1", false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	// A live record comes after the replay, and the replay's gap count
	// before it: once it is here, the count is made.
	pub.publish(t, "rvs/y", 1, "mark")
	for m := c2.next(t); m.payload != "mark"; m = c2.next(t) {
		t.Logf("replayed %q", m.payload)
	}
	if n := metricValue(t, a.reg, "switchyard_mqtt_session_gaps_total", nil); n != 0 {
		t.Fatalf("switchyard_mqtt_session_gaps_total = %v for a client that got every record, want 0", n)
	}
}
