package router_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/session"
)

// Faults: members that vanish mid-ack, clients that never read, and a
// gateway that shuts down under a member holding records. Every wait is on
// an event (a frame, a reply, a metric or group state polled with a
// deadline); none of these tests asserts a duration.

// rec names one record of a test topic.
type rec struct {
	partition, offset int64
}

func (r rec) String() string { return fmt.Sprintf("%d/%d", r.partition, r.offset) }

func recOf(m map[string]any) rec { return rec{num(m, "partition"), num(m, "offset")} }

func ackReq(group, topic string, r rec) map[string]any {
	return map[string]any{"op": "ack", "group": group, "topic": topic, "partition": r.partition, "offset": r.offset}
}

// groupCommitted returns the group's committed offset per partition of
// topic.
func groupCommitted(t *testing.T, g *gateway, group, topic string) map[int64]int64 {
	t.Helper()
	code, body, _ := g.httpDo(t, "GET", "/v1/groups/"+group, nil)
	if code != 200 {
		t.Fatalf("group %s: %d %v", group, code, body)
	}
	out := map[int64]int64{}
	parts, _ := body["partitions"].([]any)
	for _, p := range parts {
		pm := p.(map[string]any)
		if pm["topic"] == topic {
			out[num(pm, "partition")] = num(pm, "committed")
		}
	}
	return out
}

// drainGroup makes c ack every delivery, checking each against the
// records others acked (acked: never redelivered) and its own (never
// twice), until it has handled every record in want and, of the records
// in maybe, either handled them or the group committed them. It returns
// the deliveries by record.
func drainGroup(t *testing.T, g *gateway, c *client, group, topic string, perPartition int64,
	acked, want, maybe map[rec]bool) map[rec]map[string]any {
	t.Helper()
	got := map[rec]map[string]any{}
	done := func() bool {
		for r := range want {
			if got[r] == nil {
				return false
			}
		}
		pending := false
		for r := range maybe {
			pending = pending || got[r] == nil
		}
		if !pending {
			return true
		}
		for _, off := range groupCommitted(t, g, group, topic) {
			if off < perPartition {
				return false
			}
		}
		return true
	}
	for !done() {
		m := c.nextOp(t, "message")
		r := recOf(m)
		if acked[r] {
			t.Fatalf("record %v was acked before and is delivered again: %v", r, m)
		}
		if got[r] != nil {
			t.Fatalf("record %v delivered twice to one member: %v", r, m)
		}
		if !want[r] && !maybe[r] {
			t.Fatalf("unexpected delivery %v", m)
		}
		got[r] = m
		c.mustOK(t, ackReq(group, topic, r), "acked")
	}
	c.noFrame(t)
	for p, off := range groupCommitted(t, g, group, topic) {
		if off != perPartition {
			t.Fatalf("partition %d committed %d, want %d", p, off, perPartition)
		}
	}
	return got
}

// groupLoad creates topic on member's gateway with the given partitions,
// written round robin, has a member join group there and publishes
// partitions*perPartition records through pub's gateway. It returns the
// member.
func groupLoad(t *testing.T, member, pub *gateway, topic, group string, partitions, perPartition int) *client {
	t.Helper()
	if code, body, _ := member.httpDo(t, "POST", "/v1/topics", map[string]any{"name": topic, "partitions": partitions, "partitioner": "round_robin"}); code != 201 {
		t.Fatalf("create: %d %v", code, body)
	}
	a := member.dial(t)
	a.subscribe(t, topic, "group", group)
	p := pub.dial(t)
	for i := range partitions * perPartition {
		p.publish(t, topic, i)
	}
	return a
}

// TestGroupMemberVanishes: a member holding one record per partition (after
// an ack the gateway confirmed) disconnects, either right after sending an
// ack without waiting for its reply, or with its records simply in flight.
// Another member gets every record not acked (redelivered at attempt 2 or
// more), never the confirmed one, and the group commits everything. The
// record acked just before the close is either committed (then never
// redelivered) or redelivered once: both are at-least-once.
func TestGroupMemberVanishes(t *testing.T) {
	const (
		topic, group = "jobs", "w"
		partitions   = 3
		perPartition = 3
	)
	for _, tt := range []struct {
		name   string
		midAck bool
	}{
		{"ack then close", true},
		{"close with records in flight", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newGateway(t)
			a := groupLoad(t, g, g, topic, group, partitions, perPartition)
			// One record per partition is in flight to a.
			held := map[rec]bool{}
			for range partitions {
				m := a.nextOp(t, "message")
				if num(m, "offset") != 0 || num(m, "attempt") != 1 {
					t.Fatalf("first deliveries: %v", m)
				}
				held[recOf(m)] = true
			}
			// a acks partition 0's record and waits for the reply: that
			// record is done for good. The partition's next record follows.
			acked := map[rec]bool{{0, 0}: true}
			a.mustOK(t, ackReq(group, topic, rec{0, 0}), "acked")
			delete(held, rec{0, 0})
			if m := a.nextOp(t, "message"); recOf(m) != (rec{0, 1}) {
				t.Fatalf("after the ack: %v, want 0/1", m)
			}
			held[rec{0, 1}] = true
			// b joins; partitions rebalance once a's records settle.
			b := g.dial(t)
			b.subscribe(t, topic, "group", group)

			maybe := map[rec]bool{}    // acked by a, perhaps not applied
			mayRetry := map[rec]bool{} // perhaps delivered to a before it closed
			if tt.midAck {
				a.send(t, ackReq(group, topic, rec{1, 0})) // no id: no reply to wait for
				delete(held, rec{1, 0})
				maybe[rec{1, 0}] = true
				mayRetry[rec{1, 1}] = true // the ack, if applied, frees the partition
			}
			a.conn.CloseNow()

			want := map[rec]bool{}
			for p := range int64(partitions) {
				for o := range int64(perPartition) {
					if r := (rec{p, o}); !acked[r] && !maybe[r] {
						want[r] = true
					}
				}
			}
			got := drainGroup(t, g, b, group, topic, perPartition, acked, want, maybe)
			for r := range held {
				if m := got[r]; num(m, "attempt") < 2 {
					t.Errorf("record %v held by the vanished member came to b as %v, want a redelivery", r, m)
				}
			}
			for r, m := range got {
				if !held[r] && !maybe[r] && !mayRetry[r] && num(m, "attempt") != 1 {
					t.Errorf("record %v never delivered before has attempt %v", r, m["attempt"])
				}
			}
		})
	}
}

// counterSum adds up every series of a counter (or gauge) family.
func counterSum(t *testing.T, g *gateway, name string) float64 {
	t.Helper()
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// TestNonReaderDoesNotStallOthers: a client that subscribes and then never
// reads, under every on_full policy, while a publisher sends, a few at a
// time without waiting, far more than the client's socket buffers and queue
// can hold. The publisher gets every reply, another subscriber gets every
// record once and in order, and HTTP and WebSocket round trips still
// complete afterwards. Nothing here is
// timed: if fan-out waited on the stuck client, a reply or a message would
// never come and the test would fail at its wait bound.
func TestNonReaderDoesNotStallOthers(t *testing.T) {
	const (
		n      = 400
		queue  = 8
		window = queue / 2
	)
	pad := fmt.Sprintf("%032768d", 0) // 32 KiB: n records are ~13 MiB, past any socket buffer
	for _, policy := range []string{"drop_old", "drop_new", "disconnect"} {
		t.Run(policy, func(t *testing.T) {
			g := newGateway(t, func(c *gwConfig) { c.router.Session = session.Options{QueueMessages: queue} })
			stuck := g.dialPaused(t)
			stuck.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "feed.#", "on_full": policy})
			reader := g.dial(t)
			reader.subscribe(t, "feed.a")
			waitSubscribed(t, g, "feed", 2)
			pub := g.dial(t)

			// Windows of publishes, each written before any of its replies
			// is read. A window is smaller than the queue bound, so the
			// reading subscriber never has more queued than its queue holds
			// and must lose nothing, however the goroutines are scheduled;
			// the stuck client's queue only fills.
			for i := 0; i < n; i += window {
				for j := i; j < i+window; j++ {
					pub.send(t, map[string]any{"op": "publish", "id": j, "topic": "feed.a", "data": map[string]any{"i": j, "pad": pad}})
				}
				for j := i; j < i+window; j++ {
					if m := pub.nextOp(t, "published"); num(m, "id") != int64(j) || num(m, "offset") != int64(j) {
						t.Fatalf("reply %d: %v", j, m)
					}
				}
				for j := i; j < i+window; j++ {
					if m := reader.nextOp(t, "message"); num(m, "offset") != int64(j) {
						t.Fatalf("reader: message %d has offset %v", j, m["offset"])
					}
				}
			}
			// Later round trips, over both APIs, still complete while the
			// stuck client sits on its backlog.
			if code, body, _ := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "feed.a", "data": "http"}); code != 200 || num(body, "offset") != n {
				t.Fatalf("http publish: %d %v", code, body)
			}
			if m := reader.nextOp(t, "message"); m["data"] != "http" {
				t.Fatalf("after http publish: %v", m)
			}
			if m := pub.publish(t, "feed.a", "ws"); num(m, "offset") != n+1 {
				t.Fatalf("ws publish: %v", m)
			}
			if m := reader.nextOp(t, "message"); m["data"] != "ws" {
				t.Fatalf("after ws publish: %v", m)
			}
			// The stuck client's queue did overflow: the test exercised a
			// real backlog, not one the kernel absorbed. Drops are counted
			// as they happen; a slow-consumer disconnect once the session
			// ends, which closing our side makes prompt (the gateway's close
			// handshake with a peer that reads nothing otherwise waits for
			// its timeouts).
			stuck.conn.CloseNow()
			deadline := time.Now().Add(waitTimeout)
			for counterSum(t, g, "switchyard_drops_total")+counterSum(t, g, "switchyard_slow_consumer_disconnects_total") == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the stuck client never overflowed its queue")
				}
				time.Sleep(time.Millisecond)
			}
			reader.noFrame(t)
		})
	}
}

// newGatewayOn is newGateway on an engine the caller owns and closes, so
// that several gateways (nodes) can share one log.
func newGatewayOn(t *testing.T, eng *memengine.Engine) *gateway {
	t.Helper()
	reg := prometheus.NewRegistry()
	rt, err := router.New(router.Options{Engine: eng, Registry: reg, StatsInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		srv.Close()
	})
	return &gateway{t: t, eng: eng, rt: rt, srv: srv, reg: reg}
}

// TestShutdownHandsInFlightToOtherNode: two gateways share one engine. A
// member on gateway A acks some records and holds others when A shuts
// down; a member of the same group on gateway B receives exactly the held
// and the not yet delivered records, never an acked one, and the group
// commits everything.
func TestShutdownHandsInFlightToOtherNode(t *testing.T) {
	const (
		topic, group = "orders", "billing"
		partitions   = 2
		perPartition = 3
	)
	eng := memengine.New(memengine.Options{})
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := eng.Close(ctx); err != nil {
			t.Errorf("engine close: %v", err)
		}
	})
	// B's cleanup is registered first, so it runs after A's and the
	// engine's runs last.
	nodeB := newGatewayOn(t, eng)
	nodeA := newGatewayOn(t, eng)
	a := groupLoad(t, nodeA, nodeB, topic, group, partitions, perPartition)
	held := map[rec]bool{}
	for range partitions {
		held[recOf(a.nextOp(t, "message"))] = true
	}
	acked := map[rec]bool{{0, 0}: true}
	a.mustOK(t, ackReq(group, topic, rec{0, 0}), "acked")
	delete(held, rec{0, 0})
	if m := a.nextOp(t, "message"); recOf(m) != (rec{0, 1}) {
		t.Fatalf("after the ack: %v, want 0/1", m)
	}
	held[rec{0, 1}] = true // a now holds 0/1 and 1/0

	b := nodeB.dial(t)
	b.subscribe(t, topic, "group", group)
	// The client can read a delivery before A's writer has reported it
	// written; a shutdown in that moment hands it back as unsent (by
	// design, see router/shutdown.go). Shut down once A knows both went out.
	waitUntil(t, "A's writer to report the held records written", func() bool {
		return router.UnsentGroupDeliveries(nodeA.rt) == 0
	})

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := nodeA.rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if s := a.closeStatus(t); s != websocket.StatusGoingAway {
		t.Fatalf("a's close status %v, want 1001", s)
	}
	waitMembers(t, nodeB, group, 1)

	want := map[rec]bool{}
	for p := range int64(partitions) {
		for o := range int64(perPartition) {
			if r := (rec{p, o}); !acked[r] {
				want[r] = true
			}
		}
	}
	got := drainGroup(t, nodeB, b, group, topic, perPartition, acked, want, nil)
	for r := range held {
		if num(got[r], "attempt") < 2 {
			t.Errorf("record %v held on the stopped node came to b as %v, want a redelivery", r, got[r])
		}
	}
}

// waitMembers polls the group until it has exactly n members.
func waitMembers(t *testing.T, g *gateway, group string, n int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		_, body, _ := g.httpDo(t, "GET", "/v1/groups/"+group, nil)
		if ms, _ := body["members"].([]any); len(ms) == n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("group %s never had %d member(s)", group, n)
}
