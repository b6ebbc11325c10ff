package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"
)

// TestEmbeddedListen checks the embedded server's sockets: none by default
// (the engine talks to it in process), a client port with
// --embedded-nats-listen, and a prompt error when that port is taken.
func TestEmbeddedListen(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Run("none", func(t *testing.T) {
		emb, err := startEmbeddedNATS(t.TempDir(), "", dataSync{}, log)
		if err != nil {
			t.Fatal(err)
		}
		defer emb.stop()
		if a := emb.ns.Addr(); a != nil {
			t.Fatalf("embedded server listens on %v", a)
		}
		if !emb.nc.IsConnected() {
			t.Fatal("in-process connection not connected")
		}
	})
	t.Run("listen", func(t *testing.T) {
		emb, err := startEmbeddedNATS(t.TempDir(), "127.0.0.1:0", dataSync{}, log)
		if err != nil {
			t.Fatal(err)
		}
		defer emb.stop()
		a := emb.ns.Addr()
		if a == nil {
			t.Fatal("no client port")
		}
		nc, err := nats.Connect("nats://"+a.String(), nats.Timeout(5*time.Second))
		if err != nil {
			t.Fatalf("tool connection: %v", err)
		}
		nc.Close()
		busy, err := startEmbeddedNATS(t.TempDir(), a.String(), dataSync{}, log)
		if err == nil {
			busy.stop()
			t.Fatal("a second server on the same port started")
		}
	})
	t.Run("data-dir in use", func(t *testing.T) {
		dir := t.TempDir()
		emb, err := startEmbeddedNATS(dir, "", dataSync{}, log)
		if err != nil {
			t.Fatal(err)
		}
		defer emb.stop()
		if second, err := startEmbeddedNATS(dir, "", dataSync{}, log); err == nil {
			second.stop()
			t.Fatal("a second server on the same data dir started")
		} else if !strings.Contains(err.Error(), "in use") {
			t.Errorf("second server: %v", err)
		}
	})
	t.Run("no data-dir", func(t *testing.T) {
		if emb, err := startEmbeddedNATS("", "", dataSync{}, log); err == nil {
			emb.stop()
			t.Fatal("started without a data dir")
		}
	})
}

// TestEmbeddedJoin starts a gateway with --engine embedded and a client
// port, and a second gateway node with --engine nats on that port: they
// share one log, as two nodes on an external NATS do.
func TestEmbeddedJoin(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	first := startNode(t, "--engine", "embedded", "--data-dir", t.TempDir(), "--embedded-nats-listen", addr)
	second := startNode(t, "--engine", "nats", "--nats-url", "nats://"+addr)
	if a, b := welcomeEpoch(t, first), welcomeEpoch(t, second); a != b {
		t.Errorf("epochs %q and %q: want one log", a, b)
	}
	for i, n := range []*node{second, first, second} {
		if m := httpPublish(t, n, fmt.Sprintf(`{"topic":"joined","data":"d%d"}`, i)); m["offset"] != float64(i) {
			t.Errorf("publish %d on %s: %v", i, n.addr, m)
		}
	}
	if got := readLog(t, first, "joined"); !slices.Equal(got, []string{"d0", "d1", "d2"}) {
		t.Errorf("log on the embedded node: %q", got)
	}
}

// TestEmbeddedCrashRecovery runs the gateway with --engine embedded in a
// child process, publishes over HTTP, lets a consumer group commit part of
// it, kills the process with SIGKILL while publishes are in flight, and
// starts it again on the same data dir: every acknowledged publish is in the
// log with its offset and data, offsets have no hole, the group's committed
// offset is the one it had stored and a member resumes there, and the
// epoch is unchanged, so a subscriber resuming with positions gets
// recovered: true and continues right after them. The restarted gateway
// then stops cleanly on SIGTERM.
func TestEmbeddedCrashRecovery(t *testing.T) {
	dir := t.TempDir()
	args := []string{"--engine", "embedded", "--data-dir", dir, "--partitions", "1"}
	p1 := startProcNode(t, args...)
	epoch := welcomeEpoch(t, p1.node)

	var mu sync.Mutex
	acked := map[int]string{} // offset -> data of every acknowledged publish
	publish := func(c *http.Client, n *node, data string) error {
		body := fmt.Sprintf(`{"topic":"orders","data":%q}`, data)
		resp, err := c.Post("http://"+n.addr+"/v1/publish", "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		var m map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("publish: %d %v", resp.StatusCode, m)
		}
		mu.Lock()
		defer mu.Unlock()
		off := int(m["offset"].(float64))
		if old, ok := acked[off]; ok {
			t.Errorf("offset %d acknowledged twice: %q and %q", off, old, data)
		}
		acked[off] = data
		return nil
	}
	client := &http.Client{Timeout: 10 * time.Second}
	const before = 20
	for i := range before {
		if err := publish(client, p1.node, fmt.Sprintf("r%d", i)); err != nil {
			t.Fatal(err)
		}
	}

	// A group member with a window of 1 acks offsets 0..k-1. The engine
	// stores the commit with the next delivery's attempt, before that
	// delivery is sent, so receiving offset k shows commit k is stored.
	const k = 8
	member := dialNode(t, p1.node)
	member.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "orders", "group": "billing", "max_in_flight": 1})
	member.expect(t, "subscribed")
	var early []map[string]any // deliveries that came before an ack's reply
	for want := 0; want <= k; want++ {
		var m map[string]any
		if len(early) > 0 {
			m, early = early[0], early[1:]
		} else {
			m = member.expect(t, "message")
		}
		if m["op"] != "message" || int(m["offset"].(float64)) != want {
			t.Fatalf("group delivery %v, want offset %d", m, want)
		}
		if want == k {
			break
		}
		member.send(t, map[string]any{"op": "ack", "id": 100 + want, "group": "billing", "topic": "orders", "partition": 0, "offset": want})
		for f := member.next(t); f["op"] != "acked"; f = member.next(t) {
			early = append(early, f)
		}
	}

	// Load: publishers run until the process dies under them.
	var wg sync.WaitGroup
	progress := make(chan struct{}, 1<<14)
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 10 * time.Second}
			for i := range 4000 {
				if publish(c, p1.node, fmt.Sprintf("w%d-%d", w, i)) != nil {
					return // killed
				}
				progress <- struct{}{}
			}
		}()
	}
	deadline := time.After(30 * time.Second)
	for range 200 {
		select {
		case <-progress:
		case <-deadline:
			t.Fatal("load made no progress")
		}
	}
	if err := p1.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = p1.wait(t, 20*time.Second)
	wg.Wait()
	mu.Lock()
	last := -1
	for off := range acked {
		last = max(last, off)
	}
	t.Logf("acknowledged %d publishes before the kill, last offset %d", len(acked), last)
	mu.Unlock()

	p2 := startProcNode(t, args...)
	if e := welcomeEpoch(t, p2.node); e != epoch {
		t.Fatalf("epoch after restart %q, want %q", e, epoch)
	}

	// Every acknowledged publish is in the log, at its offset.
	stored := readLog(t, p2.node, "orders")
	for off, data := range acked {
		if off >= len(stored) || stored[off] != data {
			got := "nothing"
			if off < len(stored) {
				got = fmt.Sprintf("%q", stored[off])
			}
			t.Errorf("offset %d: acknowledged %q, log holds %s", off, data, got)
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	// The group kept its committed offset and resumes there.
	if c := committed(t, p2.node, "billing")["orders/0"]; c != k {
		t.Errorf("committed after restart %v, want %d", c, k)
	}
	member2 := dialNode(t, p2.node)
	member2.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "orders", "group": "billing"})
	member2.expect(t, "subscribed")
	// The crashed node's lease on the partition ends with its member TTL
	// (embeddedMemberTTL, 3 s): next() waits up to 20 s.
	joined := time.Now()
	if m := member2.expect(t, "message"); int(m["offset"].(float64)) != k {
		t.Errorf("group resumed at %v, want %d", m["offset"], k)
	}
	t.Logf("group resumed %v after the member joined", time.Since(joined).Round(time.Millisecond))

	// A subscriber resuming with the positions it saw is recovered and
	// continues right after them.
	sub := dialNode(t, p2.node)
	sub.send(t, map[string]any{"op": "subscribe", "id": 2, "pattern": "orders", "from": map[string]any{
		"epoch": epoch, "positions": []any{map[string]any{"topic": "orders", "partition": 0, "offset": len(stored) - 1}},
	}})
	if m := sub.expect(t, "subscribed"); m["recovered"] != true {
		t.Errorf("resume after restart: %v, want recovered true", m)
	}
	if err := publish(client, p2.node, "after"); err != nil {
		t.Fatal(err)
	}
	if m := sub.waitData(t, 20*time.Second, "after"); int(m["offset"].(float64)) != len(stored) {
		t.Errorf("first record after the resume at offset %v, want %d", m["offset"], len(stored))
	}

	// Clean stop: gateway, engine, embedded server, exit status 0.
	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p2.wait(t, 30*time.Second); err != nil {
		t.Errorf("restarted gateway stopped with %v\n%s", err, p2.out.String())
	}
}

// welcomeEpoch opens a WebSocket session on n and returns the epoch of its
// welcome frame.
func welcomeEpoch(t *testing.T, n *node) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+n.addr+"/v1/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	_, data, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(bytes.SplitN(data, []byte("\n"), 2)[0], &m); err != nil || m["op"] != "welcome" {
		t.Fatalf("first frame %s (%v)", data, err)
	}
	e, _ := m["epoch"].(string)
	if e == "" {
		t.Fatalf("welcome without epoch: %s", data)
	}
	return e
}

// readLog returns the data of partition 0 of topic on n by offset, read
// with GET /v1/topics/{topic}/messages, and fails on a hole in the offsets.
func readLog(t *testing.T, n *node, topic string) []string {
	t.Helper()
	var out []string
	for range 1000 {
		url := fmt.Sprintf("http://%s/v1/topics/%s/messages?partition=0&from=%d&limit=1000", n.addr, topic, len(out))
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("read %s: %d %s", url, resp.StatusCode, body)
		}
		var page struct {
			Messages []struct {
				Offset int             `json:"offset"`
				Data   json.RawMessage `json:"data"`
			} `json:"messages"`
			Next int `json:"next"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			t.Fatal(err)
		}
		if len(page.Messages) == 0 {
			return out
		}
		for _, m := range page.Messages {
			if m.Offset != len(out) {
				t.Fatalf("log of %s: offset %d after %d records", topic, m.Offset, len(out))
			}
			var s string
			_ = json.Unmarshal(m.Data, &s)
			out = append(out, s)
		}
	}
	t.Fatal("log read did not end")
	return nil
}

// TestEmbeddedDataSync: --data-sync reaches the embedded server's JetStream
// settings, and the default syncs before acknowledging.
func TestEmbeddedDataSync(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tt := range []struct {
		flag         string
		wantAlways   bool
		wantInterval time.Duration
	}{
		{"always", true, 0},
		{"10s", false, 10 * time.Second},
		{"2m", false, 2 * time.Minute},
		{defaultDataSync, true, 0}, // durable by default
	} {
		t.Run(tt.flag, func(t *testing.T) {
			sync, err := parseDataSync(tt.flag)
			if err != nil {
				t.Fatal(err)
			}
			emb, err := startEmbeddedNATS(t.TempDir(), "", sync, log)
			if err != nil {
				t.Fatal(err)
			}
			defer emb.stop()
			// "always": the in-process connection syncs (groupsync.go)
			// where it can, else the server after every write.
			jc := emb.ns.JetStreamConfig()
			grouped := emb.g != nil
			ok := !grouped && !jc.SyncAlways
			if tt.wantAlways {
				ok = grouped && !jc.SyncAlways || !canSyncfs && !grouped && jc.SyncAlways
			}
			if !ok {
				t.Errorf("server sync_always %v, grouped sync %v; want always %v", jc.SyncAlways, grouped, tt.wantAlways)
			}
			if tt.wantInterval != 0 && jc.SyncInterval != tt.wantInterval {
				t.Errorf("sync_interval %v, want %v", jc.SyncInterval, tt.wantInterval)
			}
		})
	}
	t.Run("always with a client port", func(t *testing.T) {
		// Other clients bypass the grouped sync: the server syncs itself.
		emb, err := startEmbeddedNATS(t.TempDir(), "127.0.0.1:0", dataSync{Always: true}, log)
		if err != nil {
			t.Fatal(err)
		}
		defer emb.stop()
		if !emb.ns.JetStreamConfig().SyncAlways || emb.g != nil {
			t.Errorf("server sync_always %v, grouped sync %v; want the server's", emb.ns.JetStreamConfig().SyncAlways, emb.g != nil)
		}
	})
	for _, bad := range []string{"", "never", "0s", "-1m"} {
		if _, err := parseDataSync(bad); err == nil {
			t.Errorf("--data-sync %q accepted", bad)
		}
	}
}
