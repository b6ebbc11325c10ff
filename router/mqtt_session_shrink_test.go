package router_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

// newMemGateway starts a gateway with an MQTT listener on eng, which the
// caller closes; stop shuts the gateway down.
func newMemGateway(t *testing.T, eng engine.Engine, mo router.MQTTOptions) (g *gateway, stop func()) {
	t.Helper()
	reg := prometheus.NewRegistry()
	mo.Addr = "127.0.0.1:0"
	rt, err := router.New(router.Options{Engine: eng, Registry: reg, StatsInterval: -1, MQTT: mo})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt)
	g = &gateway{t: t, eng: eng, rt: rt, srv: srv, reg: reg}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		srv.Close()
	}
	t.Cleanup(stop)
	return g, stop
}

// TestMQTTPersistentSessionBoundLowered: a gateway restarted with a lower
// --mqtt-max-session-bytes than a stored session's size still lets its
// client connect: the session resumes with what fits the new bound (its
// positions, then its filters, give way: duplicates or a fresh start),
// rather than every CONNECT being refused as server unavailable until the
// session expires (a week, for 3.1.1).
func TestMQTTPersistentSessionBoundLowered(t *testing.T) {
	eng := memengine.New(memengine.Options{})
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	g1, stop1 := newMemGateway(t, eng, router.MQTTOptions{})
	c, _ := dialSession(t, g1, 4, "tcp", "pbl-1", false, 0)
	for _, f := range []string{"a", "b", "c"} {
		c.subscribe(t, "pbl/"+f+"/"+strings.Repeat("x", 200), 1)
	}
	c.leave(t, g1, "pbl-1")
	stop1()

	g2, _ := newMemGateway(t, eng, router.MQTTOptions{MaxSessionBytes: 400})
	c2, present := dialSession(t, g2, 4, "tcp", "pbl-1", false, 0)
	if present {
		t.Fatal("Session Present 1, but the stored filters alone pass the new bound: the session starts afresh")
	}
	c2.subscribe(t, "pbl/d", 1)
	pub, _ := dialSession(t, g2, 4, "tcp", "pbl-pub", true, 0)
	pub.publish(t, "pbl/d", 1, "after")
	c2.expectPayloads(t, "after")
}
