package router_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
	"github.com/switchyard/switchyard/router"
)

// aheadClock is a node's clock that runs ahead of the others by d.
type aheadClock struct{ d time.Duration }

func (c aheadClock) Now() time.Time { return time.Now().Add(c.d) }

func (aheadClock) AfterFunc(d time.Duration, f func()) engine.Timer { return time.AfterFunc(d, f) }

// newJSGatewayClock is newJSGateway with the engine's clock and
// --mqtt-max-session-bytes given (0: the default).
func newJSGatewayClock(t *testing.T, url, prefix string, clock engine.Clock, sessionBytes int64) *gateway {
	t.Helper()
	return newJSGatewayWith(t, url, prefix, clock, router.Options{MQTT: router.MQTTOptions{MaxSessionBytes: sessionBytes}}, nil)
}

// TestMQTTSessionGapNodeClockAhead: a topic is made through a node whose
// clock runs 5 s ahead, within the margin a resume allows for clocks that
// differ, while a persistent session on another node is connected and
// subscribed; the client gets every record of it live while retention
// trims the oldest. The session's record keeps no position of it (its
// bytes bound). Nothing was lost to the client, so its resume must count
// no session gap: the topic was not made after the session's connection
// ended, whatever the time the other node stamped on it. Then a topic
// made through a node a minute ahead, after a second session's connection
// ended: made clearly after the end, its trimmed records count as gaps.
func TestMQTTSessionGapNodeClockAhead(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	// The session's record has room for its filter and no position
	// (--mqtt-max-session-bytes): a partition left out resumes from the
	// subscription's start (duplicates, not loss).
	a := newJSGatewayClock(t, url, prefix, engine.SystemClock{}, 150)
	b := newJSGatewayClock(t, url, prefix, aheadClock{5 * time.Second}, 0)
	pub, _ := dialSession(t, a, 5, "tcp", "rvs-pub", true, 0)
	c, _ := dialSession(t, a, 5, "tcp", "rvs-1", false, 600)
	c.subscribe(t, "rvs/#", 1)
	makeTrimmedTopic(t, b, "rvs.y")
	for i := range 5 {
		pub.publish(t, "rvs/y", 1, fmt.Sprint("live", i))
	}
	c.expectPayloads(t, "live0", "live1", "live2", "live3", "live4")
	c.leave(t, a, "rvs-1")
	c2, present := dialSession(t, a, 5, "tcp", "rvs-1", false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	drainToMark(t, pub, c2, "rvs/y")
	if n := metricValue(t, a.reg, "switchyard_mqtt_session_gaps_total", nil); n != 0 {
		t.Fatalf("switchyard_mqtt_session_gaps_total = %v for a client that got every record, want 0", n)
	}

	// Made a minute (by its node's clock) after the end: away.
	far := newJSGatewayClock(t, url, prefix, aheadClock{time.Minute}, 0)
	d, _ := dialSession(t, a, 5, "tcp", "rvs-2", false, 600)
	d.subscribe(t, "rvz/#", 1)
	d.leave(t, a, "rvs-2")
	makeTrimmedTopic(t, far, "rvz.y")
	for i := range 5 {
		pub.publish(t, "rvz/y", 1, fmt.Sprint("away", i))
	}
	d2, present := dialSession(t, a, 5, "tcp", "rvs-2", false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	d2.expectPayloads(t, "away3", "away4")
	drainToMark(t, pub, d2, "rvz/y")
	if n := metricValue(t, a.reg, "switchyard_mqtt_session_gaps_total", nil); n != 3 {
		t.Fatalf("switchyard_mqtt_session_gaps_total = %v for a topic made while the client was away, want 3", n)
	}
}

// makeTrimmedTopic makes topic through g, keeping its last 2 records.
func makeTrimmedTopic(t *testing.T, g *gateway, topic string) {
	t.Helper()
	code, _, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": topic, "partitions": 1,
		"retention": map[string]any{"max_messages": 2}, "on_full": "drop_oldest"})
	if code != 201 {
		t.Fatalf("topic %s not made: %d", topic, code)
	}
}

// drainToMark publishes "mark" to topic and reads c up to it. A live
// record comes after the replay, and the replay's gap count before it:
// once it is here, the count is made.
func drainToMark(t *testing.T, pub, c *mqttClient, topic string) {
	t.Helper()
	pub.publish(t, topic, 1, "mark")
	for m := c.next(t); m.payload != "mark"; m = c.next(t) {
		t.Logf("replayed %q", m.payload)
	}
}
