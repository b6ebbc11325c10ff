package router_test

// A persistent session whose node is lost while its client is connected:
// the stored record says "held" (no expiry time) and no end comes to save
// it with one.

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
	"github.com/switchyard/switchyard/router"
)

// newJSGatewaySweep is newJSGateway with sweeps of expired sessions every
// sweep.
func newJSGatewaySweep(t *testing.T, url, prefix string, sweep time.Duration) *gateway {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	eng, err := jsengine.New(ctx, jsengine.Options{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	rt, err := router.New(router.Options{Engine: eng, Registry: reg, StatsInterval: -1,
		MQTT: router.MQTTOptions{Addr: "127.0.0.1:0", SessionSweep: sweep}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt)
	g := &gateway{t: t, eng: eng, rt: rt, srv: srv, reg: reg}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = rt.Shutdown(ctx) // the engine may be closed already
		srv.Close()
		_ = eng.Close(ctx)
	})
	return g
}

// TestMQTTPersistentSessionNodeLostExpires: node a holds a persistent
// session (MQTT 5, session expiry 1 s) when it loses the store (its engine
// is closed, as a crash or a NATS partition would), so the session's end
// cannot save its expiry time. The session still ends: the other node's
// sweeper removes it once its owner's node is gone for the expiry
// interval; it does not stay stored (and counted against
// --mqtt-max-sessions) for ever.
func TestMQTTPersistentSessionNodeLostExpires(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	a := newJSGatewaySweep(t, url, prefix, 50*time.Millisecond)
	b := newJSGatewaySweep(t, url, prefix, 50*time.Millisecond)
	c, _ := dialSession(t, a, 5, "tcp", "pl-1", false, 1)
	c.subscribe(t, "pl/t", 1)
	st := b.eng.(engine.MQTTSessionStore)
	if _, ok, err := st.LoadMQTTSession(context.Background(), "pl-1", time.Now()); err != nil || !ok {
		t.Fatalf("the session is not stored (%v, %v)", ok, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := a.eng.Close(ctx); err != nil { // node a is lost to the store
		t.Fatal(err)
	}
	_ = c.v5.Disconnect(&paho.Disconnect{})

	waitUntil(t, "the session of the lost node expires", func() bool {
		_, ok, err := st.LoadMQTTSession(context.Background(), "pl-1", time.Now())
		return err == nil && !ok
	})
}
