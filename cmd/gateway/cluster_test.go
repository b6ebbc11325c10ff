package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
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
			func(string) string { return "" }, io.Discard, gatewayListening(func(a string) { addrc <- a }))
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
	// The gateway batches frames into WebSocket messages that may pass
	// the library's default read limit (32 KiB) on a replay.
	c.SetReadLimit(16 << 20)
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

// TestGatewayProcess is a helper, not a test: startProcNode runs the test
// binary again with SYTEST_GATEWAY_ARGS set, so that one gateway node runs
// in a child process the test can stop with SIGTERM or kill with SIGKILL.
// The child prints "listening ADDR" on stdout once it serves.
func TestGatewayProcess(t *testing.T) {
	args := os.Getenv("SYTEST_GATEWAY_ARGS")
	if args == "" {
		t.Skip("helper process for startProcNode")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	err := run(ctx, strings.Split(args, "\x1f"), func(string) string { return "" }, os.Stderr,
		func(addr string) { fmt.Printf("listening %s\n", addr) })
	if err != nil {
		t.Fatal(err)
	}
}

// procNode is a gateway node in a child process.
type procNode struct {
	*node // addr only: dialNode and httpPublish work on it
	cmd   *exec.Cmd
	out   syncBuffer // the child's stderr
	exit  chan error // the child's exit status, once
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// addrWriter takes the child's stdout and reports the address of its first
// "listening ADDR" line.
type addrWriter struct {
	line []byte
	addr chan string // capacity 1
}

func (w *addrWriter) Write(p []byte) (int, error) {
	for _, c := range p {
		if c != '\n' {
			w.line = append(w.line, c)
			continue
		}
		if a, ok := strings.CutPrefix(string(w.line), "listening "); ok {
			select {
			case w.addr <- a:
			default:
			}
		}
		w.line = w.line[:0]
	}
	return len(p), nil
}

func startProcNode(t *testing.T, args ...string) *procNode {
	t.Helper()
	args = append([]string{"--addr", "127.0.0.1:0", "--log-level", "warn", "--stats-interval", "-1s"}, args...)
	cmd := exec.Command(os.Args[0], "-test.run=^TestGatewayProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SYTEST_GATEWAY_ARGS="+strings.Join(args, "\x1f"))
	aw := &addrWriter{addr: make(chan string, 1)}
	p := &procNode{node: &node{}, cmd: cmd, exit: make(chan error, 1)}
	cmd.Stdout = aw
	cmd.Stderr = &p.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exit <- cmd.Wait() }() // exits with the child
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-p.exit:
		case <-time.After(20 * time.Second):
			t.Error("child gateway did not exit")
		}
		if t.Failed() {
			t.Logf("child gateway stderr:\n%s", p.out.String())
		}
	})
	select {
	case p.addr = <-aw.addr:
	case err := <-p.exit:
		p.exit <- err
		t.Fatalf("child gateway exited: %v\n%s", err, p.out.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("child gateway did not start\n%s", p.out.String())
	}
	return p
}

// wait returns the child's exit status, failing after d.
func (p *procNode) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-p.exit:
		p.exit <- err // for the cleanup
		return err
	case <-time.After(d):
		t.Fatalf("child gateway still running after %v", d)
		return nil
	}
}

// TestClusterNodeLoss stops the node of one consumer-group member while it
// holds unacked records, once with SIGTERM (graceful: its members leave and
// its partitions are handed back at once) and once with SIGKILL (nothing
// handed back: the other nodes take over when its live keys expire after
// the member TTL, 10 s). Either way the records it held are delivered
// again to the members on the surviving nodes, no record acked and
// committed before is delivered again, and the group's committed offsets,
// read on a survivor, reach the end of every partition.
func TestClusterNodeLoss(t *testing.T) {
	for _, tt := range []struct {
		name   string
		sig    os.Signal
		within time.Duration // bound on redelivery after the loss
	}{
		{"sigterm", syscall.SIGTERM, 10 * time.Second},
		{"sigkill", os.Kill, 40 * time.Second},
	} {
		t.Run(tt.name, func(t *testing.T) { testNodeLoss(t, tt.sig, tt.within) })
	}
}

func testNodeLoss(t *testing.T, sig os.Signal, within time.Duration) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	args := []string{"--engine", "nats", "--nats-url", url, "--nats-prefix", prefix, "--ack-timeout", "60s"}
	a, b := startNode(t, args...), startNode(t, args...)
	victim := startProcNode(t, args...)

	const parts, records = 6, 60
	if code, m, _ := httpJSON(t, "POST", "http://"+a.addr+"/v1/topics", fmt.Sprintf(`{"name":"work","partitions":%d}`, parts)); code != http.StatusCreated {
		t.Fatalf("create topic: %d %v", code, m)
	}
	members := []*wsConn{dialNode(t, a), dialNode(t, b), dialNode(t, victim.node)}
	const v = 2 // members[v] is on the victim
	for _, m := range members {
		m.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "work", "group": "kw"})
		m.expect(t, "subscribed")
	}
	pollUntil(t, 30*time.Second, "three members with every partition assigned", func() bool {
		_, g, _ := httpJSON(t, "GET", "http://"+a.addr+"/v1/groups/kw", "")
		ms, _ := g["members"].([]any)
		ps, _ := g["partitions"].([]any)
		if len(ms) != 3 || len(ps) != parts {
			return false
		}
		for _, p := range ps {
			if p.(map[string]any)["member"] == "" {
				return false
			}
		}
		return true
	})
	for i := range records {
		httpPublish(t, a, fmt.Sprintf(`{"topic":"work","key":"k%d","data":%d}`, i, i))
	}
	_, info, _ := httpJSON(t, "GET", "http://"+a.addr+"/v1/topics/work", "")
	size := map[int]int{} // partition -> records
	for _, o := range info["offsets"].([]any) {
		o := o.(map[string]any)
		size[int(o["partition"].(float64))] = int(o["next"].(float64))
	}

	type pos struct{ part, off int }
	var (
		acked     = map[pos]bool{} // confirmed by an "acked" reply
		ackedN    = map[int]int{}  // per partition
		held      = map[int]int{}  // partition -> offset the victim holds unacked
		victimGot = map[int]bool{} // partitions the victim received a record of
		again     = map[pos]int{}  // deliveries after the loss
		killed    bool
	)
	handle := func(i int, f map[string]any) {
		switch f["op"] {
		case "message":
			p := pos{int(f["partition"].(float64)), int(f["offset"].(float64))}
			if killed {
				if i == v {
					return // the victim's last frames, if any
				}
				if acked[p] {
					t.Errorf("record %v acked before the loss was delivered again (attempt %v)", p, f["attempt"])
				}
				again[p]++
				if off, ok := held[p.part]; ok && off == p.off {
					t.Logf("held record %v delivered again on node %d, attempt %v", p, i, f["attempt"])
				}
			}
			if i == v && victimGot[p.part] {
				held[p.part] = p.off // keep it unacked
				return
			}
			if i == v {
				victimGot[p.part] = true
			}
			members[i].send(t, map[string]any{"op": "ack", "id": fmt.Sprintf("%d/%d", p.part, p.off),
				"group": "kw", "topic": "work", "partition": p.part, "offset": p.off})
		case "acked":
			var p pos
			fmt.Sscanf(f["id"].(string), "%d/%d", &p.part, &p.off)
			if !acked[p] {
				acked[p] = true
				ackedN[p.part]++
			}
		case "error":
			if f["code"] != "not_in_flight" {
				t.Fatalf("member %d: %v", i, f)
			}
		}
	}
	// consume hands frames to handle until done returns true; done is
	// checked after every frame and every 100ms.
	consume := func(d time.Duration, what string, done func() bool) {
		t.Helper()
		deadline := time.After(d)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for !done() {
			select {
			case f := <-members[0].frames:
				handle(0, f)
			case f := <-members[1].frames:
				handle(1, f)
			case f := <-members[2].frames:
				handle(2, f)
			case <-tick.C:
			case <-deadline:
				t.Fatalf("%s: not within %v (acked %d, held %v, again %v)", what, d, len(acked), held, again)
			}
		}
	}

	// Before the loss: every partition is either acked to its end, or its
	// member on the victim holds a record unacked after acking one.
	consume(30*time.Second, "survivors ack all, victim holds", func() bool {
		for p := range parts {
			if _, ok := held[p]; !ok && ackedN[p] < size[p] {
				return false
			}
		}
		return true
	})
	if len(held) == 0 {
		t.Fatal("the victim holds nothing; partitions were not spread")
	}
	want := map[string]float64{}
	for p := range parts {
		want[fmt.Sprintf("work/%d", p)] = float64(size[p])
		if off, ok := held[p]; ok {
			want[fmt.Sprintf("work/%d", p)] = float64(off)
		}
	}
	// Acks are committed by a background writer: wait until the survivors
	// see them, so that "acked" below means committed.
	pollUntil(t, 20*time.Second, "acks committed", func() bool {
		return maps.Equal(committed(t, a, "kw"), want)
	})

	killed = true
	lost := time.Now()
	if err := victim.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	consume(within, "held records redelivered", func() bool {
		for p, off := range held {
			if again[pos{p, off}] == 0 {
				return false
			}
		}
		return true
	})
	t.Logf("%d held records redelivered on the survivors %v after %v", len(held), time.Since(lost), sig)
	for p := range parts {
		want[fmt.Sprintf("work/%d", p)] = float64(size[p])
	}
	var got map[string]float64
	consume(30*time.Second, "committed offsets at the end on a survivor", func() bool {
		got = committed(t, b, "kw")
		return maps.Equal(got, want)
	})
	t.Logf("committed %v after %v", got, time.Since(lost))
	err := victim.wait(t, 20*time.Second)
	if sig == syscall.SIGTERM && err != nil {
		t.Errorf("victim after SIGTERM: %v, want a clean exit\n%s", err, victim.out.String())
	}
}
