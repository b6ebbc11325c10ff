package router_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"

	"github.com/eclipse/paho.golang/paho"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
)

func boolPtr(b bool) *bool { return &b }

// sseStatus opens an SSE stream with query q and returns its status,
// closing the stream once the headers are in.
func sseStatus(t *testing.T, g *gateway, q url.Values) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", g.srv.URL+"/v1/sse?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestTopicPolicyMaxLast: a policy's max_last bounds {"last": N} of
// subscriptions to the topics it matches, below and above the global
// MaxLast; a wildcard subscription takes the first policy covering its
// whole pattern, else the global bound; SSE streams are bounded the same
// way; a reload applies new bounds to the next subscribe.
func TestTopicPolicyMaxLast(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) {
		c.router.MaxLast = 10
		c.router.TopicPolicies = []router.TopicPolicy{
			{Pattern: "hot.#", MaxLast: 500},
			{Pattern: "cold.#", MaxLast: 2},
			{Pattern: "plain.#"}, // no max_last: the global one
		}
	})
	c := g.dial(t)
	try := func(pattern string, n int) string {
		t.Helper()
		m := c.call(t, map[string]any{"op": "subscribe", "pattern": pattern, "from": map[string]any{"last": n}})
		if m["op"] == "subscribed" {
			c.mustOK(t, map[string]any{"op": "unsubscribe", "pattern": pattern}, "unsubscribed")
			return "ok"
		}
		code, _ := m["code"].(string)
		return code
	}
	for _, tc := range []struct {
		pattern string
		n       int
		want    string
	}{
		{"cold.a", 2, "ok"},
		{"cold.a", 3, "bad_request"},
		{"hot.a", 500, "ok"},
		{"hot.a", 501, "bad_request"},
		{"hot.*", 200, "ok"},       // hot.# covers it
		{"#", 11, "bad_request"},   // no policy covers it: the global bound
		{"*.a", 11, "bad_request"}, // hot.# matches some of its topics, covers none
		{"plain.a", 11, "bad_request"},
		{"plain.a", 10, "ok"},
		{"other", 10, "ok"},
		{"other", 11, "bad_request"},
	} {
		if got := try(tc.pattern, tc.n); got != tc.want {
			t.Errorf("subscribe %s last %d: %s, want %s", tc.pattern, tc.n, got, tc.want)
		}
	}
	q := url.Values{"pattern": {"cold.a", "hot.a"}, "from": {`{"last":3}`}}
	if st := sseStatus(t, g, q); st != 400 {
		t.Errorf("SSE last 3 on cold.a: %d, want 400", st)
	}
	q.Set("from", `{"last":2}`)
	if st := sseStatus(t, g, q); st != 200 {
		t.Errorf("SSE last 2 on cold.a: %d, want 200", st)
	}
	if err := g.rt.Reload(router.Options{MaxLast: 10, TopicPolicies: []router.TopicPolicy{{Pattern: "hot.#", MaxLast: 5}}}); err != nil {
		t.Fatal(err)
	}
	if got := try("hot.b", 6); got != "bad_request" {
		t.Errorf("after the reload, hot.b last 6: %s", got)
	}
	if got := try("cold.b", 10); got != "ok" {
		t.Errorf("after the reload, cold.b last 10: %s", got)
	}
	if err := g.rt.Reload(router.Options{TopicPolicies: []router.TopicPolicy{{Pattern: "x.#", MaxLast: -1}}}); err == nil {
		t.Error("a negative MaxLast was accepted")
	}
}

// TestTopicPolicyPresence: a policy with presence false refuses a
// subscribe with presence on its topics (forbidden, naming the policy)
// and keeps plain subscribes; other topics keep presence; a reload turns
// it on again.
func TestTopicPolicyPresence(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) {
		c.router.TopicPolicies = []router.TopicPolicy{
			{Pattern: "rooms.lobby", Presence: boolPtr(true)},
			{Pattern: "rooms.#", Presence: boolPtr(false)},
		}
	})
	c := g.dial(t)
	m := c.call(t, map[string]any{"op": "subscribe", "pattern": "rooms.quiet", "presence": true})
	if m["code"] != "forbidden" || m["message"] != `presence is off on "rooms.quiet" (topic policy "rooms.#")` {
		t.Fatalf("presence on rooms.quiet: %v", m)
	}
	c.subscribe(t, "rooms.quiet")
	c.subscribe(t, "rooms.lobby", "presence", true)
	c.subscribe(t, "halls.a", "presence", true)
	if got := metricValue(t, g.reg, "switchyard_forbidden_total", map[string]string{"op": "presence"}); got != 1 {
		t.Errorf("switchyard_forbidden_total{op=presence} = %v, want 1", got)
	}
	if err := g.rt.Reload(router.Options{}); err != nil {
		t.Fatal(err)
	}
	c.subscribe(t, "rooms.other", "presence", true)
}

// TestTopicPolicyAnonymous: with anonymous clients allowed, a policy's
// anonymous grants add its pattern to the global anonymous ones, checked
// as every grant is (WebSocket and HTTP); a reload that takes a grant away
// refuses the next call and ends the subscriptions it covered; without
// anonymous access the policies let no one in.
func TestTopicPolicyAnonymous(t *testing.T) {
	policies := []router.TopicPolicy{
		{Pattern: "feeds.#", Anonymous: router.TopicAnonymous{Publish: true, Subscribe: true}},
		{Pattern: "inbox.*", Anonymous: router.TopicAnonymous{Publish: true}},
		{Pattern: "private.#"},
	}
	var opts router.Options
	g := newGateway(t, withAuth(t), func(c *gwConfig) {
		c.router.Auth.Anonymous = &router.Grants{Subscribe: []string{"public.#"}}
		c.router.TopicPolicies = policies
		opts = c.router
	})
	c := g.dialRaw(t)
	c.nextOp(t, "welcome")
	c.subscribe(t, "public.news")
	c.subscribe(t, "feeds.*")
	c.publish(t, "feeds.a", 1)
	c.publish(t, "inbox.x", 1)
	for _, req := range []map[string]any{
		{"op": "subscribe", "pattern": "inbox.x"},
		{"op": "subscribe", "pattern": "private.a"},
		{"op": "publish", "topic": "public.news", "data": 1},
		{"op": "publish", "topic": "private.a", "data": 1},
	} {
		if m := c.call(t, req); m["code"] != "forbidden" {
			t.Errorf("%v: %v, want forbidden", req, m)
		}
	}
	if st, _ := g.httpAuth(t, "POST", "/v1/publish", "", map[string]any{"topic": "feeds.b", "data": 1}); st != 200 {
		t.Errorf("anonymous HTTP publish to feeds.b: %d", st)
	}
	if st, _ := g.httpAuth(t, "POST", "/v1/publish", "", map[string]any{"topic": "private.b", "data": 1}); st != 403 {
		t.Errorf("anonymous HTTP publish to private.b: %d", st)
	}
	// The reload takes feeds.# away: the open session loses its feeds.*
	// subscription and may no longer publish there.
	opts.TopicPolicies = policies[1:]
	if err := g.rt.Reload(opts); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ { // the two messages of feeds.*, then its end
		m := c.next(t)
		if m["op"] == "unsubscribed" && m["pattern"] == "feeds.*" {
			break
		}
		if m["op"] != "message" || i == 2 {
			t.Fatalf("after the reload: %v, want feeds.* unsubscribed", m)
		}
	}
	if m := c.call(t, map[string]any{"op": "publish", "topic": "feeds.a", "data": 1}); m["code"] != "forbidden" {
		t.Errorf("publish to feeds.a after the reload: %v", m)
	}
	c.publish(t, "inbox.y", 1)

	closed := newGateway(t, withAuth(t), func(c *gwConfig) { c.router.TopicPolicies = policies })
	if st, _, _ := closed.dialRefused(t, "", nil); st != 401 {
		t.Errorf("anonymous upgrade without anonymous access: %d", st)
	}
}

// TestTopicPolicyCreateOnSubscribe: a subscribe to an exact topic that
// does not exist creates it with the settings of the first policy
// matching it, before its replay starts (a group subscribe and an SSE
// stream too); a
// wildcard subscribe or one no policy matches creates nothing; the
// creation counts against MaxTopics.
func TestTopicPolicyCreateOnSubscribe(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) {
		c.router.MaxTopics = 4
		c.router.TopicPolicies = []router.TopicPolicy{{Pattern: "orders.#", Config: engine.TopicConfig{Partitions: 3, MaxMessages: 20}}}
	})
	c := g.dial(t)
	c.subscribe(t, "orders.new", "from", "earliest")
	c.subscribe(t, "orders.jobs", "group", "workers")
	c.subscribe(t, "orders.*")
	c.subscribe(t, "misc.x")
	// The stream's headers go out before its subscribe: its subscribed
	// event says the subscribe (and the topic's creation) is done.
	s, st := openSSE(t, g.srv.URL, "/v1/sse?"+url.Values{"pattern": {"orders.sse"}}.Encode(), nil)
	if st != 200 {
		t.Fatalf("SSE stream on orders.sse: %d", st)
	}
	for ev := s.next(t); ev.event != "subscribed"; ev = s.next(t) {
		if ev.event != "welcome" {
			t.Fatalf("SSE stream on orders.sse: event %q %s before its subscribed", ev.event, ev.data)
		}
	}
	for _, tc := range []struct {
		topic string
		st    int
	}{{"orders.new", 200}, {"orders.jobs", 200}, {"orders.sse", 200}, {"misc.x", 404}} {
		st, body, _ := g.httpDo(t, "GET", "/v1/topics/"+tc.topic, nil)
		if st != tc.st || (st == 200 && (body["partitions"] != 3.0 || body["policy"] != "orders.#")) {
			t.Errorf("%s: %d %v", tc.topic, st, body)
		}
	}
	// The subscription's replay reads the topic the policy made: a
	// publish on each partition reaches it.
	for _, key := range []string{"a", "b", "c", "d", "e", "f"} {
		c.publish(t, "orders.new", key, "key", key)
	}
	parts := map[float64]bool{}
	for range 6 {
		m := c.nextOp(t, "message")
		if m["topic"] == "orders.new" {
			parts[m["partition"].(float64)] = true
		}
	}
	if len(parts) < 2 {
		t.Errorf("messages of orders.new on partitions %v, want more than one", parts)
	}
	c.publish(t, "other", 1) // the fourth topic
	if m := c.call(t, map[string]any{"op": "subscribe", "pattern": "orders.late"}); m["code"] != "too_many_topics" {
		t.Errorf("subscribe past MaxTopics: %v", m)
	}
	if _, err := g.eng.Topic(context.Background(), "orders.late"); err == nil {
		t.Error("orders.late was created past MaxTopics")
	}
}

// TestTopicPolicyMQTTRetained: a policy with MQTT retained false keeps
// retained PUBLISHes on its topics from being stored: they are published
// (PUBACK success, live subscribers get them) but a later subscription
// gets no retained message, counted as result "off"; other topics keep
// theirs; a reload turns storing on again.
func TestTopicPolicyMQTTRetained(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.router.TopicPolicies = []router.TopicPolicy{{Pattern: "telemetry.#", MQTTRetain: boolPtr(false)}}
	})
	pub, err := dialMQTT(t, g, 5, "tcp", "pol-pub", "")
	if err != nil {
		t.Fatal(err)
	}
	live, err := dialMQTT(t, g, 5, "tcp", "pol-live", "")
	if err != nil {
		t.Fatal(err)
	}
	live.subscribe(t, "telemetry/#", 1)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	resp, err := pub.v5.Publish(ctx, &paho.Publish{Topic: "telemetry/a", QoS: 1, Retain: true, Payload: []byte("t1")})
	if err != nil || resp.ReasonCode != 0 {
		t.Fatalf("retained PUBLISH to telemetry/a: %v %+v", err, resp)
	}
	live.expectMsgs(t, mqttMsg{topic: "telemetry/a", payload: "t1", qos: 1})
	pub.publishRetained(t, "state/a", 1, "s1")

	sub, err := dialMQTT(t, g, 5, "ws", "pol-sub", "")
	if err != nil {
		t.Fatal(err)
	}
	sub.subscribe(t, "telemetry/#", 1)
	sub.subscribe(t, "state/#", 1)
	sub.expectMsgs(t, mqttMsg{topic: "state/a", payload: "s1", qos: 1, retain: true})
	pub.publish(t, "telemetry/marker", 1, "m")
	// Retained messages come before the live ones: the marker first
	// means telemetry/a had none.
	sub.expectMsgs(t, mqttMsg{topic: "telemetry/marker", payload: "m", qos: 1})
	if got := metricValue(t, g.reg, "switchyard_mqtt_retained_total", map[string]string{"result": "off"}); got != 1 {
		t.Errorf("switchyard_mqtt_retained_total{result=off} = %v, want 1", got)
	}

	if err := g.rt.Reload(router.Options{}); err != nil {
		t.Fatal(err)
	}
	pub.publishRetained(t, "telemetry/b", 1, "t2")
	late, err := dialMQTT(t, g, 5, "tcp", "pol-late", "")
	if err != nil {
		t.Fatal(err)
	}
	late.subscribe(t, "telemetry/b", 1)
	late.expectMsgs(t, mqttMsg{topic: "telemetry/b", payload: "t2", qos: 1, retain: true})
}
