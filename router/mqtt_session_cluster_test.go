package router_test

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
	"github.com/switchyard/switchyard/router"
)

// newJSGateway starts a gateway with an MQTT listener on a JetStream
// engine of url and prefix: gateways made with the same ones are nodes
// of one cluster. mods, if any, change the router's options.
func newJSGateway(t *testing.T, url, prefix string, mods ...func(*router.Options)) *gateway {
	t.Helper()
	var opts router.Options
	for _, m := range mods {
		m(&opts)
	}
	return newJSGatewayWith(t, url, prefix, nil, opts, nil)
}

// newJSGatewayWith is newJSGateway with the engine's clock (nil: the
// system's), the router's options (its engine, registry, stats interval
// and MQTT address are set here) and wrap, if not nil, between the router
// and its engine.
func newJSGatewayWith(t *testing.T, url, prefix string, clock engine.Clock, opts router.Options, wrap func(*jsengine.Engine) engine.Engine) *gateway {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	eng, err := jsengine.New(ctx, jsengine.Options{URL: url, Prefix: prefix, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	opts.Engine, opts.Registry, opts.StatsInterval, opts.MQTT.Addr = eng, reg, -1, "127.0.0.1:0"
	if wrap != nil {
		opts.Engine = wrap(eng)
	}
	rt, err := router.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	// As newGateway's: responses and frames checked against the API
	// descriptions, which the checker loads; its cleanup, registered
	// first, runs once the server has closed.
	srv := httptest.NewServer(newAPICheck(t).wrap(rt))
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

// TestMQTTPersistentSessionAcrossNodes: on JetStream a persistent session
// made through one gateway resumes through another: Session Present 1,
// the QoS 1 messages published meanwhile (through either node) delivered
// from the stored positions, the subscription live again; and a clean
// start through the first node then discards it for both.
func TestMQTTPersistentSessionAcrossNodes(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	a, b := newJSGateway(t, url, prefix), newJSGateway(t, url, prefix)
	pubA, _ := dialSession(t, a, 5, "tcp", "pn-pub-a", true, 0)
	pubB, _ := dialSession(t, b, 4, "tcp", "pn-pub-b", true, 0)
	for _, v := range []byte{4, 5} {
		id := "pn-" + string('0'+rune(v))
		topic := "pn/" + string('0'+rune(v)) + "/t"
		c, present := dialSession(t, a, v, "tcp", id, false, 600)
		if present {
			t.Fatal("Session Present 1 on the first connect")
		}
		c.subscribe(t, topic, 1)
		pubA.publish(t, topic, 1, "seen")
		c.expectPayloads(t, "seen")
		c.leave(t, a, id)
		pubA.publish(t, topic, 1, "away-a")
		pubB.publish(t, topic, 1, "away-b")

		c2, present := dialSession(t, b, v, "tcp", id, false, 600)
		if !present {
			t.Fatalf("v%d: Session Present 0 through the other node", v)
		}
		seen := map[string]bool{"seen": true}
		c2.expectFresh(t, seen, "away-a", "away-b")
		pubA.publish(t, topic, 1, "live")
		c2.expectFresh(t, seen, "live")
		c2.leave(t, b, id)

		if _, present := dialSession(t, a, v, "tcp", id, true, 0); present {
			t.Fatal("Session Present 1 on a clean connect")
		}
		// The clean connection holds its id (a hold, no session) while
		// it runs.
		if rec, ok, err := a.eng.(engine.MQTTSessionStore).LoadMQTTSession(context.Background(), id, time.Now()); err != nil || ok && !rec.IsHold() {
			t.Fatalf("after a clean start the store still has the session (%v, %+v, %v)", ok, rec, err)
		}
	}
}

// TestJSGatewayNativeClient: a native WebSocket client of a JetStream
// test gateway reads its frames checked against asyncapi.json, run alone
// as with the other tests, and the gateway's HTTP responses are checked
// against openapi.json as newGateway's are.
func TestJSGatewayNativeClient(t *testing.T) {
	url := natstest.URL(t)
	g := newJSGateway(t, url, natstest.Prefix(t, url))
	c := g.dial(t)
	c.subscribe(t, "jsn.room", "presence", true)
	if st, body, _ := g.httpDo(t, "GET", "/v1/presence/jsn.room", nil); st != 200 || num(body, "count") != 1 {
		t.Fatalf("presence of jsn.room: %d %v, want the native client", st, body)
	}
}
