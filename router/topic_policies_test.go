package router_test

import (
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
)

// TestTopicPolicies: a topic a publish creates takes the settings of the
// first policy matching it (WebSocket and HTTP publishes), GET
// /v1/topics/{name} names that policy, a topic no policy matches takes the
// engine's defaults and names none, and a reload's policies apply to the
// next topic created.
func TestTopicPolicies(t *testing.T) {
	policies := []router.TopicPolicy{
		{Pattern: "orders.*.eu", Config: engine.TopicConfig{Partitions: 3, MaxMessages: 50}},
		{Pattern: "orders.#", Config: engine.TopicConfig{Partitions: 2}},
	}
	g := newGateway(t, func(c *gwConfig) { c.router.TopicPolicies = policies })
	c := g.dial(t)
	c.publish(t, "orders.x.eu", 1)
	if _, body, _ := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "orders.y", "data": 1}); body["offset"] != 0.0 {
		t.Fatalf("HTTP publish: %v", body)
	}
	c.publish(t, "other.z", 1)
	for _, tc := range []struct {
		topic, policy string
		partitions    float64
		maxMessages   float64
	}{
		{"orders.x.eu", "orders.*.eu", 3, 50},
		{"orders.y", "orders.#", 2, float64(engine.Defaults.MaxMessages)},
		{"other.z", "", 1, float64(engine.Defaults.MaxMessages)},
	} {
		st, body, _ := g.httpDo(t, "GET", "/v1/topics/"+tc.topic, nil)
		ret, _ := body["retention"].(map[string]any)
		policy, _ := body["policy"].(string)
		if st != 200 || body["partitions"] != tc.partitions || ret["max_messages"] != tc.maxMessages || policy != tc.policy {
			t.Errorf("%s: %d %v, want %v partitions, %v records, policy %q", tc.topic, st, body, tc.partitions, tc.maxMessages, tc.policy)
		}
	}
	// The listing names the policies too (the dashboard's topics card
	// shows them).
	_, list, _ := g.httpDo(t, "GET", "/v1/topics", nil)
	listed := map[string]string{}
	items, _ := list["topics"].([]any)
	for _, it := range items {
		m, _ := it.(map[string]any)
		name, _ := m["name"].(string)
		listed[name], _ = m["policy"].(string)
	}
	if listed["orders.x.eu"] != "orders.*.eu" || listed["orders.y"] != "orders.#" || listed["other.z"] != "" {
		t.Errorf("GET /v1/topics policies %v, want orders.*.eu, orders.# and none", listed)
	}
	if err := g.rt.Reload(router.Options{TopicPolicies: []router.TopicPolicy{{Pattern: "other.#", Config: engine.TopicConfig{Partitions: 4}}}}); err != nil {
		t.Fatal(err)
	}
	c.publish(t, "other.w", 1)
	if _, body, _ := g.httpDo(t, "GET", "/v1/topics/other.w", nil); body["partitions"] != 4.0 || body["policy"] != "other.#" {
		t.Fatalf("a topic created after the reload: %v", body)
	}
	if err := g.rt.Reload(router.Options{TopicPolicies: []router.TopicPolicy{{Pattern: "bad..", Config: engine.TopicConfig{}}}}); err == nil {
		t.Fatal("a reload with a bad pattern was accepted")
	}
}
