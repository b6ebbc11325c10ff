package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// node is one gateway process's run loop on a loopback port.
type node struct {
	addr string
	stop context.CancelFunc
	errc chan error
}

func startNode(t *testing.T, args ...string) *node {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	n := &node{stop: cancel, errc: make(chan error, 1)}
	addrc := make(chan string, 1)
	go func() {
		n.errc <- run(ctx, append([]string{"--addr", "127.0.0.1:0", "--log-level", "error", "--stats-interval", "-1s"}, args...),
			func(string) string { return "" }, io.Discard, func(a string) { addrc <- a })
	}()
	select {
	case n.addr = <-addrc:
	case err := <-n.errc:
		cancel()
		t.Fatalf("node: %v", err)
	case <-time.After(20 * time.Second):
		cancel()
		t.Fatal("node did not start")
	}
	t.Cleanup(func() { n.close(t) })
	return n
}

func (n *node) close(t *testing.T) {
	if n.stop == nil {
		return
	}
	n.stop()
	n.stop = nil
	select {
	case err := <-n.errc:
		if err != nil {
			t.Errorf("node shutdown: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("node did not stop")
	}
}

type wsConn struct {
	c      *websocket.Conn
	frames chan map[string]any
	done   chan struct{}
}

func dialNode(t *testing.T, n *node) *wsConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+n.addr+"/v1/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &wsConn{c: c, frames: make(chan map[string]any, 4096), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			_, data, err := c.Read(context.Background())
			if err != nil {
				return
			}
			for _, line := range bytes.Split(data, []byte("\n")) {
				var m map[string]any
				if json.Unmarshal(line, &m) == nil {
					w.frames <- m
				}
			}
		}
	}()
	t.Cleanup(func() {
		c.Close(websocket.StatusNormalClosure, "")
		<-w.done
	})
	if m := w.next(t); m["op"] != "welcome" {
		t.Fatalf("first frame %v", m)
	}
	return w
}

func (w *wsConn) next(t *testing.T) map[string]any {
	t.Helper()
	select {
	case m := <-w.frames:
		return m
	case <-time.After(20 * time.Second):
		t.Fatal("no frame")
		return nil
	}
}

func (w *wsConn) send(t *testing.T, v map[string]any) {
	t.Helper()
	data, _ := json.Marshal(v)
	if err := w.c.Write(context.Background(), websocket.MessageText, data); err != nil {
		t.Fatal(err)
	}
}

// expect returns the next frame with op, skipping none.
func (w *wsConn) expect(t *testing.T, op string) map[string]any {
	t.Helper()
	m := w.next(t)
	if m["op"] != op {
		t.Fatalf("got %v, want %s", m, op)
	}
	return m
}

func httpPublish(t *testing.T, n *node, body string) map[string]any {
	t.Helper()
	resp, err := http.Post("http://"+n.addr+"/v1/publish", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	if resp.StatusCode != 200 {
		t.Fatalf("publish to %s: %d %v", n.addr, resp.StatusCode, m)
	}
	return m
}

// TestClusterFanOutAndGroups runs three gateway nodes on one JetStream log:
// a publish on any node reaches every matching subscriber on every node
// exactly once, replay works from any node, and group members on different
// nodes share the work.
func TestClusterFanOutAndGroups(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	args := []string{"--engine", "nats", "--nats-url", url, "--nats-prefix", prefix, "--ack-timeout", "5s"}
	nodes := []*node{startNode(t, args...), startNode(t, args...), startNode(t, args...)}
	subs := make([]*wsConn, len(nodes))
	for i, n := range nodes {
		subs[i] = dialNode(t, n)
		subs[i].send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "multi.*"})
		subs[i].expect(t, "subscribed")
	}
	const perNode = 5
	for i := range perNode * len(nodes) {
		httpPublish(t, nodes[i%len(nodes)], fmt.Sprintf(`{"topic":"multi.a","data":%d}`, i))
	}
	for i, s := range subs {
		for want := range perNode * len(nodes) {
			m := s.expect(t, "message")
			if int(m["offset"].(float64)) != want {
				t.Fatalf("node %d: got offset %v, want %d (each once, in order)", i, m["offset"], want)
			}
		}
	}
	// Replay from another node.
	r := dialNode(t, nodes[2])
	r.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "multi.a", "from": "earliest"})
	r.expect(t, "subscribed")
	for want := range perNode * len(nodes) {
		if m := r.expect(t, "message"); int(m["offset"].(float64)) != want {
			t.Fatalf("replay: offset %v, want %d", m["offset"], want)
		}
	}

	// Group members on two nodes share a 4-partition topic.
	resp, err := http.Post("http://"+nodes[0].addr+"/v1/topics", "application/json",
		strings.NewReader(`{"name":"jobs","partitions":4}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	members := []*wsConn{dialNode(t, nodes[0]), dialNode(t, nodes[1])}
	for _, m := range members {
		m.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "jobs", "group": "workers"})
		m.expect(t, "subscribed")
	}
	const jobs = 40
	for i := range jobs {
		httpPublish(t, nodes[2], fmt.Sprintf(`{"topic":"jobs","key":"k%d","data":%d}`, i, i))
	}
	seen := map[float64]int{}
	per := make([]int, len(members))
	deadline := time.After(60 * time.Second)
	for len(seen) < jobs {
		for i, m := range members {
			select {
			case f := <-m.frames:
				if f["op"] != "message" {
					continue
				}
				seen[f["data"].(float64)]++
				per[i]++
				m.send(t, map[string]any{"op": "ack", "group": "workers", "topic": "jobs", "partition": f["partition"], "offset": f["offset"]})
			case <-deadline:
				t.Fatalf("only %d of %d jobs delivered", len(seen), jobs)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	for d, c := range seen {
		if c != 1 {
			t.Errorf("job %v delivered %d times", d, c)
		}
	}
	for i, c := range per {
		if c == 0 {
			t.Errorf("member on node %d got no work", i)
		}
	}
}
