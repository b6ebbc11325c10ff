package jsengine_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// manualConsumer hands a group member's deliveries to the test, which
// settles them itself.
type manualConsumer struct{ q chan engine.Delivery }

func newManual() *manualConsumer { return &manualConsumer{q: make(chan engine.Delivery, 1024)} }

func (c *manualConsumer) Deliver(d engine.Delivery) {
	select {
	case c.q <- d:
	default: // the tests bound what they deliver well below the queue
	}
}

func (*manualConsumer) Skipped(string, string, int, int64, int64) {}

// next returns the next delivery, failing the test after bound.
func (c *manualConsumer) next(t *testing.T, bound time.Duration) engine.Delivery {
	t.Helper()
	select {
	case d := <-c.q:
		return d
	case <-time.After(bound):
		t.Fatal("timed out waiting for a delivery")
		return engine.Delivery{}
	}
}

// appendN appends n records "r" to topic.
func appendN(t *testing.T, ctx context.Context, e *jsengine.Engine, topic string, n int) {
	t.Helper()
	for range n {
		if _, err := e.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"r"`)}); err != nil {
			t.Fatal(err)
		}
	}
}

// ackNext acks the next n deliveries m receives, as member of group.
func ackNext(t *testing.T, ctx context.Context, e *jsengine.Engine, group, member string, m *manualConsumer, n int) {
	t.Helper()
	for range n {
		if err := e.Ack(ctx, group, member, posOf(m.next(t, 20*time.Second).Record)); err != nil {
			t.Fatal(err)
		}
	}
}

// joinManual joins member to group on pattern with a manual consumer.
func joinManual(t *testing.T, ctx context.Context, e *jsengine.Engine, group, pattern, member string) *manualConsumer {
	t.Helper()
	m := newManual()
	if _, err := e.Join(ctx, engine.JoinRequest{Group: group, Pattern: pattern, Member: member}, m); err != nil {
		t.Fatal(err)
	}
	return m
}

func posOf(r *engine.Record) engine.Position {
	return engine.Position{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
}

// TestDeadLetterNotStoredNotCommitted: a record nacked on its last attempt
// while NATS is down has a dead letter that cannot be stored; the group
// must not commit past it. Once NATS is back the letter is stored and only
// then does the committed offset move on.
func TestDeadLetterNotStoredNotCommitted(t *testing.T) {
	ns := natstest.NewServer(t)
	policy := engine.GroupPolicy{MaxAttempts: 1, BackoffMin: 20 * time.Millisecond, BackoffMax: 100 * time.Millisecond}
	e := newNode(t, nodeOpts{url: ns.URL(), prefix: "dlout", c: enginetest.Config{Policy: policy}})
	ctx := context.Background()
	for _, data := range []string{`"poison"`, `"fine"`} {
		if _, err := e.Append(ctx, engine.Message{Topic: "dl", Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	mc := joinManual(t, ctx, e, "g", "dl", "m")
	d := mc.next(t, 10*time.Second)
	if d.Record.Offset != 0 {
		t.Fatalf("first delivery at offset %d, want 0", d.Record.Offset)
	}

	ns.Stop()
	if err := e.Nack(ctx, "g", "", posOf(d.Record), "boom"); err != nil {
		t.Fatalf("Nack during the outage: %v", err)
	}
	info, err := e.Group(ctx, "g")
	if err != nil {
		t.Fatalf("Group during the outage: %v", err)
	}
	if p := info.Partitions[0]; p.Committed != 0 {
		t.Fatalf("committed %d while the dead letter of offset 0 is not stored, want 0", p.Committed)
	}
	select {
	case d := <-mc.q:
		t.Fatalf("delivered %v before the dead letter of offset 0 was stored", posOf(d.Record))
	default:
	}

	ns.Start()
	d = mc.next(t, 20*time.Second)
	if d.Record.Offset != 1 {
		t.Fatalf("after NATS is back: delivery at offset %d, want 1", d.Record.Offset)
	}
	dls, err := e.DeadLetters(ctx, engine.DeadLetterFilter{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Record.Offset != 0 || dls[0].Error != "boom" {
		t.Fatalf("dead letters %+v, want offset 0 with error boom, stored once", dls)
	}
}

// TestMsgIDUncertainAppend: publishes with a MsgID whose deadlines end
// while the publish is in flight, each retried with the same MsgID until
// it succeeds (on the same node for half of them, on another node for the
// rest), store every MsgID exactly once, and the retry reports the stored
// record's position.
func TestMsgIDUncertainAppend(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	e := newNode(t, nodeOpts{url: url, prefix: prefix})
	other := newNode(t, nodeOpts{url: url, prefix: prefix})
	ctx := context.Background()
	const topic, parts, workers, each = "idem", 3, 6, 50
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: parts, Partitioner: engine.RoundRobin}); err != nil {
		t.Fatal(err)
	}
	type result struct {
		a     engine.Appended
		tries int
	}
	results := make([][]result, workers)
	var wg sync.WaitGroup
	for w := range workers {
		results[w] = make([]result, each)
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("w%d-%d", w, i)
				m := engine.Message{Topic: topic, MsgID: id, Data: []byte(strconv.Quote(id))}
				// Deadlines from 20 µs to 4 ms: they end before, during or
				// just after the publish's round trip.
				d := time.Duration(20+(i*397+w*113)%4000) * time.Microsecond
				cctx, cancel := context.WithTimeout(ctx, d)
				a, err := e.Append(cctx, m)
				cancel()
				tries := 1
				retry := e
				if w%2 == 1 {
					retry = other
				}
				for err != nil && tries < 50 {
					tries++
					// A retry never waits on the failed try's claim.
					cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
					a, err = retry.Append(cctx, m)
					cancel()
				}
				if err != nil {
					t.Errorf("%s: still failing after %d tries: %v", id, tries, err)
					return
				}
				results[w][i] = result{a, tries}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	stored := map[string][]engine.Position{}
	for p := range parts {
		recs, _, err := e.Read(ctx, topic, p, 0, workers*each*2)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			id, _ := strconv.Unquote(string(r.Data))
			stored[id] = append(stored[id], posOf(r))
		}
	}
	retried, dups := 0, 0
	for w := range workers {
		for i, res := range results[w] {
			id := fmt.Sprintf("w%d-%d", w, i)
			if res.tries > 1 {
				retried++
			}
			if res.a.Duplicate {
				dups++ // an earlier try landed although it failed
			}
			got := stored[id]
			if len(got) != 1 {
				t.Errorf("%s stored %d times (%v), want once", id, len(got), got)
				continue
			}
			if want := (engine.Position{Topic: topic, Partition: res.a.Partition, Offset: res.a.Offset}); got[0] != want {
				t.Errorf("%s: Append reported %v (duplicate %v), stored at %v", id, want, res.a.Duplicate, got[0])
			}
		}
	}
	t.Logf("%d of %d publishes needed a retry; %d of them had landed (duplicate)", retried, workers*each, dups)
	if dups == 0 {
		t.Errorf("no retry found its earlier try stored: the deadlines did not land mid-flight")
	}
}

// newConnNode starts an engine on a connection the test owns: closing it
// makes the node die as a crashed process would, without handing anything
// over (its live keys expire after ttl).
func newConnNode(t testing.TB, url, prefix string, policy engine.GroupPolicy, ttl time.Duration) (*jsengine.Engine, *nats.Conn) {
	t.Helper()
	nc, err := nats.Connect(url, nats.ReconnectBufSize(-1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := jsengine.New(ctx, jsengine.Options{Conn: nc, Prefix: prefix, Policy: policy, MemberTTL: ttl})
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
	return e, nc
}

// TestAttemptsSurviveTakeover: a record whose holder dies with it leased
// is redelivered by the next node with its attempt count continued, and
// once every allowed attempt died with its node it goes to the dead
// letters instead of being delivered again.
func TestAttemptsSurviveTakeover(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	policy := engine.GroupPolicy{MaxAttempts: 2, AckTimeout: time.Minute}
	const ttl = time.Second
	a, ncA := newConnNode(t, url, prefix, policy, ttl)
	b, ncB := newConnNode(t, url, prefix, policy, ttl)
	c, _ := newConnNode(t, url, prefix, policy, ttl)
	ctx := context.Background()
	if _, err := c.CreateTopic(ctx, engine.TopicConfig{Name: "crash", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	cons := map[string]*manualConsumer{}
	for id, e := range map[string]*jsengine.Engine{"m1": a, "m2": b, "m3": c} {
		cons[id] = newManual()
		if _, err := e.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "crash", Member: id}, cons[id]); err != nil {
			t.Fatal(err)
		}
	}
	waitMembers(t, "g", []string{"m1", "m2", "m3"}, a, b, c)
	for _, data := range []string{`"poison"`, `"next"`} {
		if _, err := c.Append(ctx, engine.Message{Topic: "crash", Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	// The partition goes to m1 (the lowest ID); each node holding the
	// poison record dies with it.
	for i, n := range []struct {
		member string
		nc     *nats.Conn
	}{{"m1", ncA}, {"m2", ncB}} {
		d := cons[n.member].next(t, 20*time.Second)
		if d.Record.Offset != 0 || d.Attempt != i+1 {
			t.Fatalf("%s got offset %d attempt %d, want offset 0 attempt %d", n.member, d.Record.Offset, d.Attempt, i+1)
		}
		n.nc.Close()
	}
	d := cons["m3"].next(t, 20*time.Second)
	if d.Record.Offset != 1 || d.Attempt != 1 {
		t.Fatalf("m3 got offset %d attempt %d, want the poison record dead-lettered and offset 1 attempt 1", d.Record.Offset, d.Attempt)
	}
	dls, err := c.DeadLetters(ctx, engine.DeadLetterFilter{Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 || dls[0].Record.Offset != 0 || dls[0].Attempts != 2 {
		t.Fatalf("dead letters %+v, want offset 0 after 2 attempts", dls)
	}
}

// TestSlowNATSDoesNotStall: while NATS stops answering (every byte the
// node sends is held), a dead letter being published must not hold up an
// ack of another partition, and Topics answers from what it loaded; once
// NATS answers again the letter is stored and both partitions commit.
func TestSlowNATSDoesNotStall(t *testing.T) {
	url := natstest.URL(t)
	px := newLinkProxy(t, url)
	policy := engine.GroupPolicy{MaxAttempts: 1, AckTimeout: time.Minute, BackoffMin: 50 * time.Millisecond}
	e := newNode(t, nodeOpts{url: px.URL(), prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: policy}})
	ctx := context.Background()
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: "slow", Partitions: 2, Partitioner: engine.RoundRobin}); err != nil {
		t.Fatal(err)
	}
	mc := joinManual(t, ctx, e, "g", "slow", "m")
	for _, data := range []string{`"poison"`, `"fine"`} {
		if _, err := e.Append(ctx, engine.Message{Topic: "slow", Data: []byte(data)}); err != nil {
			t.Fatal(err)
		}
	}
	byPart := map[int]engine.Delivery{}
	for range 2 {
		d := mc.next(t, 10*time.Second)
		byPart[d.Record.Partition] = d
	}
	if _, err := e.Topics(ctx); err != nil {
		t.Fatal(err)
	}

	px.Stall()
	nacked := make(chan error, 1)
	go func() { nacked <- e.Nack(ctx, "g", "m", posOf(byPart[0].Record), "boom") }() // its letter's publish stalls
	acked := make(chan error, 1)
	go func() { acked <- e.Ack(ctx, "g", "m", posOf(byPart[1].Record)) }()
	// The stalled publish would give up after 5 s; an ack that waits for
	// it was blocked behind I/O.
	for _, c := range []struct {
		name string
		ch   chan error
	}{{"Ack", acked}, {"Nack", nacked}} {
		name, ch := c.name, c.ch
		select {
		case err := <-ch:
			if err != nil {
				t.Errorf("%s while NATS stalls: %v", name, err)
			}
		case <-time.After(3 * time.Second):
			px.Resume()
			t.Fatalf("%s did not return while a dead letter's publish was stalled", name)
		}
	}
	tctx, cancel := context.WithTimeout(ctx, time.Second)
	ts, err := e.Topics(tctx)
	cancel()
	if err != nil || len(ts) != 1 || ts[0].Parts[0].Next != 1 || ts[0].Parts[1].Next != 1 {
		t.Errorf("Topics while NATS stalls: %+v, %v; want the listing loaded before", ts, err)
	}
	px.Resume()

	waitUntil(t, "the dead letter stored and both partitions committed", func() bool {
		dls, err := e.DeadLetters(ctx, engine.DeadLetterFilter{Group: "g"})
		if err != nil || len(dls) != 1 {
			return false
		}
		info, err := e.Group(ctx, "g")
		return err == nil && info.Partitions[0].Committed == 1 && info.Partitions[1].Committed == 1
	})
}

// ackAll acks every delivery on e until want records were acked or
// bound passes; it returns how many it acked.
func ackAll(t *testing.T, e *jsengine.Engine, mc *manualConsumer, group, member string, want int, bound time.Duration) int {
	t.Helper()
	deadline := time.After(bound)
	for n := 0; n < want; n++ {
		select {
		case d := <-mc.q:
			if err := e.Ack(context.Background(), group, member, posOf(d.Record)); err != nil {
				t.Fatalf("Ack %v: %v", posOf(d.Record), err)
			}
		case <-deadline:
			return n
		}
	}
	return want
}

// TestCatchUpRoundTrips: a group reading a backlog this node's tail never
// saw fetches it from NATS; the search for where to start is bounded by
// the sequence the node knows is last, and later fetches continue from
// where the previous one ended. Counted in messages the node sends per
// record consumed: one direct get, one position write, and little else.
func TestCatchUpRoundTrips(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	w := newNode(t, nodeOpts{url: url, prefix: prefix})
	ctx := context.Background()
	const n = 400
	for i := range n {
		if _, err := w.Append(ctx, engine.Message{Topic: "backlog", Data: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	r, nc := newConnNode(t, url, prefix, engine.GroupPolicy{}, 0)
	mc := joinManual(t, ctx, r, "g", "backlog", "m")
	if got := ackAll(t, r, mc, "g", "m", 1, 10*time.Second); got != 1 {
		t.Fatal("no first delivery")
	}
	before := nc.Stats().OutMsgs
	if got := ackAll(t, r, mc, "g", "m", n-1, 30*time.Second); got != n-1 {
		t.Fatalf("acked %d of %d records", got, n-1)
	}
	sent := nc.Stats().OutMsgs - before
	perRecord := float64(sent) / float64(n-1)
	t.Logf("%d messages sent for %d records: %.2f per record", sent, n-1, perRecord)
	// A search per fetch of 64 records with no known last sequence costs
	// about 63 more round trips each, one per record.
	if perRecord > 2.5 {
		t.Errorf("%.2f messages per record caught up, want at most 2.5", perRecord)
	}
}

// stallObs is an observer whose TopicDeleted for one topic waits until
// released, holding up the topic watcher that calls it (as a busy watcher
// lags behind the tail); everything else it records.
type stallObs struct {
	tailObs
	topic   string
	release chan struct{}
}

func (o *stallObs) TopicDeleted(topic string) {
	if topic == o.topic {
		<-o.release
	}
	o.tailObs.TopicDeleted(topic)
}

// TestRecreatedTopicReachesTail: a topic deleted and created again on
// another node, with records appended to the new incarnation before this
// node's topic watcher has caught up, must not lose those records in this
// node's tail; the delete is announced before the new records.
func TestRecreatedTopicReachesTail(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	a, b := twoNodes(t, nodeOpts{url: url, prefix: prefix})
	ctx := context.Background()
	obs := &stallObs{topic: "blocker", release: make(chan struct{})}
	released := false
	release := func() {
		if !released {
			released = true
			close(obs.release)
		}
	}
	defer release()
	defer b.Watch(obs)()
	for _, name := range []string{"blocker", "again", "sentinel"} {
		if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Append(ctx, engine.Message{Topic: "again", Data: []byte(`"old"`)}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "b to know the topics", func() bool {
		ts, err := b.Topics(ctx)
		return err == nil && len(ts) == 3
	})
	waitUntil(t, "b's tail to see the old record", func() bool {
		recs, _ := obs.snapshot()
		return len(recs) == 1
	})

	if err := a.DeleteTopic(ctx, "blocker"); err != nil { // b's watcher stalls on it
		t.Fatal(err)
	}
	if err := a.DeleteTopic(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: "again"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, engine.Message{Topic: "again", Data: []byte(`"new"`)}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs, _ := obs.snapshot()
		if len(recs) == 2 {
			if r := recs[1]; r.Topic != "again" || r.Offset != 0 || string(r.Data) != `"new"` {
				t.Errorf("b's tail saw %s@%d %s, want again@0 \"new\"", r.Topic, r.Offset, r.Data)
			}
			break
		}
		if time.Now().After(deadline) {
			release()
			t.Fatal("b's tail never announced the record of the re-created topic")
		}
		time.Sleep(5 * time.Millisecond)
	}
	_, deleted := obs.snapshot()
	if !slices.Equal(deleted, []string{"again"}) {
		t.Errorf("deletes announced before the new record: %v, want [again]", deleted)
	}
	release()
	if err := a.DeleteTopic(ctx, "sentinel"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the watcher to catch up", func() bool {
		_, deleted := obs.snapshot()
		return slices.Contains(deleted, "sentinel")
	})
	// The watcher reached the old delete after the new incarnation: it is
	// not announced a second time.
	if _, deleted := obs.snapshot(); !slices.Equal(deleted, []string{"again", "blocker", "sentinel"}) {
		t.Errorf("deletes announced: %v, want [again blocker sentinel]", deleted)
	}
}

// TestAckOnAnyNode: three nodes, a member on each; every delivery is
// settled through another node than the one that delivered it, as behind
// a load balancer. Acks and nacks reach the holder: every record is acked
// once, a nacked one comes back with its next attempt, and positions
// commit.
func TestAckOnAnyNode(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	policy := engine.GroupPolicy{BackoffMin: 10 * time.Millisecond, BackoffMax: 10 * time.Millisecond}
	nodes := []*jsengine.Engine{
		newNode(t, nodeOpts{url: url, prefix: prefix, c: enginetest.Config{Policy: policy}}),
		newNode(t, nodeOpts{url: url, prefix: prefix, c: enginetest.Config{Policy: policy}}),
		newNode(t, nodeOpts{url: url, prefix: prefix, c: enginetest.Config{Policy: policy}}),
	}
	ctx := context.Background()
	const topic, parts, n = "anynode", 3, 30
	if _, err := nodes[0].CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: parts, Partitioner: engine.RoundRobin}); err != nil {
		t.Fatal(err)
	}
	cons := make([]*manualConsumer, len(nodes))
	ids := []string{"m0", "m1", "m2"}
	for i, e := range nodes {
		cons[i] = newManual()
		if _, err := e.Join(ctx, engine.JoinRequest{Group: "g", Pattern: topic, Member: ids[i]}, cons[i]); err != nil {
			t.Fatal(err)
		}
	}
	waitMembers(t, "g", ids, nodes...)
	for i := range n {
		if _, err := nodes[i%3].Append(ctx, engine.Message{Topic: topic, Data: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	acked := map[engine.Position]int{}
	nacked := false
	deadline := time.After(30 * time.Second)
	for len(acked) < n {
		for i, mc := range cons {
			select {
			case d := <-mc.q:
				via := nodes[(i+1)%len(nodes)] // never the delivering node
				pos := posOf(d.Record)
				if !nacked && d.Attempt == 1 {
					nacked = true
					if err := via.Nack(ctx, "g", ids[i], pos, "retry elsewhere"); err != nil {
						t.Fatalf("Nack of %v (delivered by node %d) through node %d: %v", pos, i, (i+1)%3, err)
					}
					continue
				}
				if err := via.Ack(ctx, "g", ids[i], pos); err != nil {
					t.Fatalf("Ack of %v (delivered by node %d) through node %d: %v", pos, i, (i+1)%3, err)
				}
				acked[pos]++
				if d.Attempt != 1 && acked[pos] == 1 {
					t.Logf("%v acked on attempt %d", pos, d.Attempt)
				}
			case <-deadline:
				t.Fatalf("acked %d of %d records", len(acked), n)
			case <-time.After(time.Millisecond):
			}
		}
	}
	for pos, k := range acked {
		if k != 1 {
			t.Errorf("%v acked %d times", pos, k)
		}
	}
	// An ack for a record no one holds is still refused, wherever it goes.
	if err := nodes[1].Ack(ctx, "g", "m0", engine.Position{Topic: topic, Partition: 0, Offset: 0}); !errors.Is(err, engine.ErrNotInFlight) {
		t.Errorf("a second ack through another node: %v, want ErrNotInFlight", err)
	}
	waitUntil(t, "every partition committed", func() bool {
		info, err := nodes[0].Group(ctx, "g")
		if err != nil {
			return false
		}
		total := int64(0)
		for _, p := range info.Partitions {
			if p.Lag != 0 {
				return false
			}
			total += p.Committed
		}
		return total == n
	})
}

// TestQueueFullLettersAtTheCap: queue_full letters past DeadLetterLimit
// cost about one publish each, not a publish and a purge; the listing
// holds the newest DeadLetterLimit, and the eviction counter counts
// exactly the letters dropped to make room.
func TestQueueFullLettersAtTheCap(t *testing.T) {
	url := natstest.URL(t)
	const limit, n = 160, 400 // purged every limit/16 = 10 letters
	e, nc := newConnNode(t, url, natstest.Prefix(t, url), engine.GroupPolicy{DeadLetterLimit: limit}, 0)
	ctx := context.Background()
	add := func(i int) {
		t.Helper()
		err := e.AddDeadLetter(ctx, engine.DeadLetter{Reason: engine.ReasonQueueFull, Subscriber: fmt.Sprintf("s%d", i),
			Record: engine.Record{Topic: "qf", Offset: int64(i), Data: []byte("x")}})
		if err != nil {
			t.Fatalf("AddDeadLetter %d: %v", i, err)
		}
	}
	for i := range limit {
		add(i)
	}
	before := nc.Stats().OutMsgs
	for i := limit; i < n; i++ {
		add(i)
	}
	perLetter := float64(nc.Stats().OutMsgs-before) / float64(n-limit)
	t.Logf("%.2f messages sent per letter at the cap", perLetter)
	if perLetter > 1.3 {
		t.Errorf("%.2f messages per letter at the cap, want at most 1.3 (a publish, and a purge per batch)", perLetter)
	}
	dls, err := e.DeadLetters(ctx, engine.DeadLetterFilter{Reason: engine.ReasonQueueFull})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != limit || dls[0].Subscriber != fmt.Sprintf("s%d", n-limit) || dls[limit-1].Subscriber != fmt.Sprintf("s%d", n-1) {
		t.Fatalf("listing holds %d letters (%v ... ), want the newest %d", len(dls), dls[0].Subscriber, limit)
	}
	ev, ok := any(e).(interface{ EvictedDeadLetters() int64 })
	if !ok {
		t.Fatal("the engine counts no evicted letters")
	}
	if got := ev.EvictedDeadLetters(); got != n-limit {
		t.Errorf("EvictedDeadLetters = %d, want %d", got, n-limit)
	}
}
