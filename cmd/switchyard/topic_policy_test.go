package main

import (
	"strings"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
)

// TestTopicShowPolicy: topic show names the topic policy that made a topic
// (readable and JSON).
func TestTopicShowPolicy(t *testing.T) {
	g := newGateway(t, func(o *router.Options) {
		o.TopicPolicies = []router.TopicPolicy{{Pattern: "orders.#", Config: engine.TopicConfig{Partitions: 2}}}
	})
	g.ok(t, "pub", "orders.a", "1")
	if out := g.ok(t, "--json=false", "topic", "show", "orders.a"); !strings.Contains(out, "policy:      orders.#") || !strings.Contains(out, "partitions:  2") {
		t.Fatalf("topic show:\n%s", out)
	}
	if got := lines(t, g.ok(t, "topic", "show", "orders.a")); len(got) != 1 || got[0]["policy"] != "orders.#" {
		t.Fatalf("topic show --json: %v", got)
	}
}
