package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/client"
	"github.com/switchyard/switchyard/engine"
)

const wait = 10 * time.Second

func dial(t *testing.T, g *testGateway, opts *client.Options) *client.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, err := client.Dial(ctx, g.URL, opts)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func recv(t *testing.T, ch <-chan *client.Message) *client.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("channel closed")
		}
		return m
	case <-time.After(wait):
		t.Fatal("timed out waiting for a message")
	}
	return nil
}

// eventually polls cond until it holds or the test's patience runs out.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestWelcome(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	c := dial(t, g, nil)
	w := c.Welcome()
	if w.Session == "" || w.Epoch == "" || w.Limits.QueueMessages == 0 || w.Limits.MaxFrameBytes == 0 {
		t.Fatalf("welcome = %+v", w)
	}
}

func TestPublishSubscribe(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	c := dial(t, g, nil)
	ctx := testCtx(t)
	got := make(chan *client.Message, 16)
	sub, err := c.Subscribe(ctx, "orders.*", client.SubscribeOptions{}, func(m *client.Message) { got <- m })
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now().Add(-time.Second)
	res, err := c.Publish(ctx, "orders.created", map[string]string{"sku": "A-1"},
		client.WithKey("customer-42"), client.WithHeaders(map[string]string{"region": "eu"}), client.WithPriority(2))
	if err != nil {
		t.Fatal(err)
	}
	if res.Topic != "orders.created" || res.Partition != 0 || res.Offset != 0 || res.Duplicate {
		t.Fatalf("PublishResult = %+v", res)
	}
	m := recv(t, got)
	if m.Pattern != "orders.*" || m.Topic != "orders.created" || m.Partition != 0 || m.Offset != 0 ||
		m.Key != "customer-42" || m.Headers["region"] != "eu" || string(m.Data) != `{"sku":"A-1"}` ||
		m.Group != "" || m.Attempt != 0 {
		t.Fatalf("message = %+v", m)
	}
	if m.Time.Before(before) || m.Time.After(time.Now().Add(time.Second)) {
		t.Fatalf("message time %v is not now", m.Time)
	}
	if err := m.Ack(ctx); !errors.Is(err, client.ErrNotGroup) {
		t.Fatalf("Ack of a plain delivery = %v, want ErrNotGroup", err)
	}

	t.Run("idempotent publish", func(t *testing.T) {
		r1, err := c.Publish(ctx, "orders.paid", json.RawMessage(`1`), client.WithMsgID("m-1"))
		if err != nil {
			t.Fatal(err)
		}
		r2, err := c.Publish(ctx, "orders.paid", json.RawMessage(`1`), client.WithMsgID("m-1"))
		if err != nil {
			t.Fatal(err)
		}
		if r1.Duplicate || !r2.Duplicate || r1.Offset != r2.Offset {
			t.Fatalf("first %+v, repeat %+v", r1, r2)
		}
		if m := recv(t, got); m.Topic != "orders.paid" {
			t.Fatalf("got %+v", m)
		}
	})

	t.Run("unsubscribe", func(t *testing.T) {
		if err := sub.Unsubscribe(ctx); err != nil {
			t.Fatal(err)
		}
		if err := sub.Unsubscribe(ctx); !errors.Is(err, client.ErrUnsubscribed) {
			t.Fatalf("second Unsubscribe = %v, want ErrUnsubscribed", err)
		}
		select {
		case <-sub.Done():
		default:
			t.Fatal("Done not closed")
		}
		// A later subscription on the same session acts as a barrier.
		after := make(chan *client.Message, 1)
		if _, err := c.Subscribe(ctx, "orders.shipped", client.SubscribeOptions{}, func(m *client.Message) { after <- m }); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Publish(ctx, "orders.shipped", 1); err != nil {
			t.Fatal(err)
		}
		recv(t, after)
		if len(got) != 0 {
			t.Fatalf("unsubscribed handler got %+v", <-got)
		}
	})
}

func TestWildcards(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	c := dial(t, g, nil)
	ctx := testCtx(t)
	var mu sync.Mutex
	got := map[string][]string{} // pattern -> topics
	patterns := []string{"a.*", "a.#", "a.*.c", "#"}
	for _, p := range patterns {
		if _, err := c.Subscribe(ctx, p, client.SubscribeOptions{}, func(m *client.Message) {
			mu.Lock()
			got[m.Pattern] = append(got[m.Pattern], m.Topic)
			mu.Unlock()
		}); err != nil {
			t.Fatalf("Subscribe(%q): %v", p, err)
		}
	}
	for _, topic := range []string{"a.b", "a.b.c", "x.y", "a"} {
		if _, err := c.Publish(ctx, topic, topic); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]string{
		"a.*":   {"a.b"},
		"a.#":   {"a.b", "a.b.c"},
		"a.*.c": {"a.b.c"},
		"#":     {"a.b", "a.b.c", "x.y", "a"},
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, ts := range got {
			n += len(ts)
		}
		return n
	}
	eventually(t, "every delivery", func() bool { return count() >= 8 })
	mu.Lock()
	defer mu.Unlock()
	for _, p := range patterns {
		g := slices.Clone(got[p])
		slices.Sort(g)
		w := slices.Clone(want[p])
		slices.Sort(w)
		if !slices.Equal(g, w) {
			t.Errorf("pattern %q got %v, want %v", p, g, w)
		}
	}
}

func TestSubscribeChan(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	c := dial(t, g, nil)
	ctx := testCtx(t)
	sub, err := c.SubscribeChan(ctx, "ticks", client.SubscribeOptions{Buffer: 4})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20 // more than Buffer: the dispatcher waits for the reader
	published := make(chan error, 1)
	go func() { // owned: the test waits for it before it ends
		for i := range n {
			if _, err := c.Publish(ctx, "ticks", i); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()
	for i := range n {
		m := recv(t, sub.C)
		if m.Offset != int64(i) || string(m.Data) != fmt.Sprint(i) {
			t.Fatalf("message %d = offset %d data %s", i, m.Offset, m.Data)
		}
	}
	// The last publish's reply may come after its message: wait for it
	// (a publish answered after the test ended failed it from outside).
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	for range sub.C { // drains what was queued, then ends
	}
}

func TestFromEarliestAndPositions(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	c := dial(t, g, nil)
	ctx := testCtx(t)
	for i := range 5 {
		if _, err := c.Publish(ctx, "hist", i); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		from  client.From
		first int64
	}{
		{"earliest", client.Earliest(), 0},
		{"positions", client.FromPositions(c.Welcome().Epoch, client.Position{Topic: "hist", Offset: 2}), 3},
		{"time", client.FromTime(time.Now().Add(-time.Minute)), 0},
		{"last", client.Last(), 4},
		{"last 2", client.Last(2), 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub, err := c.SubscribeChan(ctx, "hist", client.SubscribeOptions{From: tt.from})
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe(ctx)
			for off := tt.first; off < 5; off++ {
				if m := recv(t, sub.C); m.Offset != off {
					t.Fatalf("offset %d, want %d", m.Offset, off)
				}
			}
		})
	}
}

func TestErrors(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	c := dial(t, g, nil)
	ctx := testCtx(t)
	noop := func(*client.Message) {}
	if _, err := c.Subscribe(ctx, "dup", client.SubscribeOptions{}, noop); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		call     func() error
		wantCode string
		wantErr  error
	}{
		{"invalid topic", func() error { _, err := c.Publish(ctx, "a..b", 1); return err }, client.CodeInvalidTopic, nil},
		{"reserved topic", func() error { _, err := c.Publish(ctx, "$sys.stats", 1); return err }, client.CodeForbidden, nil},
		{"invalid pattern", func() error {
			_, err := c.Subscribe(ctx, "a*", client.SubscribeOptions{}, noop)
			return err
		}, client.CodeInvalidPattern, nil},
		{"bad priority", func() error { _, err := c.Publish(ctx, "a", 1, client.WithPriority(9)); return err }, client.CodeBadRequest, nil},
		{"subscribed twice", func() error {
			_, err := c.Subscribe(ctx, "dup", client.SubscribeOptions{}, noop)
			return err
		}, "", client.ErrAlreadySubscribed},
		{"unencodable data", func() error { _, err := c.Publish(ctx, "a", make(chan int)); return err }, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call()
			if err == nil {
				t.Fatal("no error")
			}
			var e *client.Error
			switch {
			case tt.wantCode != "":
				if !errors.As(err, &e) || e.Code != tt.wantCode {
					t.Fatalf("error %v, want code %s", err, tt.wantCode)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("error %v, want %v", err, tt.wantErr)
				}
			}
		})
	}
	// The connection survives every refused request.
	if _, err := c.Publish(ctx, "still.ok", 1); err != nil {
		t.Fatal(err)
	}
	t.Run("closed", func(t *testing.T) {
		c.Close()
		if _, err := c.Publish(ctx, "a", 1); !errors.Is(err, client.ErrClosed) {
			t.Fatalf("Publish after Close = %v, want ErrClosed", err)
		}
		if _, err := c.Subscribe(ctx, "a", client.SubscribeOptions{}, noop); !errors.Is(err, client.ErrClosed) {
			t.Fatalf("Subscribe after Close = %v, want ErrClosed", err)
		}
	})
}

func TestConcurrentPublish(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	c := dial(t, g, nil)
	ctx := testCtx(t)
	sub, err := c.SubscribeChan(ctx, "load", client.SubscribeOptions{Buffer: 1024})
	if err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				if _, err := c.Publish(ctx, "load", []int{w, i}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	for i := range workers * each {
		if m := recv(t, sub.C); m.Offset != int64(i) {
			t.Fatalf("delivery %d has offset %d", i, m.Offset)
		}
	}
}

func TestGroupAckNack(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{BackoffMin: 20 * time.Millisecond, BackoffMax: 40 * time.Millisecond})
	if err := g.post("/v1/topics", map[string]any{"name": "jobs", "partitions": 2}, nil); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	type rec struct {
		partition int
		offset    int64
	}
	var mu sync.Mutex
	acked := map[rec]int{}
	attempts := map[rec][]int{}
	handler := func(m *client.Message) {
		r := rec{m.Partition, m.Offset}
		mu.Lock()
		attempts[r] = append(attempts[r], m.Attempt)
		mu.Unlock()
		if m.Group != "workers" {
			t.Errorf("group %q", m.Group)
		}
		if m.Attempt == 1 && m.Offset%3 == 0 {
			if err := m.Nack(ctx, "try again"); err != nil {
				t.Errorf("Nack: %v", err)
			}
			return
		}
		if err := m.Ack(ctx); err != nil {
			t.Errorf("Ack: %v", err)
		}
		mu.Lock()
		acked[r]++
		mu.Unlock()
	}
	for range 2 {
		c := dial(t, g, nil)
		if _, err := c.Subscribe(ctx, "jobs", client.SubscribeOptions{Group: "workers"}, handler); err != nil {
			t.Fatal(err)
		}
	}
	pub := dial(t, g, nil)
	const n = 12
	for i := range n {
		if _, err := pub.Publish(ctx, "jobs", i); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "every record acked", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(acked) == n
	})
	mu.Lock()
	defer mu.Unlock()
	for r, k := range acked {
		if k != 1 {
			t.Errorf("%+v acked %d times", r, k)
		}
		want := []int{1}
		if r.offset%3 == 0 {
			want = []int{1, 2}
		}
		if !slices.Equal(attempts[r], want) {
			t.Errorf("%+v attempts %v, want %v", r, attempts[r], want)
		}
	}
}

// TestGroupRedeliveryHandledOnce makes the gateway redeliver a record the
// handler is still working on (its ack timeout passes) and checks that the
// handler runs once and the redelivery is acked.
func TestGroupRedeliveryHandledOnce(t *testing.T) {
	const ackTimeout = 150 * time.Millisecond
	g := newGateway(t, engine.GroupPolicy{AckTimeout: ackTimeout, BackoffMin: 10 * time.Millisecond})
	c := dial(t, g, nil)
	ctx := testCtx(t)
	var mu sync.Mutex
	runs := map[int64]int{}
	sub, err := c.Subscribe(ctx, "slow.jobs", client.SubscribeOptions{Group: "g"}, func(m *client.Message) {
		mu.Lock()
		runs[m.Offset]++
		first := runs[m.Offset] == 1
		mu.Unlock()
		if m.Offset == 0 && first {
			// Work past the ack timeout: the gateway hands the record out
			// again meanwhile.
			time.Sleep(4 * ackTimeout)
		}
		_ = m.Ack(ctx) // may be not_in_flight; the position is remembered either way
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "slow.jobs", "x"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a suppressed redelivery", func() bool { return sub.Duplicates() >= 1 })
	if _, err := c.Publish(ctx, "slow.jobs", "y"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the next record", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return runs[1] == 1
	})
	mu.Lock()
	defer mu.Unlock()
	if runs[0] != 1 {
		t.Fatalf("handler ran %d times for the redelivered record", runs[0])
	}
}

// TestReconnect cuts the connection, publishes over HTTP meanwhile, and
// checks that every subscription gets everything published during the
// outage, in order and once.
func TestReconnect(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	states := make(chan client.State, 16)
	c := dial(t, g, &client.Options{
		Reconnect: client.ReconnectPolicy{MinDelay: 100 * time.Millisecond, MaxDelay: 200 * time.Millisecond},
		OnState:   func(s client.State, _ error) { states <- s },
	})
	ctx := testCtx(t)
	var mu sync.Mutex
	got := map[string][]int64{} // subscription -> offsets handled
	record := func(name string) func(*client.Message) {
		return func(m *client.Message) {
			mu.Lock()
			got[name] = append(got[name], m.Offset)
			mu.Unlock()
			if m.Group != "" {
				// An ack cut off by the outage is fine: the record comes
				// back after the rejoin and is acked without a second run.
				if err := m.Ack(ctx); err != nil && !errors.Is(err, client.ErrConnectionLost) && ctx.Err() == nil {
					t.Errorf("Ack: %v", err)
				}
			}
		}
	}
	// "seen" has delivered records before the outage, so it resumes from
	// positions; "fresh" has delivered nothing, so it resumes from the time
	// it subscribed; "group" rejoins its group.
	subs := []struct {
		name, pattern string
		opts          client.SubscribeOptions
	}{
		{"seen", "feed.a", client.SubscribeOptions{}},
		{"fresh", "feed.b", client.SubscribeOptions{}},
		{"group", "feed.c", client.SubscribeOptions{Group: "g"}},
		{"wild", "feed.*", client.SubscribeOptions{}},
	}
	for _, s := range subs {
		if _, err := c.Subscribe(ctx, s.pattern, s.opts, record(s.name)); err != nil {
			t.Fatal(err)
		}
	}
	count := func(name string) int {
		mu.Lock()
		defer mu.Unlock()
		return len(got[name])
	}
	for range 5 {
		for _, topic := range []string{"feed.a", "feed.c"} {
			if _, err := c.Publish(ctx, topic, "before"); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, "deliveries before the outage", func() bool {
		return count("seen") == 5 && count("group") == 5 && count("wild") == 10
	})

	g.KillConnections()
	waitState(t, states, client.StateDisconnected)
	for range 10 {
		for _, topic := range []string{"feed.a", "feed.b", "feed.c"} {
			if err := g.post("/v1/publish", map[string]any{"topic": topic, "data": "during"}, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitState(t, states, client.StateConnected)
	for range 5 {
		for _, topic := range []string{"feed.a", "feed.b", "feed.c"} {
			if _, err := c.Publish(ctx, topic, "after"); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := map[string]int{"seen": 20, "fresh": 15, "group": 20, "wild": 55}
	eventually(t, "deliveries after the outage", func() bool {
		for name, n := range want {
			if count(name) < n {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	for _, name := range []string{"seen", "fresh", "group"} {
		offs := got[name]
		if len(offs) != want[name] {
			t.Errorf("%s: %d deliveries, want %d", name, len(offs), want[name])
		}
		for i, off := range offs {
			if off != int64(i) {
				t.Errorf("%s: delivery %d has offset %d, want in order and once: %v", name, i, off, offs)
				break
			}
		}
	}
	if n := len(got["wild"]); n != want["wild"] {
		t.Errorf("wild: %d deliveries, want %d", n, want["wild"])
	}
}

func waitState(t *testing.T, states <-chan client.State, want client.State) {
	t.Helper()
	timeout := time.After(wait)
	for {
		select {
		case s := <-states:
			if s == want {
				return
			}
		case <-timeout:
			t.Fatalf("timed out waiting for state %v", want)
		}
	}
}

func TestReconnectDisabled(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	c := dial(t, g, &client.Options{Reconnect: client.ReconnectPolicy{Disabled: true}})
	ctx := testCtx(t)
	sub, err := c.SubscribeChan(ctx, "x", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g.KillConnections()
	for range sub.C { // closed when the client stops
	}
	if _, err := c.Publish(ctx, "x", 1); !errors.Is(err, client.ErrClosed) {
		t.Fatalf("Publish = %v, want ErrClosed", err)
	}
}

func TestCloseWhileRedialing(t *testing.T) {
	g, err := startGateway(engine.GroupPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	states := make(chan client.State, 16)
	c := dial(t, g, &client.Options{OnState: func(s client.State, _ error) { states <- s }})
	g.Close() // the gateway goes away for good
	waitState(t, states, client.StateDisconnected)
	done := make(chan struct{})
	go func() {
		c.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(wait):
		t.Fatal("Close hung while redialing")
	}
	waitState(t, states, client.StateClosed)
}

func TestFilter(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	c := dial(t, g, nil)
	ctx := testCtx(t)
	sub, err := c.SubscribeChan(ctx, "weather.#", client.SubscribeOptions{Filter: map[string]string{"region": "eu"}})
	if err != nil {
		t.Fatal(err)
	}
	for i, region := range []string{"us", "eu", "us", "eu"} {
		if _, err := c.Publish(ctx, "weather.today", i, client.WithHeaders(map[string]string{"region": region})); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []int64{1, 3} {
		if m := recv(t, sub.C); m.Offset != want || m.Headers["region"] != "eu" {
			t.Fatalf("got offset %d headers %v, want offset %d in eu", m.Offset, m.Headers, want)
		}
	}
}

// TestLocalGap fills a subscription's MaxPending with a stuck handler and
// checks that the client reports what it dropped as a gap, before the next
// delivery.
func TestLocalGap(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	events := make(chan string, 64)
	c := dial(t, g, &client.Options{OnGap: func(gp client.Gap) {
		events <- fmt.Sprintf("gap %d-%d %s", gp.From, gp.To, gp.Reason)
	}})
	ctx := testCtx(t)
	release := make(chan struct{})
	sub, err := c.Subscribe(ctx, "burst", client.SubscribeOptions{MaxPending: 2, MaxPendingWait: -1}, func(m *client.Message) {
		if m.Offset == 0 {
			<-release
		}
		events <- fmt.Sprintf("msg %d", m.Offset)
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if _, err := c.Publish(ctx, "burst", i); err != nil {
			t.Fatal(err)
		}
	}
	// Offsets 1 and 2 wait in the queue; 3 to 9 are dropped. A publish
	// reply may overtake the deliveries (replies are written first), so
	// wait until the client has dropped all of them.
	deadline := time.Now().Add(wait)
	for client.DroppedThrough(sub, "burst", 0) < 10 {
		if time.Now().After(deadline) {
			t.Fatalf("drops reach offset %d, want 10", client.DroppedThrough(sub, "burst", 0))
		}
		time.Sleep(time.Millisecond)
	}
	close(release)
	var got []string
	next := func() string {
		select {
		case e := <-events:
			got = append(got, e)
			return e
		case <-time.After(wait):
			t.Fatalf("timed out; events so far %v", got)
		}
		return ""
	}
	for range 3 {
		next()
	}
	if _, err := c.Publish(ctx, "burst", 10); err != nil {
		t.Fatal(err)
	}
	next()
	next()
	want := []string{"msg 0", "msg 1", "msg 2", "gap 3-10 client_queue_full", "msg 10"}
	if !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
}

// TestResetOnNewEpoch restarts the gateway with an empty log (a new epoch)
// on the same address: the client resubscribes, is told the positions do
// not apply, reports a reset and delivers the new log from its start.
func TestResetOnNewEpoch(t *testing.T) {
	g1, err := startGateway(engine.GroupPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	resets := make(chan client.Reset, 4)
	c := dial(t, g1, &client.Options{
		Reconnect: client.ReconnectPolicy{MinDelay: 20 * time.Millisecond, MaxDelay: 50 * time.Millisecond},
		OnReset:   func(r client.Reset) { resets <- r },
	})
	ctx := testCtx(t)
	sub, err := c.SubscribeChan(ctx, "ledger", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := c.Publish(ctx, "ledger", i); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		recv(t, sub.C)
	}
	oldEpoch := c.Welcome().Epoch
	addr := g1.srv.Listener.Addr().String()
	g1.Close()
	g2, err := startGatewayOn(engine.GroupPolicy{}, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g2.Close)
	// The new log starts at offset 0 again; these must not be taken for
	// duplicates of the old log's offsets.
	for i := range 2 {
		if err := g2.post("/v1/publish", map[string]any{"topic": "ledger", "data": 100 + i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case r := <-resets:
		if r.Pattern != "ledger" || !r.EpochChanged {
			t.Fatalf("reset %+v", r)
		}
	case <-time.After(wait):
		t.Fatal("no reset")
	}
	for i := range 2 {
		m := recv(t, sub.C)
		if m.Offset != int64(i) || string(m.Data) != fmt.Sprint(100+i) {
			t.Fatalf("got offset %d data %s", m.Offset, m.Data)
		}
	}
	if c.Welcome().Epoch == oldEpoch {
		t.Fatal("epoch did not change")
	}
}
