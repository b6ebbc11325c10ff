package router_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/engine"
)

// TestFromLastWildcard: "last" over a wildcard gives the newest record of
// every matched topic, once, then live records only.
func TestFromLastWildcard(t *testing.T) {
	g := newGateway(t)
	const topics, each = 1000, 3
	ctx := context.Background()
	for i := range topics {
		for j := range each {
			if _, err := g.rt.Publish(ctx, engine.Message{Topic: fmt.Sprintf("sensor.%d", i), Data: []byte(strconv.Itoa(j))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	g.rt.Publish(ctx, engine.Message{Topic: "other", Data: []byte("1")})
	c := g.dial(t)
	c.subscribe(t, "sensor.*", "from", "last")
	seen := map[string]bool{}
	for range topics {
		m := c.nextOp(t, "message")
		topic := m["topic"].(string)
		if seen[topic] {
			t.Fatalf("%s twice", topic)
		}
		seen[topic] = true
		if num(m, "offset") != each-1 || m["data"] != float64(each-1) {
			t.Fatalf("got %v, want the newest record", m)
		}
	}
	c.noFrame(t)
	g.rt.Publish(ctx, engine.Message{Topic: "sensor.7", Data: []byte("9")})
	if m := c.nextOp(t, "message"); m["topic"] != "sensor.7" || num(m, "offset") != each {
		t.Fatalf("live: got %v", m)
	}
}

// TestFromLastPartitions: {"last": N} gives the newest N records of each
// partition in offset order, fewer where a partition holds fewer.
func TestFromLastPartitions(t *testing.T) {
	g := newGateway(t)
	ctx := context.Background()
	if _, err := g.eng.CreateTopic(ctx, engine.TopicConfig{Name: "multi", Partitions: 4, Partitioner: engine.RoundRobin}); err != nil {
		t.Fatal(err)
	}
	const n = 14 // partitions 0 and 1 get 4 records, 2 and 3 get 3
	for i := range n {
		if _, err := g.rt.Publish(ctx, engine.Message{Topic: "multi", Data: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	info, err := g.eng.Topic(ctx, "multi")
	if err != nil {
		t.Fatal(err)
	}
	want := map[int][]int64{}
	for _, p := range info.Parts {
		for o := max(p.Earliest, p.Next-3); o < p.Next; o++ {
			want[p.Partition] = append(want[p.Partition], o)
		}
	}
	c := g.dial(t)
	c.subscribe(t, "multi", "from", map[string]any{"last": 3})
	got := map[int][]int64{}
	for range 12 {
		m := c.nextOp(t, "message")
		p := int(num(m, "partition"))
		got[p] = append(got[p], num(m, "offset"))
	}
	c.noFrame(t)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestFromLastDuringCatchUp holds the catch-up once it has read the newest
// records, appends more, then lets it go: the newest records, then every
// record appended meanwhile, each once and in order.
func TestFromLastDuringCatchUp(t *testing.T) {
	gate := &gatedReads{parked: make(chan struct{}), gate: make(chan struct{})}
	g := newGateway(t, func(c *gwConfig) {
		c.wrap = func(e engine.Engine) engine.Engine { gate.Engine = e; return gate }
	})
	ctx := context.Background()
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := g.rt.Publish(ctx, engine.Message{Topic: "price.eur", Data: []byte(strconv.Itoa(i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(0, 50)
	c := g.dial(t)
	c.subscribe(t, "price.*", "from", map[string]any{"last": 5})
	select {
	case <-gate.parked:
	case <-time.After(waitTimeout):
		t.Fatal("the catch-up never reached the log's end")
	}
	publish(50, 80)
	close(gate.gate)
	for want := int64(45); want < 80; want++ {
		if m := c.nextOp(t, "message"); num(m, "offset") != want {
			t.Fatalf("got %v, want offset %d", m, want)
		}
	}
	c.noFrame(t)
}

func TestFromLastRefused(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.MaxLast = 10 })
	c := g.dial(t)
	for _, tc := range []struct {
		name string
		req  map[string]any
	}{
		{"over the bound", map[string]any{"op": "subscribe", "pattern": "a", "from": map[string]any{"last": 11}}},
		{"zero", map[string]any{"op": "subscribe", "pattern": "a", "from": map[string]any{"last": 0}}},
		{"group", map[string]any{"op": "subscribe", "pattern": "a", "group": "g", "from": "last"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := c.call(t, tc.req)
			if m["op"] != "error" || m["code"] != "bad_request" {
				t.Fatalf("got %v, want bad_request", m)
			}
		})
	}
	c.subscribe(t, "a", "from", map[string]any{"last": 10})
}

// BenchmarkFromLastWildcard10k subscribes from "last" with a wildcard over
// 10,000 topics (one op: the subscribe and every topic's newest record
// received over the socket).
func BenchmarkFromLastWildcard10k(b *testing.B) {
	rt, _, url := benchGateway(b, false)
	ctx := context.Background()
	const topics = 10_000
	for i := range topics {
		for j := range 3 {
			if _, err := rt.Publish(ctx, engine.Message{Topic: fmt.Sprintf("sensor.%d", i), Data: []byte(strconv.Itoa(j))}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		conn, _, err := websocket.Dial(ctx, url, nil)
		if err != nil {
			b.Fatal(err)
		}
		conn.SetReadLimit(16 << 20)
		if err := conn.Write(ctx, websocket.MessageText, []byte(`{"op":"subscribe","id":1,"pattern":"sensor.*","from":"last"}`)); err != nil {
			b.Fatal(err)
		}
		n := 0
		for n < topics {
			_, data, err := conn.Read(ctx)
			if err != nil {
				b.Fatal(err)
			}
			n += bytes.Count(data, []byte(`{"op":"message"`))
		}
		conn.CloseNow()
	}
}
