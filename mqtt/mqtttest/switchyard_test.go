package mqtttest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

// switchyardFeatures is what Switchyard's MQTT transport offers today
// (docs/mqtt.md, "Left out"), retained messages and persistent sessions
// included, less its shared subscriptions: a consumer
// group keeps the records published while it has no member and delivers
// them to the next one, where Mosquitto drops them, a difference no
// tolerance names yet.
var switchyardFeatures = Features{QoS2: true, Retained: true, Persistent: true}

// startSwitchyard runs a gateway on the memory engine with its MQTT TCP
// listener on a free loopback port and returns that port's address.
func startSwitchyard(t *testing.T) string {
	t.Helper()
	eng := memengine.New(memengine.Options{})
	rt, err := router.New(router.Options{Engine: eng, Registry: prometheus.NewRegistry(), StatsInterval: -1,
		MQTT: router.MQTTOptions{Addr: "127.0.0.1:0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Error(err)
		}
		if err := eng.Close(ctx); err != nil {
			t.Error(err)
		}
	})
	return rt.MQTTAddr().String()
}

// TestSwitchyardAgreesWithMosquitto runs each script, restricted to what
// Switchyard offers (Restrict), against Mosquitto and against Switchyard:
// what every client received must agree under the tolerances MQTT leaves
// open and Mosquitto's known deviation, and a recording with one message
// dropped must not.
func TestSwitchyardAgreesWithMosquitto(t *testing.T) {
	ref := mosquitto(t)
	sy := startSwitchyard(t)
	steps := 120
	if testing.Short() {
		steps = 40
	}
	tol := append([]Tolerance{MosquittoOverlapQoS}, MQTTOpen...)
	for _, seed := range []uint64{1, 2, 3, 4, 5} {
		s := Restrict(Generate(seed, steps), switchyardFeatures)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		a, err := Run(ctx, ref, s, Options{})
		if err != nil {
			cancel()
			t.Fatalf("seed %d: Mosquitto: %v\n%s", seed, err, s)
		}
		b, err := Run(ctx, sy, s, Options{})
		cancel()
		if err != nil {
			t.Fatalf("seed %d: Switchyard: %v\n%s", seed, err, s)
		}
		conns, n := count(a)
		persistent := 0
		for _, st := range s.Steps {
			if st.Op == OpConnect && !st.Clean {
				persistent++
			}
		}
		t.Logf("seed %d: %d steps, %d clients, %d connections (%d not clean), %d messages received", seed, len(s.Steps), len(s.Clients), conns, persistent, n)
		if d := Compare(s, a, b, tol...); len(d) != 0 {
			t.Fatalf("seed %d: Switchyard differs from Mosquitto:\n%v\nscript:\n%s", seed, d, s)
		}
		if n == 0 {
			t.Fatalf("seed %d: no client received anything; the comparison proves nothing", seed)
		}
	}
}

// TestRestrict: a restricted script keeps only what the features allow.
func TestRestrict(t *testing.T) {
	isShared := func(st Step) bool { return strings.HasPrefix(st.Filter, "$share/") }
	var shared, dropped int
	for seed := uint64(1); seed <= 10; seed++ {
		full := Generate(seed, 200)
		s := Restrict(full, Features{})
		if s.Seed != full.Seed || len(s.Clients) != len(full.Clients) {
			t.Fatalf("seed %d: seed or clients changed", seed)
		}
		for _, st := range full.Steps {
			if st.Op == OpSubscribe && isShared(st) {
				shared++
			}
		}
		dropped += len(full.Steps) - len(s.Steps)
		for _, st := range s.Steps {
			switch {
			case (st.Op == OpSubscribe || st.Op == OpUnsubscribe) && isShared(st):
				t.Errorf("seed %d: a shared filter kept: %v", seed, st)
			case st.QoS > 1:
				t.Errorf("seed %d: QoS 2 kept: %v", seed, st)
			case st.Retain:
				t.Errorf("seed %d: a retained publish kept: %v", seed, st)
			case st.Op == OpConnect && !st.Clean:
				t.Errorf("seed %d: a persistent session kept: %v", seed, st)
			case st.Op == OpPublish && st.QoS != 1:
				t.Errorf("seed %d: a publish not at the highest QoS: %v", seed, st)
			}
		}
		for _, c := range s.Clients {
			if c.Group != "" {
				t.Errorf("seed %d: client %s keeps group %s", seed, c.Name, c.Group)
			}
		}
	}
	if shared == 0 || dropped < shared {
		t.Errorf("seeds 1 to 10 have %d shared subscriptions and %d steps were dropped; the test proves nothing", shared, dropped)
	}
}
