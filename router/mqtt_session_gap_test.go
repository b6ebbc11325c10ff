package router_test

import (
	"fmt"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

// TestMQTTPersistentSessionGapNewTopic: a partition a resumed session has
// no position in resumes from the subscription's start time; when its
// topic was made after the session's connection ended, every record of it
// came while the client was away, so those retention trimmed before the
// resume are counted in switchyard_mqtt_session_gaps_total, as for a
// partition resumed from its position (TestMQTTPersistentSessionGap).
func TestMQTTPersistentSessionGapNewTopic(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.engine.Defaults = engine.TopicConfig{Partitions: 1, MaxMessages: 2, OnFull: engine.DropOldest}
	})
	pub, _ := dialSession(t, g, 5, "tcp", "pgn-pub", true, 0)
	c, _ := dialSession(t, g, 5, "tcp", "pgn-1", false, 600)
	c.subscribe(t, "pgn/#", 1)
	pub.publish(t, "pgn/old", 1, "seen")
	c.expectPayloads(t, "seen")
	c.leave(t, g, "pgn-1")
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
