package router_test

// A persistent MQTT session that resumes with more QoS 1 messages waiting
// in the log than its queue bound (--queue-messages) or its held bytes
// (--mqtt-max-held-bytes) take, while the in-flight window is what holds
// the deliveries back: the replay is paced by the window, and nothing it
// reads is dropped (docs/mqtt.md, "Persistent sessions").

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// withResumeBounds makes the session queue bound, the in-flight window
// and the held bytes small, so that a backlog of a few hundred messages
// is far past them.
func withResumeBounds(queue, window, heldBytes int) func(*gwConfig) {
	return func(c *gwConfig) {
		withMQTT(c)
		c.router.Session.QueueMessages = queue
		c.router.MQTT.MaxInFlight = window
		if heldBytes > 0 {
			c.router.MQTT.MaxHeldBytes = heldBytes
		}
	}
}

// expectBacklog reads n messages of each topic of topics and checks that
// every topic's payloads are prefix+"0" to prefix+(n-1), in order, none
// missing, none twice. Messages of different topics may interleave.
func (c *mqttClient) expectBacklog(t *testing.T, topics []string, prefix string, n int) {
	t.Helper()
	next := map[string]int{}
	for _, tp := range topics {
		next[tp] = 0
	}
	for got := 0; got < n*len(topics); got++ {
		m := c.next(t)
		i, ok := next[m.topic]
		if !ok {
			t.Fatalf("message %q on %s, a topic not subscribed", m.payload, m.topic)
		}
		if want := prefix + strconv.Itoa(i); m.payload != want {
			t.Fatalf("after %d messages: got %q on %s, want %q (the replay lost or reordered messages)",
				got, shortPayload(m.payload), m.topic, shortPayload(want))
		}
		next[m.topic] = i + 1
	}
}

// shortPayload is p, or its last 12 bytes and its length when it is long.
func shortPayload(p string) string {
	if len(p) <= 24 {
		return p
	}
	return fmt.Sprintf("…%s (%d bytes)", p[len(p)-12:], len(p))
}

// expectNoDrops checks that no delivery was dropped: by the queue, or
// from the deliveries held for the window.
func expectNoDrops(t *testing.T, g *gateway) {
	t.Helper()
	if d := metricValue(t, g.reg, "switchyard_drops_total", nil); d != 0 {
		t.Errorf("switchyard_drops_total %v, want 0", d)
	}
	if d := metricValue(t, g.reg, "switchyard_mqtt_skipped_total", map[string]string{"why": "window_full"}); d != 0 {
		t.Errorf(`switchyard_mqtt_skipped_total{why="window_full"} %v, want 0`, d)
	}
}

// TestMQTTResumeBacklogPastQueueBound: a persistent session of either
// protocol level, its window 4 deliveries and its queue bound 64, resumes
// with 400 QoS 1 messages published while it was away: all 400 arrive,
// in order, and nothing is counted as dropped.
func TestMQTTResumeBacklogPastQueueBound(t *testing.T) {
	const n = 400
	for _, v := range []byte{4, 5} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			g := newGateway(t, withResumeBounds(64, 4, 0))
			id, topic := fmt.Sprintf("rbq-%d", v), fmt.Sprintf("rbq/%d/t", v)
			c, _ := dialSession(t, g, v, "tcp", id, false, 600)
			if rc := c.subscribe(t, topic, 1); rc != 1 {
				t.Fatalf("SUBACK %#x", rc)
			}
			c.leave(t, g, id)
			pub, _ := dialSession(t, g, 5, "tcp", id+"-pub", true, 0)
			for i := range n {
				pub.publish(t, topic, 1, "m"+strconv.Itoa(i))
			}
			c2, present := dialSession(t, g, v, "tcp", id, false, 600)
			if !present {
				t.Fatal("Session Present 0")
			}
			c2.expectBacklog(t, []string{topic}, "m", n)
			// Live again after the replay.
			pub.publish(t, topic, 1, "live")
			c2.expectPayloads(t, "live")
			expectNoDrops(t, g)
		})
	}
}

// TestMQTTResumeBacklogPastHeldBytes: with the held bytes bounded to
// 16 KiB, a resume of 120 messages of 2 KiB (240 KiB, well within the
// queue bound's count) delivers them all, in order, none dropped.
func TestMQTTResumeBacklogPastHeldBytes(t *testing.T) {
	const n = 120
	g := newGateway(t, withResumeBounds(0, 4, 16<<10))
	id, topic := "rbb", "rbb/t"
	c, _ := dialSession(t, g, 5, "tcp", id, false, 600)
	if rc := c.subscribe(t, topic, 1); rc != 1 {
		t.Fatalf("SUBACK %#x", rc)
	}
	c.leave(t, g, id)
	pub, _ := dialSession(t, g, 5, "tcp", "rbb-pub", true, 0)
	pad := strings.Repeat("x", 2<<10)
	for i := range n {
		pub.publish(t, topic, 1, pad+strconv.Itoa(i))
	}
	c2, present := dialSession(t, g, 5, "tcp", id, false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	c2.expectBacklog(t, []string{topic}, pad, n)
	expectNoDrops(t, g)
}

// TestMQTTResumeBacklogSeveralFilters: three filters of one session (two
// topics and a wildcard over a third) resume at once, each with 150
// messages waiting, past the queue bound of 64 together and each alone:
// every topic's messages arrive, in order, none dropped.
func TestMQTTResumeBacklogSeveralFilters(t *testing.T) {
	const n = 150
	for _, v := range []byte{4, 5} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			g := newGateway(t, withResumeBounds(64, 4, 0))
			id := fmt.Sprintf("rbs-%d", v)
			base := fmt.Sprintf("rbs/%d/", v)
			filters := []string{base + "a", base + "b", base + "c/#"}
			topics := []string{base + "a", base + "b", base + "c/x"}
			c, _ := dialSession(t, g, v, "tcp", id, false, 600)
			for _, f := range filters {
				if rc := c.subscribe(t, f, 1); rc != 1 {
					t.Fatalf("SUBACK %#x for %s", rc, f)
				}
			}
			c.leave(t, g, id)
			pub, _ := dialSession(t, g, 5, "tcp", id+"-pub", true, 0)
			for i := range n {
				for _, tp := range topics {
					pub.publish(t, tp, 1, "m"+strconv.Itoa(i))
				}
			}
			c2, present := dialSession(t, g, v, "tcp", id, false, 600)
			if !present {
				t.Fatal("Session Present 0")
			}
			c2.expectBacklog(t, topics, "m", n)
			expectNoDrops(t, g)
		})
	}
}
