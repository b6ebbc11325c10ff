package router_test

// Tests of the topic policies' router settings
// (topic_policies_access.go): each states a promise of README "Topics in
// the config file" or docs/protocol.md's topic policies.

import (
	"context"
	"fmt"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/switchyard/switchyard/router"
)

// TestPolicyMQTTPresenceOff: a policy with presence false refuses
// presence on its topics; an MQTT 5 SUBSCRIBE with the user property
// presence=true on such a topic must not join its presence set (README:
// "presence: false: a subscribe with presence is refused").
func TestPolicyMQTTPresenceOff(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.router.TopicPolicies = []router.TopicPolicy{{Pattern: "quiet.#", Presence: boolPtr(false)}}
	})
	mq, err := dialMQTT(t, g, 5, "tcp", "policy-presence", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	sa, err := mq.v5.Subscribe(ctx, &paho.Subscribe{
		Properties:    &paho.SubscribeProperties{User: paho.UserProperties{{Key: "presence", Value: "true"}}},
		Subscriptions: []paho.SubscribeOptions{{Topic: "quiet/room", QoS: 0}}})
	if sa == nil || len(sa.Reasons) != 1 {
		t.Fatalf("SUBACK %v: %v", sa, err)
	}
	if sa.Reasons[0] != 0x87 { // refused as a native presence subscribe is (forbidden)
		t.Errorf("SUBACK reason %#x (%v), want 0x87: presence is off on quiet.room", sa.Reasons[0], err)
	}
	st, body, _ := g.httpDo(t, "GET", "/v1/presence/quiet.room", nil)
	if st != 200 {
		t.Fatalf("GET /v1/presence/quiet.room: %d %v", st, body)
	}
	if n := num(body, "count"); n != 0 {
		t.Errorf("presence is off on quiet.room (policy quiet.#), yet an MQTT SUBSCRIBE with presence=true joined it "+
			"(SUBACK %v; presence count %d, members %v)", sa.Reasons, n, body["members"])
	}
}

// TestPolicyMaxLastWildcardBypass: a policy's max_last bounds
// {"last": N} on the topics it decides (README: "The first policy
// matching a topic also decides: max_last: the largest N"; the source's
// promise: "the bound it gets is one a policy gives every topic it can
// match"). A wildcard subscription must not replay more records of such
// a topic than its bound: neither through a later, wider policy that
// covers the wildcard (chat.# with 500 over chat.secret.# with 2) nor
// through the global bound when no policy covers it (# with --max-last
// 10 over cold.# with 2).
func TestPolicyMaxLastWildcardBypass(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) {
		c.router.MaxLast = 10
		c.router.TopicPolicies = []router.TopicPolicy{
			{Pattern: "chat.secret.#", MaxLast: 2},
			{Pattern: "chat.#", MaxLast: 500},
			{Pattern: "cold.#", MaxLast: 2},
		}
	})
	c := g.dial(t)
	if m := c.call(t, map[string]any{"op": "subscribe", "pattern": "chat.secret.x", "from": map[string]any{"last": 5}}); m["code"] != "bad_request" {
		t.Fatalf("exact chat.secret.x last 5: %v, want bad_request (its bound is 2)", m)
	}
	for i := range 5 {
		c.publish(t, "chat.secret.x", i)
		c.publish(t, "cold.a", i)
	}
	for _, tc := range []struct {
		pattern, topic, marker string
	}{{"chat.#", "chat.secret.x", "chat.end"}, {"#", "cold.a", "end.mark"}} {
		r := g.dial(t)
		m := r.call(t, map[string]any{"op": "subscribe", "pattern": tc.pattern, "from": map[string]any{"last": 5}})
		if m["op"] != "subscribed" {
			t.Fatalf("subscribe %s last 5: %v (the wildcard's own bound allows 5)", tc.pattern, m)
		}
		// A live record after the subscribe comes after the whole replay:
		// the replay of tc.topic ends before it.
		c.publish(t, tc.marker, "end")
		got := 0
		for i := 0; ; i++ {
			if i > 30 {
				t.Fatalf("subscribe %s: no %s record among %d messages", tc.pattern, tc.marker, i)
			}
			msg := r.nextOp(t, "message")
			if msg["topic"] == tc.marker {
				break
			}
			if msg["topic"] == tc.topic {
				got++
			}
		}
		if got != 2 {
			t.Errorf("subscribe %s last 5 replayed %d records of %s, whose policy bounds last to 2 (want its 2 newest)", tc.pattern, got, tc.topic)
		}
	}
}

// TestPolicySubscribeOnlyCreatesTopics: a client whose grants
// refuse publishing to a topic cannot create it by publishing; it must
// not create it (an engine topic the gateway holds until an administrator
// deletes it) by subscribing either. Here an anonymous client, whose only
// grant is a policy's anonymous subscribe, subscribes to and unsubscribes
// from topics no one publishes to, and each one stays behind.
func TestPolicySubscribeOnlyCreatesTopics(t *testing.T) {
	g := newGateway(t, withAuth(t), func(c *gwConfig) {
		c.router.Auth.Anonymous = &router.Grants{}
		c.router.TopicPolicies = []router.TopicPolicy{{Pattern: "rooms.#", Anonymous: router.TopicAnonymous{Subscribe: true}}}
	})
	c := g.dialRaw(t)
	c.nextOp(t, "welcome")
	if m := c.call(t, map[string]any{"op": "publish", "topic": "rooms.r0", "data": 1}); m["code"] != "forbidden" {
		t.Fatalf("anonymous publish to rooms.r0: %v, want forbidden", m)
	}
	const n = 20
	for i := range n {
		topic := fmt.Sprintf("rooms.r%d", i)
		c.subscribe(t, topic)
		c.mustOK(t, map[string]any{"op": "unsubscribe", "pattern": topic}, "unsubscribed")
	}
	made := 0
	for i := range n {
		if _, err := g.eng.Topic(context.Background(), fmt.Sprintf("rooms.r%d", i)); err == nil {
			made++
		}
	}
	if made != 0 {
		t.Errorf("an anonymous client without any publish grant created %d of %d topics by subscribing (and left them after unsubscribing)", made, n)
	}
}

// TestPolicyRefusedSubscribeLeavesTopic: a subscribe that is
// refused holds nothing; the topic its create-on-subscribe made must not
// stay behind. Here the second presence subscribe is refused by the
// presence join rate (rate_limited) after it created its topic.
func TestPolicyRefusedSubscribeLeavesTopic(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) {
		c.router.Presence = router.PresenceOptions{JoinRate: 0.001, JoinBurst: 1}
		c.router.TopicPolicies = []router.TopicPolicy{{Pattern: "rooms.#"}}
	})
	c := g.dial(t)
	c.subscribe(t, "rooms.a", "presence", true)
	m := c.call(t, map[string]any{"op": "subscribe", "pattern": "rooms.b", "presence": true})
	if m["code"] != "rate_limited" {
		t.Fatalf("second presence subscribe: %v, want rate_limited", m)
	}
	if _, err := g.eng.Topic(context.Background(), "rooms.b"); err == nil {
		t.Errorf("the refused subscribe to rooms.b (%v) left the topic it created behind", m["message"])
	}
}

// TestPolicyRetainedWillStored: a policy with mqtt retained false
// keeps retained MQTT messages on its topics from being stored (README:
// "a retained MQTT PUBLISH on the topics is published but not stored");
// a will with the retain flag is the client's last PUBLISH and must not
// be stored either, or a client sets the retained message the policy
// forbids by connecting with a retained will and dropping the link.
func TestPolicyRetainedWillStored(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.router.TopicPolicies = []router.TopicPolicy{{Pattern: "telemetry.#", MQTTRetain: boolPtr(false)}}
	})
	watch, err := dialMQTT(t, g, 5, "tcp", "policy-will-watch", "")
	if err != nil {
		t.Fatal(err)
	}
	watch.subscribe(t, "telemetry/#", 1)
	lost := dialRaw(t, g, "tcp", 5)
	if rc := willConnect(t, lost, "policy-will", "telemetry/w", "last words", true, 0, 0); rc != 0 {
		t.Fatalf("CONNACK %#x", rc)
	}
	lost.nc.Close()
	if m := watch.next(t); m.payload != "last words" { // the will was published
		t.Fatalf("watcher got %+v, want the will", m)
	}
	late, err := dialMQTT(t, g, 5, "tcp", "policy-will-late", "")
	if err != nil {
		t.Fatal(err)
	}
	late.subscribe(t, "telemetry/#", 1)
	pub, err := dialMQTT(t, g, 5, "tcp", "policy-will-pub", "")
	if err != nil {
		t.Fatal(err)
	}
	pub.publish(t, "telemetry/marker", 1, "m")
	// Retained messages come before the live ones: the marker first
	// means no retained will was stored.
	if m := late.next(t); m.topic != "telemetry/marker" {
		t.Errorf("a new subscription got %+v before the marker: the retained will on telemetry/w was stored although the policy telemetry.# says retained false", m)
	}
}
