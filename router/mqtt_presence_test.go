package router_test

// Presence and $sys.stats count MQTT sessions (mqtt_presence.go).

import (
	"context"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/golang-jwt/jwt/v5"
)

// TestMQTTPresence: an MQTT 5 SUBSCRIBE with the user property
// presence=true joins the topic's presence set with the token's user:
// a native presence member sees it join, GET /v1/presence lists it, and
// it leaves when the MQTT session ends. A SUBSCRIBE without the property,
// and a wildcard filter with it, join nothing.
func TestMQTTPresence(t *testing.T) {
	g := newGateway(t, withMQTT, withAuth(t))
	token := func(sub string) string {
		return hs256(t, jwt.MapClaims{"sub": sub, "exp": time.Now().Add(time.Hour).Unix(), "subscribe": []string{"room.#"}})
	}
	ann := g.dialToken(t, token("ann"))
	ann.subscribe(t, "room.1", "presence", true)

	mq, err := dialMQTT(t, g, 5, "tcp", "presence-bob", token("bob"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	// Without the property: no join (the join below is the first frame).
	if rc := mq.subscribe(t, "room/2", 0); rc != 0 {
		t.Fatalf("SUBACK %#x", rc)
	}
	sa, err := mq.v5.Subscribe(ctx, &paho.Subscribe{
		Properties:    &paho.SubscribeProperties{User: paho.UserProperties{{Key: "presence", Value: "true"}}},
		Subscriptions: []paho.SubscribeOptions{{Topic: "room/+", QoS: 0}, {Topic: "room/1", QoS: 0}}})
	if err != nil || len(sa.Reasons) != 2 || sa.Reasons[0] != 0 || sa.Reasons[1] != 0 {
		t.Fatalf("SUBACK %v, %v", sa, err)
	}
	j := ann.nextOp(t, "join")
	if j["topic"] != "room.1" || j["user"] != "bob" {
		t.Fatalf("join %v: want bob on room.1", j)
	}
	mqSession := j["session"]
	st, body := g.httpAuth(t, "GET", "/v1/presence/room.1", adminKey, nil)
	members, _ := body["members"].([]any)
	if st != 200 || len(members) != 2 {
		t.Fatalf("presence of room.1: %d %v, want 2 members", st, body)
	}
	if st, body := g.httpAuth(t, "GET", "/v1/presence/room.2", adminKey, nil); st != 200 || num(body, "count") != 0 {
		t.Fatalf("presence of room.2: %d %v, want none (no presence asked)", st, body)
	}

	if err := mq.v5.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	l := ann.nextOp(t, "leave")
	if l["topic"] != "room.1" || l["session"] != mqSession {
		t.Fatalf("leave %v", l)
	}
}

// TestMQTTSysStatsConnections: $sys.stats "connections" counts MQTT
// sessions of both levels with the native ones, and no longer counts one
// once it is gone.
func TestMQTTSysStatsConnections(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) { c.router.StatsInterval = 10 * time.Millisecond })
	st := g.dial(t)
	st.subscribe(t, "$sys.stats")
	connections := func(want float64) {
		t.Helper()
		var d map[string]any
		deadline := time.Now().Add(waitTimeout)
		for n := 0; ; n++ {
			if n > 2000 || time.Now().After(deadline) {
				t.Fatalf("no $sys.stats frame with %v connections; last %v", want, d)
			}
			d, _ = st.nextOp(t, "message")["data"].(map[string]any)
			if d["connections"] == want {
				return
			}
		}
	}
	m5, err := dialMQTT(t, g, 5, "tcp", "stats-5", "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dialMQTT(t, g, 4, "ws", "stats-4", ""); err != nil {
		t.Fatal(err)
	}
	connections(3) // the native stats reader and the two MQTT sessions
	if err := m5.v5.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	connections(2)
}
