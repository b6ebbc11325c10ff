package router_test

import (
	"context"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/golang-jwt/jwt/v5"
)

// TestMQTTPresenceLeftWithFilter: an MQTT 5 session subscribes to
// "room" with presence=true (it joins room's presence set), then to
// "room/#" (whose patterns include "room"), then unsubscribes "room": the
// subscription that asked presence is gone and the session must leave
// the presence set. It stays: the presence belongs to the shared native
// pattern, which "room/#" keeps.
func TestMQTTPresenceLeftWithFilter(t *testing.T) {
	g := newGateway(t, withMQTT, withAuth(t))
	token := hs256(t, jwt.MapClaims{"sub": "bob", "exp": time.Now().Add(time.Hour).Unix(), "subscribe": []string{"room", "room.#"}})
	mq, err := dialMQTT(t, g, 5, "tcp", "rv2-presence-left", token)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	sa, err := mq.v5.Subscribe(ctx, &paho.Subscribe{
		Properties:    &paho.SubscribeProperties{User: paho.UserProperties{{Key: "presence", Value: "true"}}},
		Subscriptions: []paho.SubscribeOptions{{Topic: "room", QoS: 0}}})
	if err != nil || sa.Reasons[0] != 0 {
		t.Fatalf("SUBACK %v, %v", sa, err)
	}
	if st, body := g.httpAuth(t, "GET", "/v1/presence/room", adminKey, nil); st != 200 || num(body, "count") != 1 {
		t.Fatalf("presence of room: %d %v, want the MQTT session", st, body)
	}
	if rc := mq.subscribe(t, "room/#", 0); rc != 0 {
		t.Fatalf("SUBACK %#x", rc)
	}
	ua, err := mq.v5.Unsubscribe(ctx, &paho.Unsubscribe{Topics: []string{"room"}})
	if err != nil || ua.Reasons[0] != 0 {
		t.Fatalf("UNSUBACK %v, %v", ua, err)
	}
	if st, body := g.httpAuth(t, "GET", "/v1/presence/room", adminKey, nil); st != 200 || num(body, "count") != 0 {
		t.Fatalf("presence of room after UNSUBSCRIBE of the filter that asked it: %d %v, want no member", st, body)
	}
}

// TestMQTTPresenceOnHeldPattern: an MQTT 5 session subscribed to
// "room/#" then subscribes to "room" with presence=true and gets SUBACK
// 0: it must be in room's presence set. It is not: "room" is a pattern of
// "room/#" already, so no subscription is made and nothing joins.
func TestMQTTPresenceOnHeldPattern(t *testing.T) {
	g := newGateway(t, withMQTT, withAuth(t))
	token := hs256(t, jwt.MapClaims{"sub": "bob", "exp": time.Now().Add(time.Hour).Unix(), "subscribe": []string{"room", "room.#"}})
	mq, err := dialMQTT(t, g, 5, "tcp", "rv2-presence-held", token)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if rc := mq.subscribe(t, "room/#", 0); rc != 0 {
		t.Fatalf("SUBACK %#x", rc)
	}
	sa, err := mq.v5.Subscribe(ctx, &paho.Subscribe{
		Properties:    &paho.SubscribeProperties{User: paho.UserProperties{{Key: "presence", Value: "true"}}},
		Subscriptions: []paho.SubscribeOptions{{Topic: "room", QoS: 0}}})
	if err != nil || sa.Reasons[0] != 0 {
		t.Fatalf("SUBACK %v, %v", sa, err)
	}
	if st, body := g.httpAuth(t, "GET", "/v1/presence/room", adminKey, nil); st != 200 || num(body, "count") != 1 {
		t.Fatalf("presence of room after a granted SUBSCRIBE with presence=true: %d %v, want the MQTT session", st, body)
	}
}
