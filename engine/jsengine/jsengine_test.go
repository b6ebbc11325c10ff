package jsengine_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type nodeOpts struct {
	url, prefix string
	c           enginetest.Config
	ttl         time.Duration
}

// twoNodes starts two nodes with the same options (on one NATS, with one
// prefix, when o says so): two gateways sharing a JetStream.
func twoNodes(t testing.TB, o nodeOpts) (a, b *jsengine.Engine) {
	t.Helper()
	return newNode(t, o), newNode(t, o)
}

func newNode(t testing.TB, o nodeOpts) *jsengine.Engine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := jsengine.New(ctx, jsengine.Options{
		URL: o.url, Prefix: o.prefix,
		Clock: o.c.Clock, Defaults: o.c.Defaults, Strict: o.c.Strict, Policy: o.c.Policy,
		MemberTTL: o.ttl,
	})
	if err != nil {
		t.Fatalf("jsengine.New: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := e.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

func TestConformance(t *testing.T) {
	url := natstest.URL(t)
	enginetest.Run(t, enginetest.Features{FakeClock: true, Timeout: 10 * time.Second}, func(t *testing.T, c enginetest.Config) engine.Engine {
		return newNode(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: c})
	})
}

// tailObs records what an observer sees; safe for concurrent use.
type tailObs struct {
	mu      sync.Mutex
	recs    []*engine.Record
	deleted []string
}

func (o *tailObs) Appended(r *engine.Record) {
	o.mu.Lock()
	o.recs = append(o.recs, r)
	o.mu.Unlock()
}

func (o *tailObs) TopicDeleted(topic string) {
	o.mu.Lock()
	o.deleted = append(o.deleted, topic)
	o.mu.Unlock()
}

func (o *tailObs) snapshot() ([]*engine.Record, []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*engine.Record(nil), o.recs...), append([]string(nil), o.deleted...)
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitUntilFor(t, what, 15*time.Second, cond)
}

// waitUntilFor is waitUntil with its own bound.
func waitUntilFor(t *testing.T, what string, bound time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTwoNodesTail: appends racing on two nodes get gap-free offsets, and
// every node's observers see every append exactly once, in offset order.
func TestTwoNodesTail(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	a, b := twoNodes(t, nodeOpts{url: url, prefix: prefix})
	if a.Epoch() == "" || a.Epoch() != b.Epoch() {
		t.Errorf("epochs %q and %q: want one non-empty epoch per stream", a.Epoch(), b.Epoch())
	}
	ctx := context.Background()
	const topic, parts, each = "tail.two", 2, 60
	if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: parts, Partitioner: engine.RoundRobin}); err != nil {
		t.Fatal(err)
	}
	obsA, obsB := &tailObs{}, &tailObs{}
	defer a.Watch(obsA)()
	defer b.Watch(obsB)()
	var wg sync.WaitGroup
	for _, e := range []*jsengine.Engine{a, b} {
		wg.Go(func() {
			for i := range each {
				if _, err := e.Append(ctx, engine.Message{Topic: topic, Data: fmt.Appendf(nil, "%d", i)}); err != nil {
					t.Errorf("Append: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	for name, o := range map[string]*tailObs{"a": obsA, "b": obsB} {
		waitUntil(t, "node "+name+" to observe every append", func() bool {
			recs, _ := o.snapshot()
			return len(recs) >= 2*each
		})
		recs, _ := o.snapshot()
		if len(recs) != 2*each {
			t.Fatalf("node %s observed %d records, want %d", name, len(recs), 2*each)
		}
		next := make([]int64, parts)
		for _, r := range recs {
			if r.Offset != next[r.Partition] {
				t.Fatalf("node %s: %s/%d@%d where offset %d was due", name, r.Topic, r.Partition, r.Offset, next[r.Partition])
			}
			next[r.Partition]++
		}
	}
	if err := b.DeleteTopic(ctx, topic); err != nil {
		t.Fatal(err)
	}
	for name, o := range map[string]*tailObs{"a": obsA, "b": obsB} {
		waitUntil(t, "node "+name+" to hear of the delete", func() bool {
			_, del := o.snapshot()
			return len(del) == 1 && del[0] == topic
		})
	}
}

// collector gathers group deliveries from consumers on several nodes; each
// consumer acks through its own node from its own goroutine.
type collector struct {
	t    *testing.T
	done chan struct{}
	wg   sync.WaitGroup

	mu     sync.Mutex
	got    map[engine.Position][]string // deliveries per record, by member
	acked  map[engine.Position]string
	holdBy string // member that stops acking ("" none)
}

func newCollector(t *testing.T) *collector {
	c := &collector{t: t, done: make(chan struct{}), got: map[engine.Position][]string{}, acked: map[engine.Position]string{}}
	t.Cleanup(func() {
		close(c.done)
		c.wg.Wait()
	})
	return c
}

type groupConsumer struct {
	c      *collector
	member string
	q      chan engine.Delivery
}

func (gc *groupConsumer) Deliver(d engine.Delivery) {
	select {
	case gc.q <- d:
	case <-gc.c.done:
	}
}

func (*groupConsumer) Skipped(string, string, int, int64, int64) {}

// consumer returns a Consumer for member on e; it acks what it gets
// unless the collector holds that member.
func (c *collector) consumer(e *jsengine.Engine, member string) engine.Consumer {
	gc := &groupConsumer{c: c, member: member, q: make(chan engine.Delivery, 4096)}
	c.wg.Go(func() {
		for {
			select {
			case <-c.done:
				return
			case d := <-gc.q:
				pos := engine.Position{Topic: d.Record.Topic, Partition: d.Record.Partition, Offset: d.Record.Offset}
				c.mu.Lock()
				c.got[pos] = append(c.got[pos], member)
				hold := c.holdBy == member
				c.mu.Unlock()
				if hold {
					continue
				}
				if err := e.Ack(context.Background(), d.Group, "", pos); err != nil {
					c.t.Errorf("%s: Ack %v: %v", member, pos, err)
					continue
				}
				c.mu.Lock()
				c.acked[pos] = member
				c.mu.Unlock()
			}
		}
	})
	return gc
}

func (c *collector) ackedCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.acked)
}

func waitMembers(t *testing.T, group string, want []string, nodes ...*jsengine.Engine) {
	t.Helper()
	for i, e := range nodes {
		waitUntil(t, fmt.Sprintf("node %d to see members %v", i, want), func() bool {
			info, err := e.Group(context.Background(), group)
			if err != nil || len(info.Members) != len(want) {
				return false
			}
			for j, m := range info.Members {
				if m.ID != want[j] {
					return false
				}
			}
			for _, p := range info.Partitions {
				if p.Member == "" {
					return false
				}
			}
			return true
		})
	}
}

// groupOnTwoNodes starts two nodes sharing a prefix, creates topic with
// parts round-robin partitions, and joins member m1 of group on a and m2
// on b, both reporting to the returned collector; it returns once both
// nodes see both members.
func groupOnTwoNodes(t *testing.T, topic, group string, parts int) (a, b *jsengine.Engine, c *collector) {
	t.Helper()
	ctx := context.Background()
	url := natstest.URL(t)
	a, b = twoNodes(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url)})
	if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: parts, Partitioner: engine.RoundRobin}); err != nil {
		t.Fatal(err)
	}
	c = newCollector(t)
	if _, err := a.Join(ctx, engine.JoinRequest{Group: group, Pattern: topic, Member: "m1"}, c.consumer(a, "m1")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Join(ctx, engine.JoinRequest{Group: group, Pattern: topic, Member: "m2"}, c.consumer(b, "m2")); err != nil {
		t.Fatal(err)
	}
	waitMembers(t, group, []string{"m1", "m2"}, a, b)
	return a, b, c
}

// TestTwoNodesGroupShares: members of one group on two nodes share the
// partitions; every record goes to exactly one member.
func TestTwoNodesGroupShares(t *testing.T) {
	ctx := context.Background()
	const topic, group, parts, n = "share.two", "workers", 4, 80
	a, b, c := groupOnTwoNodes(t, topic, group, parts)
	for i := range n {
		e := a
		if i%2 == 1 {
			e = b
		}
		if _, err := e.Append(ctx, engine.Message{Topic: topic, Data: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "every record acked", func() bool { return c.ackedCount() == n })
	c.mu.Lock()
	owner := map[int]string{}
	used := map[string]int{}
	for pos, ms := range c.got {
		if len(ms) != 1 {
			t.Errorf("%v delivered %d times (%v), want once", pos, len(ms), ms)
		}
		if o, ok := owner[pos.Partition]; ok && o != ms[0] {
			t.Errorf("partition %d went to both %s and %s", pos.Partition, o, ms[0])
		}
		owner[pos.Partition] = ms[0]
		used[ms[0]]++
	}
	c.mu.Unlock()
	if used["m1"] == 0 || used["m2"] == 0 {
		t.Errorf("work split %v, want both members used", used)
	}
	// Positions reach the other node through the group bucket.
	for i, e := range []*jsengine.Engine{a, b} {
		waitUntil(t, fmt.Sprintf("node %d to see every partition committed", i), func() bool {
			info, err := e.Group(ctx, group)
			if err != nil {
				return false
			}
			for _, p := range info.Partitions {
				if p.Committed != n/parts || p.Lag != 0 {
					return false
				}
			}
			return true
		})
	}
}

// TestNodeCloseHandsOver: when a node closes, its partitions move to the
// other node's member, and records it held unacked are delivered again.
func TestNodeCloseHandsOver(t *testing.T) {
	ctx := context.Background()
	const topic, group, parts = "handover", "workers", 2
	a, b, c := groupOnTwoNodes(t, topic, group, parts)
	c.mu.Lock()
	c.holdBy = "m1" // m1 takes its first record and never acks it
	c.mu.Unlock()
	for i := range 10 {
		if _, err := b.Append(ctx, engine.Message{Topic: topic, Data: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "m1 to hold a record and m2 to ack its partition", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		held := 0
		for _, ms := range c.got {
			if ms[0] == "m1" {
				held++
			}
		}
		return held == 1 && len(c.acked) == 5
	})
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	waitMembers(t, group, []string{"m2"}, b)
	for i := range 10 {
		if _, err := b.Append(ctx, engine.Message{Topic: topic, Data: fmt.Appendf(nil, "late %d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	waitUntil(t, "m2 to ack every record", func() bool { return c.ackedCount() == 20 })
	c.mu.Lock()
	defer c.mu.Unlock()
	for pos, m := range c.acked {
		if m != "m2" {
			t.Errorf("%v acked by %s, want m2 (m1 never acks)", pos, m)
		}
	}
	info, err := b.Group(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range info.Partitions {
		if p.Member != "m2" || p.Committed != 10 || p.Lag != 0 {
			t.Errorf("partition %+v: want m2, committed 10, no lag", p)
		}
	}
}

func TestUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = jsengine.New(ctx, jsengine.Options{URL: "nats://" + addr})
	if !errors.Is(err, engine.ErrUnavailable) {
		t.Errorf("New without a server: %v, want ErrUnavailable", err)
	}
	_, err = jsengine.New(ctx, jsengine.Options{URL: "nats://" + addr, Prefix: "bad.prefix"})
	if !errors.Is(err, engine.ErrInvalidConfig) {
		t.Errorf("New with a dotted prefix: %v, want ErrInvalidConfig", err)
	}
}

// TestOutage stops the NATS server under two engines and starts it again on
// the same port and store. While it is down every call that needs NATS
// fails at once with ErrUnavailable, and nothing refused is stored later;
// once it is back the engines reconnect by themselves: appends work, the
// other node's tail and topic watcher resume, and a group delivers again.
func TestOutage(t *testing.T) {
	ns := natstest.NewServer(t)
	a, b := twoNodes(t, nodeOpts{url: ns.URL(), prefix: "outage"})
	obs := &tailObs{}
	defer b.Watch(obs)()
	ctx := context.Background()
	if _, err := a.Append(ctx, engine.Message{Topic: "o", Data: []byte(`0`)}); err != nil {
		t.Fatal(err)
	}
	gc := newCollector(t)
	if _, err := b.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "o", Member: "m"}, gc.consumer(b, "m")); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the first record on b", func() bool {
		recs, _ := obs.snapshot()
		return len(recs) == 1 && gc.ackedCount() == 1
	})

	ns.Stop()
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"Append", func(ctx context.Context) error {
			_, err := a.Append(ctx, engine.Message{Topic: "o", Data: []byte(`"refused"`)})
			return err
		}},
		{"Append new topic", func(ctx context.Context) error {
			_, err := a.Append(ctx, engine.Message{Topic: "other", Data: []byte(`"refused"`)})
			return err
		}},
		{"Topics", func(ctx context.Context) error { _, err := b.Topics(ctx); return err }},
		{"Topic", func(ctx context.Context) error { _, err := b.Topic(ctx, "o"); return err }},
		{"Read", func(ctx context.Context) error { _, _, err := b.Read(ctx, "o", 0, 0, 10); return err }},
		{"Resolve", func(ctx context.Context) error {
			_, err := b.Resolve(ctx, "o", 0, engine.Start{Kind: engine.StartEarliest})
			return err
		}},
		{"CreateTopic", func(ctx context.Context) error {
			_, err := a.CreateTopic(ctx, engine.TopicConfig{Name: "new"})
			return err
		}},
		{"Join", func(ctx context.Context) error {
			_, err := a.Join(ctx, engine.JoinRequest{Group: "g2", Pattern: "o"}, gc.consumer(a, "x"))
			return err
		}},
		{"DeadLetters", func(ctx context.Context) error { _, err := a.DeadLetters(ctx, engine.DeadLetterFilter{}); return err }},
	}
	for _, tt := range calls {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			err := tt.call(ctx)
			if !errors.Is(err, engine.ErrUnavailable) {
				t.Errorf("during the outage: %v, want ErrUnavailable", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("failed after %v, want at once", d)
			}
		})
	}

	ns.Start()
	// An append in flight when the reconnected connection drops again may
	// be stored although it failed ("connection to NATS lost"): its outcome
	// is unknown, so the retries carry a msg_id, as a client's should.
	waitUntil(t, "an append after the outage", func() bool {
		_, err := a.Append(ctx, engine.Message{Topic: "o", Data: []byte(`1`), MsgID: "after-outage"})
		return err == nil
	})
	// A member whose liveness key expired during the outage rejoins on its
	// next heartbeat and may wait out the holder's member TTL (10 s) before
	// it claims the partition again, so this wait is longer than the rest.
	waitUntilFor(t, "b's tail and group resume", 30*time.Second, func() bool {
		recs, _ := obs.snapshot()
		return len(recs) == 2 && gc.ackedCount() == 2
	})
	recs, _ := obs.snapshot()
	for i, r := range recs {
		if r.Offset != int64(i) || string(r.Data) != strconv.Itoa(i) {
			t.Errorf("record %d: offset %d data %s; nothing refused may be stored", i, r.Offset, r.Data)
		}
	}
	if _, err := b.Topic(ctx, "other"); !errors.Is(err, engine.ErrUnknownTopic) {
		t.Errorf("topic of a refused append: %v, want ErrUnknownTopic", err)
	}
	if err := a.DeleteTopic(ctx, "o"); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	waitUntil(t, "b's topic watcher resumes", func() bool {
		_, deleted := obs.snapshot()
		return slices.Contains(deleted, "o")
	})
	// The client library alone would notice the lost watcher only after
	// two missed idle heartbeats, 10 to 20 s.
	if d := time.Since(deleted); d > 5*time.Second {
		t.Errorf("b saw the delete %v after it, want the watcher resumed on reconnect", d)
	}
}
