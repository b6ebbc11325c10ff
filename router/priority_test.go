package router_test

import (
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/session"
)

// TestPriorityUnderPressure: a client that stalls while low- and
// high-priority records arrive on two topics loses the low ones first and
// gets the high ones first, and each (topic, partition) still arrives in
// offset order with every loss reported as a gap.
func TestPriorityUnderPressure(t *testing.T) {
	const n = 150
	payload := strings.Repeat("p", 32<<10)
	g := newGateway(t, func(c *gwConfig) { c.router.Session = session.Options{QueueMessages: 8} })
	slow := g.dialPaused(t)
	slow.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "prio.*"})
	waitSubscribed(t, g, "prio.*", 1)
	pub := g.dial(t)
	for i := range n {
		pub.publish(t, "prio.lo", map[string]any{"i": i, "pad": payload}, "priority", 0)
		pub.publish(t, "prio.hi", map[string]any{"i": i, "pad": payload}, "priority", 3)
	}
	slow.resume()
	slow.nextOp(t, "welcome")
	slow.nextOp(t, "subscribed")
	delivered := map[string]int{}
	lost := map[string]int{}
	last := map[string]int64{"prio.lo": -1, "prio.hi": -1}
	for delivered["prio.lo"]+lost["prio.lo"]+delivered["prio.hi"]+lost["prio.hi"] < 2*n {
		m := slow.next(t)
		topic, _ := m["topic"].(string)
		switch m["op"] {
		case "message":
			off := num(m, "offset")
			if off <= last[topic] {
				t.Fatalf("%s: offset %d after %d", topic, off, last[topic])
			}
			if off != last[topic]+1 {
				t.Fatalf("%s: offset %d after %d with no gap between", topic, off, last[topic])
			}
			last[topic] = off
			delivered[topic]++
		case "gap":
			from, to := num(m, "from"), num(m, "to")
			if from != last[topic]+1 {
				t.Fatalf("%s: gap from %d after offset %d", topic, from, last[topic])
			}
			last[topic] = to - 1
			lost[topic] += int(to - from)
		default:
			t.Fatalf("unexpected %v", m)
		}
	}
	if lost["prio.lo"] == 0 {
		t.Fatal("nothing was lost: the test did not put the queue under pressure")
	}
	if lost["prio.hi"] >= lost["prio.lo"] || delivered["prio.hi"] <= delivered["prio.lo"] {
		t.Fatalf("high priority not preferred: delivered %v, lost %v", delivered, lost)
	}
	t.Logf("delivered %v, lost %v", delivered, lost)
}

// TestQueueFullDeadLettersRedrive: records a plain subscription's queue
// dropped are dead letters that redrive appends to their topic again when
// asked with "append_to_topics", and leaves alone without it.
func TestQueueFullDeadLettersRedrive(t *testing.T) {
	payload := strings.Repeat("q", 32<<10)
	g := newGateway(t, func(c *gwConfig) { c.router.Session = session.Options{QueueMessages: 4} })
	slow := g.dialPaused(t)
	slow.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "over"})
	waitSubscribed(t, g, "over", 1)
	pub := g.dial(t)
	const n = 200
	for i := range n {
		pub.publish(t, "over", map[string]any{"i": i, "pad": payload})
	}
	var ids []string
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		_, body, _ := g.httpDo(t, "GET", "/v1/deadletters?reason=queue_full&limit=3", nil)
		if list, _ := body["deadletters"].([]any); len(list) == 3 {
			for _, d := range list {
				ids = append(ids, d.(map[string]any)["id"].(string))
			}
			break
		}
		time.Sleep(time.Millisecond)
	}
	if len(ids) != 3 {
		t.Fatal("no queue_full dead letters")
	}
	code, body, _ := g.httpDo(t, "POST", "/v1/deadletters/redrive", map[string]any{"ids": ids})
	if code != 200 || num(body, "redriven") != 0 {
		t.Fatalf("redrive without append_to_topics: %d %v, want 0 redriven", code, body)
	}
	_, topic, _ := g.httpDo(t, "GET", "/v1/topics/over", nil)
	if next := num(topic["offsets"].([]any)[0].(map[string]any), "next"); next != n {
		t.Fatalf("topic next = %d, want %d (nothing appended)", next, n)
	}
	code, body, _ = g.httpDo(t, "POST", "/v1/deadletters/redrive", map[string]any{"ids": ids, "append_to_topics": true})
	if code != 200 || num(body, "redriven") != 3 {
		t.Fatalf("redrive: %d %v", code, body)
	}
	_, topic, _ = g.httpDo(t, "GET", "/v1/topics/over", nil)
	if next := num(topic["offsets"].([]any)[0].(map[string]any), "next"); next != n+3 {
		t.Fatalf("topic next = %d, want %d (three records appended again)", next, n+3)
	}
}
