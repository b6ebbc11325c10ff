package router_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
)

// Pipelined publish (router/publish.go): replies in request order, the
// engine handed the records in request order, the bounds, failures and
// shutdown with appends in flight. The gated engine holds every async
// append until the test releases it, so "in flight" is an event, not a
// timing.

// gatedEngine holds AppendAsync calls until released; the release runs
// the real engine's Append (or fails the call).
type gatedEngine struct {
	engine.Engine
	mu      sync.Mutex // guards following
	calls   []*gatedCall
	arrived chan struct{} // one value per call
}

type gatedCall struct {
	ctx      context.Context
	m        engine.Message
	done     func(engine.Appended, error)
	released bool
}

func newGated(eng engine.Engine) *gatedEngine {
	return &gatedEngine{Engine: eng, arrived: make(chan struct{}, 1024)}
}

func (g *gatedEngine) AppendAsync(ctx context.Context, m engine.Message, done func(engine.Appended, error)) {
	g.mu.Lock()
	g.calls = append(g.calls, &gatedCall{ctx: ctx, m: m, done: done})
	g.mu.Unlock()
	g.arrived <- struct{}{}
}

// waitCalls waits until n calls have arrived in all.
func (g *gatedEngine) waitCalls(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		g.mu.Lock()
		got := len(g.calls)
		g.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-g.arrived:
		case <-deadline:
			t.Fatalf("%d appends arrived, want %d", got, n)
		}
	}
}

func (g *gatedEngine) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.calls)
}

func (g *gatedEngine) call(i int) *gatedCall {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[i]
}

// release completes call i: stored by the real engine, or failed with err.
func (g *gatedEngine) release(i int, err error) {
	g.mu.Lock()
	c := g.calls[i]
	if c.released {
		g.mu.Unlock()
		return
	}
	c.released = true
	g.mu.Unlock()
	if err != nil {
		c.done(engine.Appended{}, err)
		return
	}
	c.done(g.Engine.Append(c.ctx, c.m))
}

// releaseAll completes every call not yet released, in arrival order.
func (g *gatedEngine) releaseAll() {
	for i := range g.count() {
		g.release(i, nil)
	}
}

func newGatedGateway(t *testing.T, mods ...func(*gwConfig)) (*gateway, *gatedEngine) {
	t.Helper()
	var ge *gatedEngine
	g := newGateway(t, append(mods, func(c *gwConfig) {
		c.wrap = func(e engine.Engine) engine.Engine {
			ge = newGated(e)
			return ge
		}
	})...)
	// Cleanups run last-first: this one, before the gateway's shutdown,
	// answers whatever a failed test left in flight.
	t.Cleanup(ge.releaseAll)
	return g, ge
}

func sendPublishes(t *testing.T, c *client, topic string, ids []string, data string) {
	t.Helper()
	for _, id := range ids {
		c.send(t, map[string]any{"op": "publish", "id": id, "topic": topic, "data": data})
	}
}

func idsN(prefix string, n int) []string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s%d", prefix, i)
	}
	return ids
}

func TestPublishPipelineRepliesInRequestOrder(t *testing.T) {
	g, ge := newGatedGateway(t)
	c := g.dial(t)
	ids := idsN("p", 8)
	sendPublishes(t, c, "pipe.order", ids, "x")
	ge.waitCalls(t, len(ids))
	// All in flight at once.
	// Answer them last first: the replies still come in request order.
	for i := len(ids) - 1; i >= 0; i-- {
		ge.release(i, nil)
	}
	for _, id := range ids {
		m := c.nextOp(t, "published")
		if m["id"] != id {
			t.Fatalf("reply %v, want id %s", m, id)
		}
	}
	c.noFrame(t)
}

func TestPublishPipelineHandsRecordsOverInOrder(t *testing.T) {
	// Many publishes of one key in flight: the engine is handed them in
	// publish order (it stores one partition's in call order), and they
	// are stored in that order.
	g, ge := newGatedGateway(t)
	c := g.dial(t)
	const n = 50
	for i := range n {
		c.send(t, map[string]any{"op": "publish", "id": i, "topic": "pipe.key", "key": "k", "data": i})
	}
	for done := 0; done < n; {
		ge.waitCalls(t, done+1)
		for ; done < ge.count(); done++ {
			if got := string(ge.call(done).m.Data); got != fmt.Sprint(done) {
				t.Fatalf("call %d carries %s", done, got)
			}
			ge.release(done, nil)
		}
	}
	for i := range n {
		m := c.nextOp(t, "published")
		if num(m, "id") != int64(i) || num(m, "offset") != int64(i) {
			t.Fatalf("reply %d: %v", i, m)
		}
	}
}

func TestPublishPipelineCountBound(t *testing.T) {
	g, ge := newGatedGateway(t, func(c *gwConfig) { c.router.PublishPipeline = 3 })
	c := g.dial(t)
	sendPublishes(t, c, "pipe.count", idsN("c", 5), "x")
	ge.waitCalls(t, 3)
	waitMetric(t, g, "switchyard_publish_pipeline_waits_total", map[string]string{"bound": "count"}, 1)
	if got := metricValue(t, g.reg, "switchyard_publishes_in_flight", nil); got != 3 {
		t.Fatalf("publishes in flight = %v, want 3", got)
	}
	if n := ge.count(); n != 3 {
		t.Fatalf("%d appends in flight past a bound of 3", n)
	}
	ge.release(0, nil)
	ge.waitCalls(t, 4)
	if n := ge.count(); n != 4 {
		t.Fatalf("%d appends after one reply, want 4", n)
	}
	ge.releaseAll()
	ge.waitCalls(t, 5)
	ge.releaseAll()
	for _, id := range idsN("c", 5) {
		if m := c.nextOp(t, "published"); m["id"] != id {
			t.Fatalf("reply %v, want %s", m, id)
		}
	}
	waitMetric(t, g, "switchyard_publishes_in_flight", nil, 0)
}

func TestPublishPipelineBytesBound(t *testing.T) {
	// 100 bytes in flight: one 60-byte publish at a time; a publish over
	// the bound still goes when nothing else is in flight.
	g, ge := newGatedGateway(t, func(c *gwConfig) { c.router.PublishPipelineBytes = 100 })
	c := g.dial(t)
	data := strings.Repeat("a", 58) // 60 bytes as JSON
	sendPublishes(t, c, "pipe.bytes", idsN("b", 3), data)
	ge.waitCalls(t, 1)
	waitMetric(t, g, "switchyard_publish_pipeline_waits_total", map[string]string{"bound": "bytes"}, 1)
	if n := ge.count(); n != 1 {
		t.Fatalf("%d appends in flight, want 1", n)
	}
	ge.release(0, nil)
	ge.waitCalls(t, 2)
	ge.release(1, nil)
	ge.waitCalls(t, 3)
	ge.release(2, nil)
	big := strings.Repeat("z", 200)
	c.send(t, map[string]any{"op": "publish", "id": "big", "topic": "pipe.bytes", "data": big})
	ge.waitCalls(t, 4)
	ge.release(3, nil)
	for _, id := range append(idsN("b", 3), "big") {
		if m := c.nextOp(t, "published"); m["id"] != id {
			t.Fatalf("reply %v, want %s", m, id)
		}
	}
}

func TestPublishPipelineFailureAnsweredPerRequest(t *testing.T) {
	// The engine fails the third of five appends in flight: each request
	// gets exactly one reply, in order, the third an error.
	g, ge := newGatedGateway(t)
	c := g.dial(t)
	ids := idsN("f", 5)
	sendPublishes(t, c, "pipe.fail", ids, "x")
	ge.waitCalls(t, 5)
	ge.release(4, nil)
	ge.release(2, fmt.Errorf("test: %w", engine.ErrUnavailable))
	ge.release(0, nil)
	ge.release(3, nil)
	ge.release(1, nil)
	for i, id := range ids {
		m := c.next(t)
		if m["id"] != id {
			t.Fatalf("reply %v, want id %s", m, id)
		}
		want := "published"
		if i == 2 {
			want = "error"
			if m["code"] != "unavailable" {
				t.Fatalf("error %v, want unavailable", m)
			}
		}
		if m["op"] != want {
			t.Fatalf("reply %d: %v, want %s", i, m, want)
		}
	}
	c.noFrame(t)
	// Stored: the four that succeeded, in request order.
	recs, _, err := g.eng.Read(context.Background(), "pipe.fail", 0, 0, 10)
	if err != nil || len(recs) != 4 {
		t.Fatalf("read: %d records, %v", len(recs), err)
	}
}

func TestPublishPipelineOtherOpsWait(t *testing.T) {
	// A refused publish and a subscribe sent behind a publish in flight
	// are answered after it.
	g, ge := newGatedGateway(t)
	c := g.dial(t)
	c.send(t, map[string]any{"op": "publish", "id": "first", "topic": "pipe.ops", "data": 1})
	c.send(t, map[string]any{"op": "publish", "id": "bad", "topic": "pipe.ops"}) // no data
	c.send(t, map[string]any{"op": "subscribe", "id": "sub", "pattern": "pipe.ops"})
	ge.waitCalls(t, 1)
	ge.release(0, nil)
	for _, want := range []struct{ id, op string }{{"first", "published"}, {"bad", "error"}, {"sub", "subscribed"}} {
		m := c.next(t)
		if m["id"] != want.id || m["op"] != want.op {
			t.Fatalf("got %v, want %s %s", m, want.op, want.id)
		}
	}
}

func TestPublishPipelineShutdownAnswersInFlight(t *testing.T) {
	g, ge := newGatedGateway(t)
	c := g.dial(t)
	ids := idsN("s", 3)
	sendPublishes(t, c, "pipe.shutdown", ids, "x")
	ge.waitCalls(t, 3)
	done := make(chan error, 1)
	go func() { // exits when Shutdown returns
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		done <- g.rt.Shutdown(ctx)
	}()
	// A publish after Shutdown began is refused; those in flight are
	// answered, then the session closes.
	ge.releaseAll()
	for _, id := range ids {
		if m := c.nextOp(t, "published"); m["id"] != id {
			t.Fatalf("reply %v, want %s", m, id)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	c.closeStatus(t)
	recs, _, err := g.eng.Read(context.Background(), "pipe.shutdown", 0, 0, 10)
	if err != nil || len(recs) != 3 {
		t.Fatalf("read: %d records, %v", len(recs), err)
	}
}

func TestPublishPipelineSessionEndsInFlight(t *testing.T) {
	// The client leaves with appends in flight: the session's teardown
	// waits for them (goleak checks nothing outlives it) and the records
	// the engine stored stay stored.
	g, ge := newGatedGateway(t)
	c := g.dial(t)
	sendPublishes(t, c, "pipe.leave", idsN("l", 4), "x")
	ge.waitCalls(t, 4)
	_ = c.conn.CloseNow()
	ge.release(0, nil)
	ge.release(1, nil)
	// The session's context ends with it; the engine sees that.
	for i := 2; i < 4; i++ {
		call := ge.call(i)
		select {
		case <-call.ctx.Done():
		case <-time.After(waitTimeout):
			t.Fatal("append context not canceled with the session")
		}
		ge.release(i, call.ctx.Err())
	}
	waitMetric(t, g, "switchyard_connections", nil, 0)
	waitMetric(t, g, "switchyard_publishes_in_flight", nil, 0)
	recs, _, err := g.eng.Read(context.Background(), "pipe.leave", 0, 0, 10)
	if err != nil || len(recs) != 2 {
		t.Fatalf("read: %d records, %v", len(recs), err)
	}
}

func TestPublishPipelineDefaults(t *testing.T) {
	if router.DefaultPublishPipeline < 1 || router.DefaultPublishPipelineBytes < 1 {
		t.Fatal("defaults must admit a publish")
	}
}

// waitMetric polls a metric until it equals want.
func waitMetric(t *testing.T, g *gateway, name string, labels map[string]string, want float64) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		got := metricValue(t, g.reg, name, labels)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s%v = %v, want %v", name, labels, got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
