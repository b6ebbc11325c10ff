package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// httpJSON sends a request with a client-side bound and returns the status,
// the decoded body and how long it took.
func httpJSON(t *testing.T, method, url, body string) (int, map[string]any, time.Duration) {
	t.Helper()
	c := &http.Client{Timeout: 15 * time.Second}
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m, time.Since(start)
}

// pollUntil calls cond every 50ms until it returns true or d passes, and
// returns how long that took.
func pollUntil(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	deadline := start.Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// waitData returns the first message frame on w whose data is want,
// failing on any other frame but messages and after d.
func (w *wsConn) waitData(t *testing.T, d time.Duration, want string) map[string]any {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case m := <-w.frames:
			if m["op"] != "message" {
				t.Fatalf("unexpected frame %v", m)
			}
			if m["data"] == want {
				return m
			}
			t.Logf("skipping message %v", m)
		case <-w.done:
			t.Fatal("connection closed")
		case <-timeout:
			t.Fatalf("no message %q within %v", want, d)
		}
	}
}

// TestNATSOutage stops the only NATS server under a gateway node and starts
// it again on the same port and store: while it is down the node reports
// not ready and refuses publishes with "unavailable" promptly, WebSocket
// sessions stay open, and once NATS is back the node recovers by itself and
// a subscriber that stayed connected gets new records again.
//
// The brief outage ends as soon as the checks are done; the long one lasts
// past the engine's member TTL (10 s), so the server expires the node's
// live keys when it comes back and the node must register them again.
func TestNATSOutage(t *testing.T) {
	for _, tt := range []struct {
		name string
		hold time.Duration
	}{
		{"brief", 0},
		{"past member TTL", 12 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) { testNATSOutage(t, tt.hold) })
	}
}

func testNATSOutage(t *testing.T, hold time.Duration) {
	ns := natstest.NewServer(t)
	n := startNode(t, "--engine", "nats", "--nats-url", ns.URL(), "--nats-prefix", "outage")
	base := "http://" + n.addr

	if code, m, _ := httpJSON(t, "GET", base+"/readyz", ""); code != http.StatusOK {
		t.Fatalf("readyz before the outage: %d %v", code, m)
	}
	sub := dialNode(t, n)
	sub.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "outage.*"})
	sub.expect(t, "subscribed")
	pub := dialNode(t, n)
	httpPublish(t, n, `{"topic":"outage.a","data":"before"}`)
	if m := sub.waitData(t, 20*time.Second, "before"); m["offset"] != 0.0 {
		t.Fatalf("first record %v", m)
	}
	// A group member holds one record unacked across the outage.
	worker := dialNode(t, n)
	worker.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "jobs.outage", "group": "og"})
	worker.expect(t, "subscribed")
	httpPublish(t, n, `{"topic":"jobs.outage","data":"g0"}`)
	worker.ack(t, worker.waitData(t, 20*time.Second, "g0"))
	httpPublish(t, n, `{"topic":"jobs.outage","data":"g1"}`)
	held := worker.waitData(t, 20*time.Second, "g1")

	ns.Stop()
	down := time.Now()

	var readyLatency time.Duration
	pollUntil(t, 10*time.Second, "readyz 503 after NATS stops", func() bool {
		code, m, took := httpJSON(t, "GET", base+"/readyz", "")
		if code == http.StatusOK {
			return false
		}
		if code != http.StatusServiceUnavailable || m["code"] != "unavailable" || m["message"] == nil {
			t.Fatalf("readyz during the outage: %d %v", code, m)
		}
		readyLatency = took
		return true
	})
	if readyLatency > 3*time.Second {
		t.Errorf("readyz took %v during the outage, want < 3s", readyLatency)
	}
	t.Logf("readyz 503 %v after NATS stopped (request took %v)", time.Since(down), readyLatency)

	t.Run("http publish", func(t *testing.T) {
		code, m, took := httpJSON(t, "POST", base+"/v1/publish", `{"topic":"outage.a","data":"lost-http"}`)
		if code != http.StatusServiceUnavailable || m["code"] != "unavailable" {
			t.Fatalf("publish during the outage: %d %v, want 503 unavailable", code, m)
		}
		if took > 6*time.Second {
			t.Errorf("publish failed after %v, want < 6s", took)
		}
		t.Logf("HTTP publish refused in %v", took)
	})
	t.Run("websocket publish", func(t *testing.T) {
		start := time.Now()
		pub.send(t, map[string]any{"op": "publish", "id": 7, "topic": "outage.b", "data": "lost-ws"})
		m := pub.expect(t, "error")
		if m["code"] != "unavailable" || m["id"] != 7.0 {
			t.Fatalf("publish during the outage: %v, want error unavailable", m)
		}
		t.Logf("WebSocket publish refused in %v", time.Since(start))
	})
	// Stay down for hold; every probe meanwhile answers 503 promptly.
	for end := down.Add(hold); time.Now().Before(end); {
		code, m, took := httpJSON(t, "GET", base+"/readyz", "")
		if code != http.StatusServiceUnavailable || m["code"] != "unavailable" || took > 3*time.Second {
			t.Fatalf("readyz during the outage: %d %v after %v", code, m, took)
		}
		time.Sleep(250 * time.Millisecond) // probe period, not a wait for an event
	}
	t.Run("sessions stay open", func(t *testing.T) {
		for _, w := range []*wsConn{sub, pub, worker} {
			select {
			case <-w.done:
				t.Fatal("a session was closed during the outage")
			default:
			}
		}
	})

	ns.Start()
	back := time.Now()
	took := pollUntil(t, 30*time.Second, "readyz 200 after NATS returns", func() bool {
		code, _, _ := httpJSON(t, "GET", base+"/readyz", "")
		return code == http.StatusOK
	})
	t.Logf("ready again %v after NATS restarted", took)

	// The live tail resumes for the subscriber that stayed connected, for
	// publishes over HTTP and over the WebSocket alike.
	httpPublish(t, n, `{"topic":"outage.a","data":"after-http"}`)
	sub.waitData(t, 20*time.Second, "after-http")
	t.Logf("live tail delivered %v after NATS restarted", time.Since(back))
	pub.send(t, map[string]any{"op": "publish", "id": 8, "topic": "outage.b", "data": "after-ws"})
	if m := pub.expect(t, "published"); m["id"] != 8.0 {
		t.Fatalf("publish after the outage: %v", m)
	}
	sub.waitData(t, 20*time.Second, "after-ws")

	// The group goes on: the record leased before the outage can still be
	// acked, new records are delivered, and the committed offset reaches
	// the end.
	worker.ack(t, held)
	httpPublish(t, n, `{"topic":"jobs.outage","data":"g2"}`)
	worker.ack(t, worker.waitData(t, 20*time.Second, "g2"))
	pollUntil(t, 20*time.Second, "group og committed to 3", func() bool {
		return committed(t, n, "og")["jobs.outage/0"] == 3
	})
}

// ack acks a group delivery with an id and waits for the reply, skipping
// other messages.
func (w *wsConn) ack(t *testing.T, m map[string]any) {
	t.Helper()
	w.send(t, map[string]any{"op": "ack", "id": "ack", "group": m["group"], "topic": m["topic"],
		"partition": m["partition"], "offset": m["offset"]})
	for {
		f := w.next(t)
		switch f["op"] {
		case "acked":
			return
		case "message":
			continue
		}
		t.Fatalf("ack %v: %v", m, f)
	}
}

// committed returns a group's committed offsets by "topic/partition", as
// GET /v1/groups/{group} on n reports them.
func committed(t *testing.T, n *node, group string) map[string]float64 {
	t.Helper()
	code, m, _ := httpJSON(t, "GET", "http://"+n.addr+"/v1/groups/"+group, "")
	if code != http.StatusOK {
		t.Fatalf("group %s on %s: %d %v", group, n.addr, code, m)
	}
	out := map[string]float64{}
	parts, _ := m["partitions"].([]any)
	for _, p := range parts {
		p := p.(map[string]any)
		out[fmt.Sprintf("%v/%v", p["topic"], p["partition"])] = p["committed"].(float64)
	}
	return out
}
