package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/session"
)

// TestSlowConsumerPolicies subscribes a client that does not read, publishes
// large records while another client reads normally, and checks what the
// slow client sees once it resumes: per policy, delivered offsets and gap
// ranges together cover every offset exactly once, in order.
func TestSlowConsumerPolicies(t *testing.T) {
	const n = 300
	payload := strings.Repeat("x", 32<<10) // 32 KiB: n records overflow socket buffers
	for _, policy := range []string{"drop_old", "drop_new"} {
		t.Run(policy, func(t *testing.T) {
			g := newGateway(t, func(c *gwConfig) {
				// The slow client's writer stays blocked on its full socket
				// for as long as the publishing takes, which on a loaded
				// machine can pass the default write timeout (10s) or miss a
				// pong: either would end the session the test is about, so
				// both are far beyond any run's length.
				c.router.Session = session.Options{QueueMessages: 8,
					WriteTimeout: time.Hour, PingInterval: time.Hour, PongTimeout: time.Hour}
				c.router.Bounds.DeadLetterRate = math.Inf(1) // every drop is a dead letter
			})
			slow := g.dialPaused(t)
			slow.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "feed", "on_full": policy})
			fast := g.dial(t)
			fast.subscribe(t, "feed")
			pub := g.dial(t)
			waitSubscribed(t, g, "feed", 2)
			// Lockstep: each publish is answered and reaches the reading
			// subscriber before the next, so the publisher and the other
			// session keep their pace while the slow one stalls.
			for i := range n {
				m := pub.publish(t, "feed", map[string]any{"i": i, "pad": payload})
				if num(m, "offset") != int64(i) {
					t.Fatalf("publish %d got offset %v", i, m["offset"])
				}
				if m := fast.nextOp(t, "message"); num(m, "offset") != int64(i) {
					t.Fatalf("fast subscriber: message %d has offset %v", i, m["offset"])
				}
			}
			slow.resume()
			slow.welcome = slow.nextOp(t, "welcome")
			slow.nextOp(t, "subscribed")
			got := make([]bool, n)
			covered := 0
			last := int64(-1)
			gaps, lost := 0, 0
			for covered < n {
				m := slow.next(t)
				switch m["op"] {
				case "message":
					off := num(m, "offset")
					if off <= last {
						t.Fatalf("offset %d after %d", off, last)
					}
					if got[off] {
						t.Fatalf("offset %d twice", off)
					}
					got[off] = true
					last = off
					covered++
				case "gap":
					if m["reason"] != "queue_full" || m["pattern"] != "feed" || m["topic"] != "feed" {
						t.Fatalf("gap = %v", m)
					}
					from, to := num(m, "from"), num(m, "to")
					if from <= last || to <= from {
						t.Fatalf("gap [%d,%d) after offset %d", from, to, last)
					}
					for o := from; o < to; o++ {
						if got[o] {
							t.Fatalf("offset %d delivered and reported lost", o)
						}
						got[o] = true
						covered++
					}
					last = to - 1
					gaps++
					lost += int(to - from)
				default:
					t.Fatalf("unexpected %v", m)
				}
			}
			if gaps == 0 {
				t.Fatal("a client that did not read lost nothing: the test did not fill its queue")
			}
			slow.noFrame(t)
			// With no dead-letter rate limit, every dropped record is a
			// queue_full dead letter naming the subscriber, with the
			// record's data.
			var dls []any
			deadline := time.Now().Add(waitTimeout)
			for time.Now().Before(deadline) {
				if dls = allPages(t, g, "/v1/deadletters?reason=queue_full&limit=1000", "deadletters", 100); len(dls) >= lost {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if len(dls) != lost {
				t.Fatalf("%d queue_full dead letters, want %d", len(dls), lost)
			}
			dl := dls[0].(map[string]any)
			if dl["reason"] != "queue_full" || dl["topic"] != "feed" || !strings.HasPrefix(dl["subscriber"].(string), slow.welcome["session"].(string)) {
				t.Fatalf("dead letter = %v", dl)
			}
			if d, _ := dl["data"].(map[string]any); d["pad"] != payload {
				t.Fatalf("dead letter lacks the record's data")
			}
		})
	}
	t.Run("disconnect", func(t *testing.T) {
		g := newGateway(t, func(c *gwConfig) { c.router.Session = session.Options{QueueMessages: 8} })
		slow := g.dialPaused(t)
		slow.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "feed", "on_full": "disconnect"})
		waitSubscribed(t, g, "feed", 1)
		pub := g.dial(t)
		fast := g.dial(t)
		fast.subscribe(t, "feed")
		// Lockstep, as above: the reading subscriber keeps up.
		for i := range n {
			pub.publish(t, "feed", map[string]any{"i": i, "pad": payload})
			if m := fast.nextOp(t, "message"); num(m, "offset") != int64(i) {
				t.Fatalf("fast subscriber: message %d has offset %v", i, m["offset"])
			}
		}
		slow.resume()
		status := slow.closeStatus(t)
		if status != websocket.StatusTryAgainLater && status != -1 {
			t.Fatalf("close status %v, want 1013 (or a dropped connection)", status)
		}
	})
}

// waitSubscribed polls the metrics until n plain subscriptions exist.
func waitSubscribed(t *testing.T, g *gateway, _ string, n int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		mfs, err := g.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "switchyard_subscriptions" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetValue() == "plain" && int(m.GetGauge().GetValue()) >= n {
						return
					}
				}
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("never saw %d subscriptions", n)
}

func TestGroupAtLeastOnceWithCrash(t *testing.T) {
	g := newGateway(t)
	a := g.dial(t)
	a.subscribe(t, "jobs.#", "group", "workers")
	pub := g.dial(t)
	pub.publish(t, "jobs.x", "first")
	m := a.nextOp(t, "message")
	if m["group"] != "workers" || num(m, "attempt") != 1 || m["pattern"] != "jobs.#" {
		t.Fatalf("delivery = %v", m)
	}
	// b joins; a crashes without acking.
	b := g.dial(t)
	b.subscribe(t, "jobs.#", "group", "workers")
	a.conn.CloseNow()
	m = b.nextOp(t, "message")
	if m["data"] != "first" || num(m, "attempt") != 2 {
		t.Fatalf("redelivery to b = %v", m)
	}
	b.mustOK(t, map[string]any{"op": "ack", "group": "workers", "topic": m["topic"], "partition": m["partition"], "offset": m["offset"]}, "acked")
	for i := range 5 {
		pub.publish(t, "jobs.x", i)
		m := b.nextOp(t, "message")
		if m["data"] != float64(i) || num(m, "attempt") != 1 {
			t.Fatalf("got %v, want data %d", m, i)
		}
		b.mustOK(t, map[string]any{"op": "ack", "group": "workers", "topic": "jobs.x", "partition": 0, "offset": m["offset"]}, "acked")
	}
	code, grp, _ := g.httpDo(t, "GET", "/v1/groups/workers", nil)
	if code != 200 || grp["pattern"] != "jobs.#" {
		t.Fatalf("group: %d %v", code, grp)
	}
	parts := grp["partitions"].([]any)
	if p := parts[0].(map[string]any); num(p, "committed") != 6 || num(p, "lag") != 0 {
		t.Fatalf("group partition = %v", p)
	}
	// A group is fixed to its pattern.
	c := g.dial(t)
	if m := c.call(t, map[string]any{"op": "subscribe", "pattern": "other", "group": "workers"}); m["code"] != "group_conflict" {
		t.Fatalf("conflicting pattern: %v", m)
	}
}

func TestGroupSharesWork(t *testing.T) {
	g := newGateway(t)
	if code, _, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "work", "partitions": 4}); code != 201 {
		t.Fatal("create failed")
	}
	members := []*client{g.dial(t), g.dial(t)}
	for _, m := range members {
		m.subscribe(t, "work", "group", "g")
	}
	pub := g.dial(t)
	const n = 40
	for i := range n {
		pub.publish(t, "work", i, "key", fmt.Sprintf("k%d", i))
	}
	var mu sync.Mutex
	seen := map[float64]int{}
	var wg sync.WaitGroup
	counts := make([]int, len(members))
	total := 0
	for i, m := range members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				done := total >= n
				mu.Unlock()
				if done {
					return
				}
				select {
				case f := <-m.frames:
					if f["op"] != "message" {
						continue
					}
					mu.Lock()
					seen[f["data"].(float64)]++
					counts[i]++
					total++
					mu.Unlock()
					m.send(t, map[string]any{"op": "ack", "group": "g", "topic": "work", "partition": f["partition"], "offset": f["offset"]})
				case <-time.After(200 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
	for i := range n {
		if seen[float64(i)] != 1 {
			t.Errorf("record %d delivered %d times", i, seen[float64(i)])
		}
	}
	for i, c := range counts {
		if c == 0 {
			t.Errorf("member %d got no work", i)
		}
	}
}

// TestDeadLettersAndRedrive: a group's dead letter is listed, and redrive
// hands it back to that group only, at its own offset with attempt 1; a
// plain subscriber of the topic does not get it again and nothing is
// appended.
func TestDeadLettersAndRedrive(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) {
		c.engine.Policy = engine.GroupPolicy{MaxAttempts: 2, BackoffMin: time.Millisecond, BackoffMax: time.Millisecond}
	})
	plain := g.dial(t)
	plain.subscribe(t, "mail")
	c := g.dial(t)
	c.subscribe(t, "mail", "group", "senders")
	c.publish(t, "mail", map[string]any{"to": "x"})
	for attempt := 1; attempt <= 2; attempt++ {
		m := c.nextOp(t, "message")
		if num(m, "attempt") != int64(attempt) {
			t.Fatalf("attempt = %v, want %d", m["attempt"], attempt)
		}
		c.mustOK(t, map[string]any{"op": "nack", "group": "senders", "topic": "mail", "partition": 0, "offset": 0, "error": "smtp down"}, "nacked")
	}
	var dl map[string]any
	deadline := time.Now().Add(waitTimeout)
	for dl == nil && time.Now().Before(deadline) {
		_, body, _ := g.httpDo(t, "GET", "/v1/deadletters?group=senders", nil)
		if list, _ := body["deadletters"].([]any); len(list) == 1 {
			dl = list[0].(map[string]any)
		} else {
			time.Sleep(time.Millisecond)
		}
	}
	if dl == nil {
		t.Fatal("no dead letter")
	}
	if dl["reason"] != "max_attempts" || dl["error"] != "smtp down" || num(dl, "attempts") != 2 || dl["topic"] != "mail" {
		t.Fatalf("dead letter = %v", dl)
	}
	if d, _ := dl["data"].(map[string]any); d["to"] != "x" {
		t.Fatalf("dead letter data = %v", dl["data"])
	}
	// The partition moved on: the next record is delivered.
	c.publish(t, "mail", "next")
	m := c.nextOp(t, "message")
	if m["data"] != "next" {
		t.Fatalf("after dead letter got %v", m)
	}
	c.mustOK(t, map[string]any{"op": "ack", "group": "senders", "topic": "mail", "partition": 0, "offset": m["offset"]}, "acked")
	code, body, _ := g.httpDo(t, "POST", "/v1/deadletters/redrive", map[string]any{"group": "senders", "ids": []string{dl["id"].(string)}})
	if code != 200 || num(body, "redriven") != 1 {
		t.Fatalf("redrive: %d %v", code, body)
	}
	m = c.nextOp(t, "message")
	if d, _ := m["data"].(map[string]any); d["to"] != "x" || num(m, "offset") != 0 || num(m, "attempt") != 1 {
		t.Fatalf("redriven delivery = %v, want offset 0 attempt 1", m)
	}
	c.mustOK(t, map[string]any{"op": "ack", "group": "senders", "topic": "mail", "partition": 0, "offset": 0}, "acked")
	_, topic, _ := g.httpDo(t, "GET", "/v1/topics/mail", nil)
	if next := num(topic["offsets"].([]any)[0].(map[string]any), "next"); next != 2 {
		t.Fatalf("topic next = %d after redrive, want 2: nothing appended", next)
	}
	// The plain subscriber got each record once: the one published after
	// the redrive comes right after the first two.
	c.publish(t, "mail", "after")
	for i, want := range []any{map[string]any{"to": "x"}, "next", "after"} {
		m := plain.nextOp(t, "message")
		if num(m, "offset") != int64(i) || fmt.Sprint(m["data"]) != fmt.Sprint(want) {
			t.Fatalf("plain subscriber's message %d = %v, want offset %d %v", i, m, i, want)
		}
	}
}

func TestReplay(t *testing.T) {
	g := newGateway(t)
	pub := g.dial(t)
	var mid time.Time
	for i := range 10 {
		if i == 5 {
			time.Sleep(5 * time.Millisecond) // separate the two halves' timestamps (ms resolution)
			mid = time.Now()
		}
		pub.publish(t, "hist.a", i)
	}
	expectRange := func(t *testing.T, c *client, from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			m := c.nextOp(t, "message")
			if num(m, "offset") != int64(i) {
				t.Fatalf("got offset %v, want %d", m["offset"], i)
			}
		}
	}
	t.Run("earliest", func(t *testing.T) {
		c := g.dial(t)
		c.subscribe(t, "hist.*", "from", "earliest")
		expectRange(t, c, 0, 10)
		pub.publish(t, "hist.a", "live")
		if m := c.nextOp(t, "message"); m["data"] != "live" {
			t.Fatalf("live = %v", m)
		}
	})
	t.Run("time", func(t *testing.T) {
		c := g.dial(t)
		c.subscribe(t, "hist.*", "from", map[string]any{"time": mid.UTC().Format(time.RFC3339Nano)})
		expectRange(t, c, 5, 11)
		c.noFrame(t)
	})
	t.Run("positions recovered", func(t *testing.T) {
		c := g.dial(t)
		r := c.subscribe(t, "hist.*", "from", map[string]any{"epoch": g.eng.Epoch(),
			"positions": []any{map[string]any{"topic": "hist.a", "partition": 0, "offset": 7}}})
		if r["recovered"] != true {
			t.Fatalf("recovered = %v", r)
		}
		expectRange(t, c, 8, 11)
		c.noFrame(t)
	})
	t.Run("other epoch", func(t *testing.T) {
		c := g.dial(t)
		r := c.subscribe(t, "hist.*", "from", map[string]any{"epoch": "elsewhere",
			"positions": []any{map[string]any{"topic": "hist.a", "partition": 0, "offset": 7}}})
		if r["recovered"] != false {
			t.Fatalf("recovered = %v", r)
		}
		expectRange(t, c, 0, 11)
	})
}

func TestReplayTrimmedPositions(t *testing.T) {
	g := newGateway(t)
	if code, _, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "short", "retention": map[string]any{"max_messages": 3}}); code != 201 {
		t.Fatal("create failed")
	}
	pub := g.dial(t)
	for i := range 10 {
		pub.publish(t, "short", i)
	}
	c := g.dial(t)
	r := c.subscribe(t, "short", "from", map[string]any{"epoch": g.eng.Epoch(),
		"positions": []any{map[string]any{"topic": "short", "partition": 0, "offset": 2}}})
	if r["recovered"] != false {
		t.Fatalf("recovered = %v", r)
	}
	gap := c.nextOp(t, "gap")
	if gap["reason"] != "retention" || num(gap, "from") != 3 || num(gap, "to") != 7 {
		t.Fatalf("gap = %v", gap)
	}
	for i := 7; i < 10; i++ {
		if m := c.nextOp(t, "message"); num(m, "offset") != int64(i) {
			t.Fatalf("got %v, want offset %d", m, i)
		}
	}
}

// TestReplaySwitchOver replays while a publisher keeps appending: every
// offset arrives exactly once and in order across the switch to live. The
// publisher stays at most window records ahead of what the subscriber has
// read, so the subscriber keeps up by construction and any queue_full gap is
// the gateway's fault (unpaced, a publisher faster than the test's reader
// would make legitimate drop_old gaps once the subscription is live).
func TestReplaySwitchOver(t *testing.T) {
	g := newGateway(t)
	pub := g.dial(t)
	const before, during, window = 2000, 2000, 256
	for i := range before {
		pub.send(t, map[string]any{"op": "publish", "topic": "race", "data": i})
	}
	for range before {
		pub.nextOp(t, "published")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	read := make(chan struct{}, before+during) // one per message read
	done := make(chan error, 1)
	go func() {
		got := 0
		for i := range during {
			for got < before+i-window {
				select {
				case <-read:
					got++
				case <-ctx.Done():
					done <- ctx.Err()
					return
				}
			}
			data, _ := json.Marshal(map[string]any{"op": "publish", "topic": "race", "data": before + i})
			if err := pub.conn.Write(ctx, websocket.MessageText, data); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	c := g.dial(t)
	c.subscribe(t, "race", "from", "earliest")
	for i := range before + during {
		m := c.nextOp(t, "message")
		if num(m, "offset") != int64(i) {
			t.Fatalf("message %d has offset %v", i, m["offset"])
		}
		read <- struct{}{}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.noFrame(t)
}

// TestReplaySwitchOverPaced holds a replay just after its read found the
// log's end, appends ten queues' worth of records (they reach the
// subscription's switch-over buffer, not that replay read), then lets it
// go: the buffered records must be paced by the outbound queue like the
// replay itself, so a subscriber that reads everything gets every offset
// once and no queue_full gap.
func TestReplaySwitchOverPaced(t *testing.T) {
	const queue = 64
	gate := &gatedReads{parked: make(chan struct{}), gate: make(chan struct{})}
	g := newGateway(t, func(c *gwConfig) {
		c.router.Session.QueueMessages = queue
		c.wrap = func(e engine.Engine) engine.Engine { gate.Engine = e; return gate }
	})
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := g.rt.Publish(context.Background(), engine.Message{Topic: "race", Data: []byte(strconv.Itoa(i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	const before, during = 300, 10 * queue
	publish(0, before)
	c := g.dial(t)
	c.subscribe(t, "race", "from", "earliest")
	select {
	case <-gate.parked:
	case <-time.After(waitTimeout):
		t.Fatal("the replay never reached the log's end")
	}
	publish(before, before+during)
	close(gate.gate)
	for i := range before + during {
		m := c.nextOp(t, "message")
		if num(m, "offset") != int64(i) {
			t.Fatalf("message %d has offset %v", i, m["offset"])
		}
	}
	c.noFrame(t)
}

// gatedReads parks the first Read that finds nothing (the replay reached
// the log's end) until gate is closed, closing parked when it does.
type gatedReads struct {
	engine.Engine
	once   sync.Once
	parked chan struct{}
	gate   chan struct{}
}

func (g *gatedReads) Read(ctx context.Context, topic string, partition int, from int64, limit int) ([]*engine.Record, int64, error) {
	recs, next, err := g.Engine.Read(ctx, topic, partition, from, limit)
	if err == nil && len(recs) == 0 {
		first := false
		g.once.Do(func() { first = true })
		if first {
			close(g.parked)
			select {
			case <-g.gate:
			case <-ctx.Done():
				return nil, 0, ctx.Err()
			}
		}
	}
	return recs, next, err
}

func TestFilter(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	c.subscribe(t, "ev", "filter", map[string]any{"headers": map[string]string{"region": "eu"}})
	pub := g.dial(t)
	pub.publish(t, "ev", 1, "headers", map[string]string{"region": "us"})
	pub.publish(t, "ev", 2, "headers", map[string]string{"region": "eu", "x": "y"})
	pub.publish(t, "ev", 3)
	m := c.nextOp(t, "message")
	if m["data"] != float64(2) {
		t.Fatalf("got %v", m)
	}
	c.noFrame(t) // filtered records are not gaps
}

func TestShutdownLosesNothingAcked(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	c.subscribe(t, "orders", "group", "billing")
	pub := g.dial(t)
	for i := range 5 {
		pub.publish(t, "orders", i)
	}
	for i := range 3 {
		m := c.nextOp(t, "message")
		if num(m, "offset") != int64(i) {
			t.Fatalf("got %v", m)
		}
		c.mustOK(t, map[string]any{"op": "ack", "group": "billing", "topic": "orders", "partition": 0, "offset": i}, "acked")
	}
	c.nextOp(t, "message") // offset 3 in flight, never acked
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := g.rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if s := c.closeStatus(t); s != websocket.StatusGoingAway {
		t.Fatalf("close status %v, want 1001", s)
	}
	info, err := g.eng.Group(ctx, "billing")
	if err != nil {
		t.Fatal(err)
	}
	var committed []int64
	for _, p := range info.Partitions {
		committed = append(committed, p.Committed)
	}
	sort.Slice(committed, func(i, j int) bool { return committed[i] < committed[j] })
	if len(committed) != 1 || committed[0] != 3 {
		t.Fatalf("committed = %v, want [3]: acked records kept, the unacked one handed back", committed)
	}
	if len(info.Members) != 0 {
		t.Fatalf("members after shutdown: %v", info.Members)
	}
}
