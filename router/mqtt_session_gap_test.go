package router_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestMQTTPersistentSessionGapNewTopic: a partition a resumed session has
// no position in resumes from the subscription's start time; when its
// topic was made after the session's connection ended, every record of it
// came while the client was away, so those retention trimmed before the
// resume are counted in switchyard_mqtt_session_gaps_total, as for a
// partition resumed from its position (TestMQTTPersistentSessionGap).
func TestMQTTPersistentSessionGapNewTopic(t *testing.T) {
	clock := &stepClock{}
	sessionGapNewTopic(t, newGateway(t, withMQTT, func(c *gwConfig) { c.engine.Clock = clock }), clock)
}

// TestMQTTPersistentSessionGapNewTopicJetStream is
// TestMQTTPersistentSessionGapNewTopic on JetStream, whose topics keep
// their making time in the store.
func TestMQTTPersistentSessionGapNewTopicJetStream(t *testing.T) {
	url := natstest.URL(t)
	clock := &stepClock{}
	sessionGapNewTopic(t, newJSGatewayClock(t, url, natstest.Prefix(t, url), clock, 0), clock)
}

// stepClock is the system clock moved on by what step adds.
type stepClock struct{ off atomic.Int64 }

func (c *stepClock) Now() time.Time { return time.Now().Add(time.Duration(c.off.Load())) }

func (*stepClock) AfterFunc(d time.Duration, f func()) engine.Timer { return time.AfterFunc(d, f) }

func (c *stepClock) step(d time.Duration) { c.off.Add(int64(d)) }

// sessionGapNewTopic: the engine's clock is moved on a minute once the
// session's connection ended, so that the topic is made clearly after the
// end, past the margin a resume allows for clocks that differ
// (TestMQTTSessionGapNodeClockAhead).
func sessionGapNewTopic(t *testing.T, g *gateway, clock *stepClock) {
	pub, _ := dialSession(t, g, 5, "tcp", "pgn-pub", true, 0)
	c, _ := dialSession(t, g, 5, "tcp", "pgn-1", false, 600)
	c.subscribe(t, "pgn/#", 1)
	pub.publish(t, "pgn/old", 1, "seen")
	c.expectPayloads(t, "seen")
	c.leave(t, g, "pgn-1")
	clock.step(time.Minute)
	code, _, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "pgn.new", "partitions": 1,
		"retention": map[string]any{"max_messages": 2}, "on_full": "drop_oldest"})
	if code != 201 {
		t.Fatalf("topic not made: %d", code)
	}
	for i := range 5 {
		pub.publish(t, "pgn/new", 1, fmt.Sprint("away", i))
	}
	c2, present := dialSession(t, g, 5, "tcp", "pgn-1", false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	c2.expectPayloads(t, "away3", "away4")
	waitMetric(t, g, "switchyard_mqtt_session_gaps_total", nil, 3)
}
