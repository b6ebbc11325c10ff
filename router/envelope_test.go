package router_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/coder/websocket"
)

// dialLean connects with ?envelope=lean and reads the welcome.
func (g *gateway) dialLean(t *testing.T) *client {
	t.Helper()
	c := g.dialWith(t, "?envelope=lean", nil)
	c.welcome = c.next(t)
	if c.welcome["op"] != "welcome" || c.welcome["envelope"] != "lean" {
		t.Fatalf("welcome %v, want one with envelope lean", c.welcome)
	}
	return c
}

// TestLeanEnvelope: a lean session's messages leave out time, and pattern
// when it is the topic; live, replayed and full-envelope sessions beside
// it are unaffected.
func TestLeanEnvelope(t *testing.T) {
	g := newGateway(t)
	lean, full := g.dialLean(t), g.dial(t)
	if _, ok := full.welcome["envelope"]; ok {
		t.Errorf("full welcome %v names an envelope", full.welcome)
	}
	lean.subscribe(t, "env.a")
	lean.subscribe(t, "env.*")
	full.subscribe(t, "env.a")
	full.publish(t, "env.a", map[string]any{"n": 1}, "key", "k1")

	check := func(t *testing.T, m map[string]any, pattern string, wantTime bool) {
		t.Helper()
		if m["op"] != "message" || m["topic"] != "env.a" || m["key"] != "k1" || num(m, "offset") != 0 {
			t.Fatalf("message %v", m)
		}
		if _, ok := m["partition"]; !ok {
			t.Errorf("message %v has no partition", m)
		}
		if d, _ := m["data"].(map[string]any); d["n"] != float64(1) {
			t.Errorf("data of %v", m)
		}
		if p, ok := m["pattern"]; pattern == "" && ok || pattern != "" && p != pattern {
			t.Errorf("message %v: pattern %v, want %q", m, p, pattern)
		}
		if _, ok := m["time"]; ok != wantTime {
			t.Errorf("message %v: time present %v, want %v", m, ok, wantTime)
		}
	}
	got := map[string]map[string]any{}
	for range 2 {
		m := lean.nextOp(t, "message")
		p, _ := m["pattern"].(string)
		got[p] = m
	}
	check(t, got[""], "", false)
	check(t, got["env.*"], "env.*", false)
	check(t, full.nextOp(t, "message"), "env.a", true)

	// A replay from the log is encoded for the session's envelope too.
	late := g.dialLean(t)
	late.subscribe(t, "env.a", "from", "earliest")
	check(t, late.nextOp(t, "message"), "", false)
}

func TestLeanEnvelopeUnknownValue(t *testing.T) {
	g := newGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, resp, err := websocket.Dial(ctx, g.wsURL()+"?envelope=tiny", nil)
	if err == nil || resp == nil || resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("dial: err %v, response %v; want 400", err, resp)
	}
}
