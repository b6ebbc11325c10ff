package router_test

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
)

// parkedRead parks the first Read from offset at until gate is closed,
// closing parked when it does; the Read itself happens after the gate.
type parkedRead struct {
	engine.Engine
	at     int64
	once   sync.Once
	parked chan struct{}
	gate   chan struct{}
}

func (p *parkedRead) Read(ctx context.Context, topic string, partition int, from int64, limit int) ([]*engine.Record, int64, error) {
	if from == p.at {
		first := false
		p.once.Do(func() { first = true })
		if first {
			close(p.parked)
			select {
			case <-p.gate:
			case <-ctx.Done():
				return nil, 0, ctx.Err()
			}
		}
	}
	return p.Engine.Read(ctx, topic, partition, from, limit)
}

// publishN publishes n records to topic, with data base, base+1, ….
func publishN(t *testing.T, g *gateway, topic string, base, n int) {
	t.Helper()
	for i := range n {
		if _, err := g.rt.Publish(context.Background(), engine.Message{Topic: topic, Data: []byte(strconv.Itoa(base + i))}); err != nil {
			t.Fatal(err)
		}
	}
}

// expectMessages wants the next frames to be messages of topic with offsets
// from to to-1.
func (c *client) expectMessages(t *testing.T, topic string, from, to int64) {
	t.Helper()
	for off := from; off < to; off++ {
		m := c.next(t)
		if m["op"] != "message" || m["topic"] != topic || num(m, "offset") != off {
			t.Fatalf("want message %s/%d, got %v", topic, off, m)
		}
	}
}

// TestReplayOfDeletedTopicDeliversNewIncarnation deletes and re-creates a
// topic while a subscription replays it from the log: the replay of the
// old incarnation stops at the topic_deleted frame, and the new
// incarnation's records reach the subscription from offset 0, with no gap.
func TestReplayOfDeletedTopicDeliversNewIncarnation(t *testing.T) {
	const (
		batch = 256       // the router's replay batch: the park is after one
		old   = 1_000_000 // data of the old incarnation's records: old+offset
	)
	gate := &parkedRead{at: batch, parked: make(chan struct{}), gate: make(chan struct{})}
	g := newGateway(t, func(c *gwConfig) {
		c.wrap = func(e engine.Engine) engine.Engine { gate.Engine = e; return gate }
	})
	ctx := context.Background()
	publishN(t, g, "x.a", old, 1000)
	c := g.dial(t)
	c.subscribe(t, "x.#", "from", "earliest")
	select {
	case <-gate.parked:
	case <-time.After(waitTimeout):
		t.Fatal("the replay never read its second batch")
	}
	if err := g.eng.DeleteTopic(ctx, "x.a"); err != nil {
		t.Fatal(err)
	}
	if _, err := g.eng.CreateTopic(ctx, engine.TopicConfig{Name: "x.a"}); err != nil {
		t.Fatal(err)
	}
	publishN(t, g, "x.a", 0, 10)
	close(gate.gate)

	// The topic_deleted frame may overtake old records already queued;
	// the new incarnation's come after it, all ten, in order.
	var olds, news int64
	deleted := false
	for news < 10 {
		m := c.next(t)
		switch {
		case m["op"] == "topic_deleted" && m["topic"] == "x.a" && !deleted:
			deleted = true
		case m["op"] == "message" && num(m, "data") == old+olds && num(m, "offset") == olds:
			olds++
		case m["op"] == "message" && deleted && num(m, "data") == news && num(m, "offset") == news:
			news++
		default:
			t.Fatalf("after %d old and %d new records (topic_deleted seen: %v): got %v", olds, news, deleted, m)
		}
	}
	if olds > batch {
		t.Fatalf("%d records of the old incarnation: its replay went on past the delete", olds)
	}
	c.noFrame(t)
}

// TestLiveAfterReplayGetsRecreatedTopic: a subscription that replayed a
// topic and went live gets the records of the topic created again after a
// delete from offset 0, although its replay ended further on.
func TestLiveAfterReplayGetsRecreatedTopic(t *testing.T) {
	g := newGateway(t)
	ctx := context.Background()
	publishN(t, g, "y.a", 0, 5)
	c := g.dial(t)
	c.subscribe(t, "y.#", "from", "earliest")
	c.expectMessages(t, "y.a", 0, 5)
	waitLive(t, g.rt)
	if err := g.eng.DeleteTopic(ctx, "y.a"); err != nil {
		t.Fatal(err)
	}
	c.nextOp(t, "topic_deleted")
	publishN(t, g, "y.a", 0, 3)
	c.expectMessages(t, "y.a", 0, 3)
	c.noFrame(t)
}

// waitLive waits until every plain subscription of rt has switched from
// its catch-up to the live tail.
func waitLive(t *testing.T, rt *router.Router) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for router.CatchingUp(rt) > 0 {
		if time.Now().After(deadline) {
			t.Fatal("the catch-up never switched to live")
		}
		time.Sleep(time.Millisecond)
	}
}

// lateAnnounce holds back the announcements of the engine it wraps while
// hold is set, as an engine whose log can return a record before its tail
// announces it (engine.SeenReader: "or are being told of").
type lateAnnounce struct {
	engine.Engine
	mu   sync.Mutex // guards the fields below
	hold bool
	held []*engine.Record
	obs  engine.Observer
}

func (e *lateAnnounce) Watch(o engine.Observer) func() {
	e.mu.Lock()
	e.obs = o
	e.mu.Unlock()
	return e.Engine.Watch(lateShim{e})
}

// release announces what was held back and stops holding.
func (e *lateAnnounce) release() {
	e.mu.Lock()
	held, o := e.held, e.obs
	e.held, e.hold = nil, false
	e.mu.Unlock()
	for _, r := range held {
		o.Appended(r)
	}
}

type lateShim struct{ e *lateAnnounce }

func (s lateShim) Appended(r *engine.Record) {
	s.e.mu.Lock()
	if s.e.hold {
		s.e.held = append(s.e.held, r)
		s.e.mu.Unlock()
		return
	}
	o := s.e.obs
	s.e.mu.Unlock()
	o.Appended(r)
}

func (s lateShim) TopicDeleted(topic string) { s.e.obs.TopicDeleted(topic) }

// TestReplayHandoffDropsRecordAnnouncedLate: a record the catch-up read
// from the log and the engine announces only after the subscription went
// live reaches the subscriber once.
func TestReplayHandoffDropsRecordAnnouncedLate(t *testing.T) {
	le := &lateAnnounce{}
	g := newGateway(t, func(c *gwConfig) {
		c.wrap = func(e engine.Engine) engine.Engine { le.Engine = e; return le }
	})
	publishN(t, g, "lt", 0, 2) // announced: offsets 0 and 1
	le.mu.Lock()
	le.hold = true
	le.mu.Unlock()
	publishN(t, g, "lt", 0, 2) // in the log, not announced yet: 2 and 3
	c := g.dial(t)
	c.subscribe(t, "lt", "from", "earliest")
	c.expectMessages(t, "lt", 0, 4)
	waitLive(t, g.rt)
	le.release()
	publishN(t, g, "lt", 4, 1) // offset 4, announced at once
	c.expectMessages(t, "lt", 4, 5)
	c.noFrame(t)
}
