package router_test

// The subscribe and publish hooks for MQTT sessions (mqtt_subscribe.go,
// mqtt_publish.go): the native path's calls and cache, with paho clients
// of both levels.

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// mqttHookBackend answers the hooks for MQTT sessions: every connect is
// user "mq", granted to subscribe to a.#, p.# and q.# and to publish to
// a.#; the subscribe hook allows patterns of two or more characters
// starting with "b" (cached a minute) and refuses the others; the publish
// hook allows topics starting with "p", wrapping the data and adding a
// header, and refuses the others. A subscribe to "b.slow" is answered
// once slow is closed; asked (buffered) is told when it comes.
func mqttHookBackend(t *testing.T, slow <-chan struct{}, asked chan<- struct{}) *backend {
	return newBackend(t, func(w http.ResponseWriter, r *http.Request, hook string, body map[string]any) {
		switch hook {
		case "connect":
			reply(w, map[string]any{"allow": true, "user": "mq",
				"grants": map[string]any{"subscribe": []string{"a.#", "p.#", "q.#"}, "publish": []string{"a.#"}}})
		case "subscribe":
			p, _ := body["pattern"].(string)
			if p == "b.slow" {
				asked <- struct{}{}
				select {
				case <-slow:
				case <-r.Context().Done():
				}
			}
			if len(p) > 1 && p[0] == 'b' {
				reply(w, map[string]any{"allow": true, "cache_ttl_ms": 60000})
				return
			}
			reply(w, map[string]any{"allow": false, "code": "forbidden", "message": "not in " + p})
		case "publish":
			if topic, _ := body["topic"].(string); len(topic) > 1 && topic[0] == 'p' {
				reply(w, map[string]any{"allow": true, "data": map[string]any{"by": body["user"], "was": body["data"]},
					"headers": map[string]string{"checked": "yes"}})
				return
			}
			reply(w, map[string]any{"allow": false, "code": "forbidden", "message": "not yours"})
		}
	})
}

// TestMQTTSubscribeHook: a filter outside the grants is decided by the
// subscribe hook, per filter: allowed (granted QoS, and deliveries come),
// refused (0x87 for MQTT 5, 0x80 for 3.1.1), its answer cached per user
// as for native sessions; "b/#" goes on without the parent level the hook
// refuses.
func TestMQTTSubscribeHook(t *testing.T) {
	b := mqttHookBackend(t, nil, nil)
	g := newGateway(t, withMQTT, withHooks(b))
	c5, err := dialMQTT(t, g, 5, "tcp", "hook-sub5", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	sa, err := c5.v5.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{
		{Topic: "a/x", QoS: 1}, {Topic: "b/x", QoS: 1}, {Topic: "c/x", QoS: 1}}})
	if sa == nil || len(sa.Reasons) != 3 {
		t.Fatalf("SUBACK %v, %v", sa, err)
	}
	if got := sa.Reasons; got[0] != 1 || got[1] != 1 || got[2] != 0x87 {
		t.Fatalf("SUBACK reasons % x, want 01 01 87 (granted, hook allowed, hook refused)", got)
	}
	if n := b.calls["subscribe"].Load(); n != 2 {
		t.Fatalf("subscribe hook called %d times, want 2 (b.x and c.x; a.x is granted)", n)
	}
	b.mu.Lock()
	var asked []string
	for _, body := range b.bodies["subscribe"] {
		if body["user"] != "mq" || body["session"] == nil {
			t.Errorf("subscribe hook body %v: want user mq and the session", body)
		}
		asked = append(asked, body["pattern"].(string))
	}
	b.mu.Unlock()
	if strings.Join(asked, " ") != "b.x c.x" {
		t.Fatalf("the hook was asked about %v", asked)
	}

	// The subscription the hook allowed delivers.
	httpPublish(t, g, "b.x", map[string]any{"n": 1})
	if m := c5.next(t); m.topic != "b/x" || m.payload != `{"n":1}` {
		t.Fatalf("delivery %+v", m)
	}

	// A shared subscription: the hook is asked with the group.
	if rc := c5.subscribe(t, "$share/wk/b/s", 1); rc != 1 {
		t.Fatalf("SUBACK for a shared filter the hook allows: %#x", rc)
	}
	if body := b.last("subscribe"); body["pattern"] != "b.s" || body["group"] != "wk" {
		t.Fatalf("subscribe hook body for a shared filter: %v", body)
	}

	// 3.1.1: a refusal is 0x80; b.x again comes from the cache.
	c4, err := dialMQTT(t, g, 4, "tcp", "hook-sub4", "")
	if err != nil {
		t.Fatal(err)
	}
	if rc := c4.subscribe(t, "c/y", 1); rc != 0x80 {
		t.Fatalf("3.1.1 SUBACK for a refused filter: %#x, want 0x80", rc)
	}
	if rc := c4.subscribe(t, "b/x", 0); rc != 0 {
		t.Fatalf("3.1.1 SUBACK for an allowed filter: %#x", rc)
	}
	if n := metricValue(t, g.reg, "switchyard_hook_calls_total", map[string]string{"hook": "subscribe", "outcome": "cached"}); n != 1 {
		t.Fatalf("cached subscribe answers %v, want 1", n)
	}
	// "b/#" is "b" and "b.#": the hook refuses "b", the filter goes on
	// with "b.#".
	if rc := c4.subscribe(t, "b/#", 0); rc != 0 {
		t.Fatalf("SUBACK for b/#: %#x", rc)
	}
	httpPublish(t, g, "b.z", map[string]any{"n": 2})
	for deadline := time.After(waitTimeout); ; {
		select {
		case m := <-c4.msgs:
			if m.topic != "b/z" {
				continue // b/x's delivery of the earlier publish
			}
		case <-deadline:
			t.Fatal("b/# allowed by the hook delivered nothing")
		}
		break
	}
	if n := metricValue(t, g.reg, "switchyard_mqtt_refused_total", map[string]string{"reason": "not_authorized"}); n != 2 {
		t.Fatalf("refused filters counted %v, want 2", n)
	}
}

// TestMQTTSubscribeHookOffTheDeliveryPath: while the subscribe hook is
// asked about one of its filters, the session still gets the deliveries
// of the subscriptions it has (the hook is asked on the reader, holding no
// lock the delivery path takes), and the SUBACK comes once it answers.
func TestMQTTSubscribeHookOffTheDeliveryPath(t *testing.T) {
	slow, asked := make(chan struct{}), make(chan struct{}, 1)
	b := mqttHookBackend(t, slow, asked)
	g := newGateway(t, withMQTT, withHooks(b))
	c, err := dialMQTT(t, g, 5, "tcp", "hook-slow", "")
	if err != nil {
		t.Fatal(err)
	}
	if rc := c.subscribe(t, "a/x", 1); rc != 1 {
		t.Fatalf("SUBACK %#x", rc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var acked atomic.Bool
	done := make(chan []byte, 1)
	go func() {
		sa, _ := c.v5.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "b/slow", QoS: 1}}})
		acked.Store(true)
		if sa == nil {
			done <- nil
			return
		}
		done <- sa.Reasons
	}()
	select {
	case <-asked:
	case <-time.After(waitTimeout):
		t.Fatal("the subscribe hook was not asked")
	}
	httpPublish(t, g, "a.x", map[string]any{"during": "hook"})
	if m := c.next(t); m.topic != "a/x" {
		t.Fatalf("delivery %+v", m)
	}
	if acked.Load() {
		t.Fatal("the SUBACK came before the hook answered")
	}
	close(slow)
	if r := <-done; len(r) != 1 || r[0] != 1 {
		t.Fatalf("SUBACK after the hook answered: % x", r)
	}
}

// TestMQTTPublishHook: a PUBLISH outside the grants is decided by the
// publish hook as a native publish is: allowed (with the data and headers
// the hook returns), refused with PUBACK or PUBREC 0x87 for MQTT 5, and
// for 3.1.1, which has no negative acknowledgement, acknowledged and
// dropped, counted.
func TestMQTTPublishHook(t *testing.T) {
	b := mqttHookBackend(t, nil, nil)
	g := newGateway(t, withMQTT, withHooks(b))
	sub, err := dialMQTT(t, g, 5, "tcp", "hook-psub", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"p/#", "q/#"} {
		if rc := sub.subscribe(t, f, 1); rc != 1 {
			t.Fatalf("SUBACK %s: %#x", f, rc)
		}
	}
	pub5, err := dialMQTT(t, g, 5, "tcp", "hook-pub5", "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	// Allowed by the hook: its data and header reach the subscriber.
	pr, err := pub5.v5.Publish(ctx, &paho.Publish{Topic: "p/x", QoS: 1, Payload: []byte(`{"n":1}`),
		Properties: &paho.PublishProperties{User: paho.UserProperties{{Key: "k", Value: "v"}}}})
	if err != nil || pr.ReasonCode != 0 {
		t.Fatalf("publish p/x: %v, %v", pr, err)
	}
	m := sub.next(t)
	if m.topic != "p/x" || m.payload != `{"by":"mq","was":{"n":1}}` || m.props["checked"] != "yes" {
		t.Fatalf("delivery %+v: want the hook's data and headers", m)
	}
	if body := b.last("publish"); body["user"] != "mq" || body["topic"] != "p.x" || body["session"] == nil {
		t.Fatalf("publish hook body %v", body)
	}

	// Refused: PUBACK and PUBREC 0x87.
	for _, qos := range []byte{1, 2} {
		pr, _ := pub5.v5.Publish(ctx, &paho.Publish{Topic: "q/x", QoS: qos, Payload: []byte(`5`)})
		if pr == nil || pr.ReasonCode != 0x87 {
			t.Fatalf("QoS %d publish refused by the hook: %+v, want reason 0x87", qos, pr)
		}
	}
	// 3.1.1: acknowledged, dropped; the next, allowed, publish is the
	// first the subscriber gets.
	pub4, err := dialMQTT(t, g, 4, "tcp", "hook-pub4", "")
	if err != nil {
		t.Fatal(err)
	}
	pub4.publish(t, "q/y", 1, `4`)
	pub4.publish(t, "p/y", 1, `6`)
	if m := sub.next(t); m.topic != "p/y" {
		t.Fatalf("first delivery after the refused publishes: %+v, want p/y", m)
	}
	if n := metricValue(t, g.reg, "switchyard_mqtt_refused_total", map[string]string{"reason": "not_authorized"}); n != 3 {
		t.Fatalf("refused publishes counted %v, want 3", n)
	}
	if n := b.calls["publish"].Load(); n != 5 {
		t.Fatalf("publish hook called %d times, want 5", n)
	}
}

// httpPublish publishes data to topic through POST /v1/publish (open
// access: no hook asked).
func httpPublish(t *testing.T, g *gateway, topic string, data any) {
	t.Helper()
	if st, body, _ := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": topic, "data": data}); st != http.StatusOK {
		t.Fatalf("publish %s: %d %v", topic, st, body)
	}
}
