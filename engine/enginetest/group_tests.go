package enginetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/engine"
)

// fastRetry is a policy whose retries need no fake clock.
var fastRetry = engine.GroupPolicy{BackoffMin: time.Millisecond, BackoffMax: 4 * time.Millisecond}

func testEveryGroup(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	topic := env.topic("all")
	env.create(engine.TopicConfig{Name: topic, Partitions: 3})
	sk, f := newSink(), newFlow(t)
	g1, g2 := env.group("g1"), env.group("g2")
	env.join(engine.JoinRequest{Group: g1, Pattern: topic, Member: "a"}, sk.consumer("g1/a"))
	env.join(engine.JoinRequest{Group: g2, Pattern: topic, Member: "b"}, sk.consumer("g2/b"))
	env.publish(topic, 30, func(i int) string { return fmt.Sprintf("k%d", i%7) })
	env.consume(sk, f, 60)
	for _, g := range []string{g1, g2} {
		n := 0
		for k := range f.seen {
			if len(k) > len(g) && k[:len(g)+1] == g+" " {
				n++
			}
		}
		if n != 30 {
			t.Errorf("group %s got %d records, want 30", g, n)
		}
		for _, p := range env.groupInfo(g).Partitions {
			if p.Committed != p.Next || p.Lag != 0 {
				t.Errorf("group %s partition %+v: want committed == next and no lag", g, p)
			}
		}
	}
	if extra := sk.pending(); len(extra) > 0 {
		t.Errorf("extra deliveries after every record was acked: %v", extra)
	}
}

func testOneMemberPerRecord(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	topic := env.topic("share")
	env.create(engine.TopicConfig{Name: topic, Partitions: 4, Partitioner: engine.RoundRobin})
	sk, f := newSink(), newFlow(t)
	g := env.group("g")
	for _, m := range []string{"m1", "m2", "m3"} {
		env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: m}, sk.consumer(m))
	}
	env.publish(topic, 40, nil)
	env.consume(sk, f, 40)
	if len(f.seen) != 40 {
		t.Fatalf("%d distinct records delivered, want 40", len(f.seen))
	}
	owner := map[int]string{}
	used := map[string]bool{}
	for k, m := range f.seen {
		var p int
		var off int64
		if _, err := fmt.Sscanf(k[len(g)+1+len(topic):], "/%d@%d", &p, &off); err != nil {
			t.Fatalf("bad key %q: %v", k, err)
		}
		if o, ok := owner[p]; ok && o != m {
			t.Errorf("partition %d delivered to both %s and %s without a rebalance", p, o, m)
		}
		owner[p] = m
		used[m] = true
	}
	if len(used) != 3 {
		t.Errorf("members used: %v, want all three to share 4 partitions", used)
	}
	info := env.groupInfo(g)
	if got := members(info); !slices.Equal(got, []string{"m1", "m2", "m3"}) {
		t.Errorf("members = %v, want [m1 m2 m3]", got)
	}
	for _, p := range info.Partitions {
		if p.Member != owner[p.Partition] || p.Committed != 10 || p.Next != 10 || p.InFlight != 0 {
			t.Errorf("partition %+v: want member %s, committed = next = 10, none in flight", p, owner[p.Partition])
		}
	}
	if extra := sk.pending(); len(extra) > 0 {
		t.Errorf("extra deliveries: %v", extra)
	}
}

func testStartLatest(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	a, b := env.topic("a"), env.topic("b")
	env.create(engine.TopicConfig{Name: a, Partitions: 1})
	env.publish(a, 3, nil)
	sk := newSink()
	latest := env.group("latest")
	env.join(engine.JoinRequest{Group: latest, Pattern: env.base + ".#", From: engine.Start{Kind: engine.StartLatest}, Member: "m"}, sk.consumer("m"))
	env.append(engine.Message{Topic: a, Data: []byte("new")})
	ev := sk.delivery(t, env.timeout)
	if ev.d.Record.Topic != a || ev.d.Record.Offset != 3 {
		t.Fatalf("first delivery to a latest group: %v, want %s offset 3", ev, a)
	}
	env.ack(ev)
	// A topic created after the group: everything appended to it is seen.
	env.append(engine.Message{Topic: b, Data: []byte("b0")})
	ev = sk.delivery(t, env.timeout)
	if ev.d.Record.Topic != b || ev.d.Record.Offset != 0 {
		t.Fatalf("delivery from a later topic: %v, want %s offset 0", ev, b)
	}
	env.ack(ev)

	// A default (earliest) group sees what was there before it.
	sk2, f := newSink(), newFlow(t)
	env.join(engine.JoinRequest{Group: env.group("earliest"), Pattern: env.base + ".#", Member: "m"}, sk2.consumer("m"))
	env.consume(sk2, f, 5)
	if len(f.seen) != 5 {
		t.Errorf("earliest group got %d records, want 5", len(f.seen))
	}
}

// oneMember makes a one-partition topic (suffix name) read by member m
// of group g: it returns the topic, the group and the sink of m's
// deliveries.
func (env *env) oneMember(name string) (topic, g string, sk *sink) {
	topic = env.topic(name)
	env.create(engine.TopicConfig{Name: topic, Partitions: 1})
	sk = newSink()
	g = env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m"}, sk.consumer("m"))
	return topic, g, sk
}

func testNack(t *testing.T, s *suite) {
	env := s.env(t, Config{Policy: fastRetry})
	topic, g, sk := env.oneMember("nack")
	env.publish(topic, 2, nil)
	ev := sk.delivery(t, env.timeout)
	if ev.d.Record.Offset != 0 || ev.d.Attempt != 1 || ev.d.Group != g {
		t.Fatalf("first delivery %v, want %s offset 0 attempt 1", ev, g)
	}
	env.nack(ev, "boom")
	ev = sk.delivery(t, env.timeout)
	if ev.d.Record.Offset != 0 || ev.d.Attempt != 2 {
		t.Fatalf("after nack got %v, want offset 0 again, attempt 2 (offset 1 must wait)", ev)
	}
	env.ack(ev)
	ev = sk.delivery(t, env.timeout)
	if ev.d.Record.Offset != 1 || ev.d.Attempt != 1 {
		t.Fatalf("after ack got %v, want offset 1 attempt 1", ev)
	}
	env.ack(ev)
	if p := env.groupInfo(g).Partitions[0]; p.Committed != 2 {
		t.Errorf("committed = %d, want 2", p.Committed)
	}
}

func testAckTimeout(t *testing.T, s *suite) {
	env := s.fakeEnv(t, Config{Policy: engine.GroupPolicy{AckTimeout: 10 * time.Second, BackoffMin: time.Second, BackoffMax: time.Second}})
	topic, g, sk := env.oneMember("timeout")
	env.publish(topic, 1, nil)
	first := sk.delivery(t, env.timeout)
	env.clock.Advance(9 * time.Second)
	if extra := sk.pending(); len(extra) > 0 {
		t.Fatalf("redelivered before the ack timeout: %v", extra)
	}
	env.clock.Advance(time.Second)
	if p := env.groupInfo(g).Partitions[0]; p.InFlight != 0 || p.Committed != 0 {
		t.Errorf("after the ack timeout: %+v, want nothing in flight, committed 0", p)
	}
	err := env.e.Ack(ctx(), g, "m", position(first.d.Record))
	wantErr(t, "Ack after the ack timeout", err, engine.ErrNotInFlight)
	if extra := sk.pending(); len(extra) > 0 {
		t.Fatalf("redelivered before the backoff passed: %v", extra)
	}
	env.clock.Advance(time.Second)
	ev := sk.delivery(t, env.timeout)
	if ev.d.Record.Offset != 0 || ev.d.Attempt != 2 {
		t.Fatalf("after the timeout got %v, want offset 0 attempt 2", ev)
	}
	env.ack(ev)
	if p := env.groupInfo(g).Partitions[0]; p.Committed != 1 {
		t.Errorf("committed = %d, want 1", p.Committed)
	}
}

func testDeadLetter(t *testing.T, s *suite) {
	policy := fastRetry
	policy.MaxAttempts = 3
	env := s.env(t, Config{Policy: policy})
	topic, g, sk := env.oneMember("dl")
	env.append(engine.Message{Topic: topic, Key: "k", Headers: map[string]string{"h": "v"}, Data: []byte("poison")})
	env.append(engine.Message{Topic: topic, Data: []byte("fine")})
	for attempt := 1; attempt <= 3; attempt++ {
		ev := sk.delivery(t, env.timeout)
		if ev.d.Record.Offset != 0 || ev.d.Attempt != attempt {
			t.Fatalf("got %v, want offset 0 attempt %d", ev, attempt)
		}
		env.nack(ev, fmt.Sprintf("boom-%d", attempt))
	}
	ev := sk.delivery(t, env.timeout)
	if ev.d.Record.Offset != 1 || ev.d.Attempt != 1 {
		t.Fatalf("after the last attempt got %v, want the partition to move on to offset 1", ev)
	}
	env.ack(ev)
	dls, err := env.e.DeadLetters(ctx(), engine.DeadLetterFilter{Group: g})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 1 {
		t.Fatalf("dead letters = %+v, want one", dls)
	}
	dl := dls[0]
	if dl.ID == "" || dl.Reason != engine.ReasonMaxAttempts || dl.Group != g || dl.Attempts != 3 ||
		dl.Error != "boom-3" || dl.Time.IsZero() || dl.Record.Offset != 0 || string(dl.Record.Data) != "poison" || dl.Record.Key != "k" {
		t.Errorf("dead letter = %+v", dl)
	}
	if dls, _ := env.e.DeadLetters(ctx(), engine.DeadLetterFilter{Group: g, Reason: engine.ReasonQueueFull}); len(dls) != 0 {
		t.Errorf("reason filter let through %+v", dls)
	}
	if p := env.groupInfo(g).Partitions[0]; p.Committed != 2 || p.Lag != 0 {
		t.Errorf("partition %+v, want committed 2, no lag", p)
	}
}

func testSeekOffset(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	topic, g, sk := env.oneMember("seek")
	env.publish(topic, 10, nil)
	env.consume(sk, newFlow(t), 10)

	if err := env.e.Seek(ctx(), g, topic, 0, engine.Start{Kind: engine.StartOffset, Offset: 3}); err != nil {
		t.Fatalf("Seek: %v", err)
	}
	f := newFlow(t)
	env.consume(sk, f, 7)
	for o := 3; o < 10; o++ {
		if _, ok := f.seen[fmt.Sprintf("%s %s/0@%d", g, topic, o)]; !ok {
			t.Errorf("offset %d not replayed after seeking to 3", o)
		}
	}
	// Every partition (partition < 0), and in-flight records are dropped.
	if err := env.e.Seek(ctx(), g, topic, -1, engine.Start{Kind: engine.StartEarliest}); err != nil {
		t.Fatalf("Seek all: %v", err)
	}
	ev := sk.delivery(t, env.timeout)
	if ev.d.Record.Offset != 0 {
		t.Fatalf("after seeking to earliest got %v, want offset 0", ev)
	}
	if err := env.e.Seek(ctx(), g, topic, 0, engine.Start{Kind: engine.StartOffset, Offset: 8}); err != nil {
		t.Fatal(err)
	}
	ev = sk.delivery(t, env.timeout)
	if ev.d.Record.Offset != 8 {
		t.Fatalf("after seeking to 8 while offset 0 was in flight got %v, want offset 8", ev)
	}
	err := env.e.Ack(ctx(), g, "m", engine.Position{Topic: topic, Partition: 0, Offset: 0})
	wantErr(t, "Ack of a record dropped by Seek", err, engine.ErrNotInFlight)
	env.ack(ev)
	wantErr(t, "Seek of an unknown group", env.e.Seek(ctx(), env.group("nope"), topic, 0, engine.Start{}), engine.ErrUnknownGroup)
}

func testSeekTime(t *testing.T, s *suite) {
	var env *env
	if s.f.FakeClock {
		env = s.fakeEnv(t, Config{})
	} else {
		env = s.env(t, Config{})
	}
	topic := env.topic("seektime")
	env.create(engine.TopicConfig{Name: topic, Partitions: 1})
	for i := range 10 {
		env.append(engine.Message{Topic: topic, Data: fmt.Appendf(nil, "%d", i)})
		if env.clock != nil {
			env.clock.Advance(time.Second)
		}
	}
	recs, _ := env.read(topic, 0, 0, 10)
	at := recs[6].Time
	want := int64(6)
	for _, r := range recs {
		if !r.Time.Before(at) {
			want = r.Offset
			break
		}
	}
	if env.clock != nil && want != 6 {
		t.Fatalf("records 5 and 6 share a time on a clock advanced between them")
	}
	sk := newSink()
	g := env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, From: engine.Start{Kind: engine.StartLatest}, Member: "m"}, sk.consumer("m"))
	if err := env.e.Seek(ctx(), g, topic, 0, engine.Start{Kind: engine.StartTime, Time: at}); err != nil {
		t.Fatalf("Seek: %v", err)
	}
	ev := sk.delivery(t, env.timeout)
	if ev.d.Record.Offset != want {
		t.Fatalf("after seeking to the time of offset 6 got %v, want offset %d (inclusive)", ev, want)
	}
	env.ack(ev)
}

func testRebalance(t *testing.T, s *suite) {
	const inFlight = 2
	env := s.env(t, Config{Policy: engine.GroupPolicy{MaxInFlight: inFlight}})
	topic := env.topic("rebalance")
	const parts = 4
	env.create(engine.TopicConfig{Name: topic, Partitions: parts, Partitioner: engine.RoundRobin})
	sk, f := newSink(), newFlowN(t, inFlight)
	g := env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m1"}, sk.consumer("m1"))
	env.publish(topic, 20, nil)
	// m1 holds the most it may of every partition while m2 joins: nothing
	// of a partition that moves may reach m2 until m1 has acked all it held.
	var held []event
	for range parts * inFlight {
		ev := sk.delivery(t, env.timeout)
		f.deliver(ev)
		held = append(held, ev)
	}
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m2"}, sk.consumer("m2"))
	for _, ev := range held {
		env.drain(sk, f)
		env.ack(ev)
		f.acked(ev)
	}
	env.consume(sk, f, 20-len(f.seen))
	if extra := sk.pending(); len(extra) > 0 {
		t.Fatalf("extra deliveries: %v", extra)
	}
	info := env.groupInfo(g)
	assigned := map[string]int{}
	for _, p := range info.Partitions {
		assigned[p.Member]++
	}
	if assigned["m1"] == 0 || assigned["m2"] == 0 || assigned["m1"]+assigned["m2"] != parts {
		t.Errorf("after m2 joined: assignment %v, want 4 partitions over m1 and m2", assigned)
	}

	got := func(from, n int) map[string]int {
		counts := map[string]int{}
		for k, m := range f.seen {
			var p int
			var off int64
			fmt.Sscanf(k[len(g)+1+len(topic):], "/%d@%d", &p, &off)
			if off >= int64(from) && off < int64(from+n) {
				counts[m]++
			}
		}
		return counts
	}
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m3"}, sk.consumer("m3"))
	env.publish(topic, 20, nil) // offsets 5..9 of each partition
	env.consume(sk, f, 20)
	if c := got(5, 5); len(c) != 3 {
		t.Errorf("with three members the records went to %v, want all three", c)
	}
	if err := env.e.Leave(ctx(), g, "m1"); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	env.publish(topic, 20, nil) // offsets 10..14 of each partition
	env.consume(sk, f, 20)
	if c := got(10, 5); c["m1"] != 0 || c["m2"] == 0 || c["m3"] == 0 {
		t.Errorf("after m1 left the records went to %v, want m2 and m3 only", c)
	}
	if len(f.seen) != 60 {
		t.Errorf("%d distinct records delivered, want 60", len(f.seen))
	}
	info = env.groupInfo(g)
	if got := members(info); !slices.Equal(got, []string{"m2", "m3"}) {
		t.Errorf("members = %v, want [m2 m3]", got)
	}
	for _, p := range info.Partitions {
		if p.Committed != 15 || p.Lag != 0 || p.Member == "m1" || p.Member == "" {
			t.Errorf("partition %+v: want committed 15, no lag, assigned to m2 or m3", p)
		}
	}
	if extra := sk.pending(); len(extra) > 0 {
		t.Fatalf("extra deliveries: %v", extra)
	}
}

// leaseThenLeave makes a one-partition topic (suffix name) read by group
// g of members m1 and m2, publishes one record and makes the member it is
// delivered to leave: it returns the group, the sink, that first delivery
// and the other member, to which the record is owed again.
func (env *env) leaseThenLeave(t *testing.T, name string) (g string, sk *sink, first event, other string) {
	t.Helper()
	topic := env.topic(name)
	env.create(engine.TopicConfig{Name: topic, Partitions: 1})
	sk = newSink()
	g = env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m1"}, sk.consumer("m1"))
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m2"}, sk.consumer("m2"))
	env.publish(topic, 1, nil)
	first = sk.delivery(t, env.timeout)
	other = map[string]string{"m1": "m2", "m2": "m1"}[first.member]
	if err := env.e.Leave(ctx(), g, first.member); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	return g, sk, first, other
}

func testLeaveHandsBack(t *testing.T, s *suite) {
	env := s.env(t, Config{Policy: engine.GroupPolicy{AckTimeout: time.Hour, BackoffMin: time.Hour, BackoffMax: time.Hour}})
	g, sk, first, other := env.leaseThenLeave(t, "leave")
	ev := sk.delivery(t, env.timeout) // long before the hour-long ack timeout or backoff
	if ev.member != other || ev.d.Record.Offset != 0 || ev.d.Attempt != 2 {
		t.Fatalf("after %s left got %v, want offset 0 to %s, attempt 2", first.member, ev, other)
	}
	env.ack(ev)
	if p := env.groupInfo(g).Partitions[0]; p.Committed != 1 || p.Member != other {
		t.Errorf("partition %+v, want committed 1 and member %s", p, other)
	}
}

func testConflict(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	sk := newSink()
	g := env.group("g")
	pattern := env.base + ".orders.#"
	env.join(engine.JoinRequest{Group: g, Pattern: pattern, Member: "m1"}, sk.consumer("m1"))
	_, err := env.e.Join(ctx(), engine.JoinRequest{Group: g, Pattern: env.base + ".other.#", Member: "m2"}, sk.consumer("m2"))
	wantErr(t, "Join with another pattern", err, engine.ErrGroupConflict)
	_, err = env.e.Join(ctx(), engine.JoinRequest{Group: g, Pattern: pattern, Filter: map[string]string{"a": "b"}, Member: "m2"}, sk.consumer("m2"))
	wantErr(t, "Join with another filter", err, engine.ErrGroupConflict)
	env.join(engine.JoinRequest{Group: g, Pattern: pattern, Member: "m2"}, sk.consumer("m2"))

	fg := env.group("filtered")
	env.join(engine.JoinRequest{Group: fg, Pattern: pattern, Filter: map[string]string{"a": "b"}, Member: "m1"}, sk.consumer("m1"))
	_, err = env.e.Join(ctx(), engine.JoinRequest{Group: fg, Pattern: pattern, Member: "m2"}, sk.consumer("m2"))
	wantErr(t, "Join without the group's filter", err, engine.ErrGroupConflict)
	env.join(engine.JoinRequest{Group: fg, Pattern: pattern, Filter: map[string]string{"a": "b"}, Member: "m2"}, sk.consumer("m2"))
	if got := members(env.groupInfo(g)); !slices.Equal(got, []string{"m1", "m2"}) {
		t.Errorf("members = %v, want [m1 m2]", got)
	}
	if _, err := env.e.Join(ctx(), engine.JoinRequest{Group: env.group("bad"), Pattern: "a..b"}, sk.consumer("m")); err == nil {
		t.Errorf("Join with an invalid pattern succeeded")
	}
}

func testFilter(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	topic := env.topic("filter")
	env.create(engine.TopicConfig{Name: topic, Partitions: 2, Partitioner: engine.RoundRobin})
	sk, f := newSink(), newFlow(t)
	g := env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Filter: map[string]string{"region": "eu"}, Member: "m"}, sk.consumer("m"))
	headers := []map[string]string{
		{"region": "eu"},
		{"region": "us"},
		{"region": "eu", "tier": "gold"},
		nil,
	}
	for i := range 12 {
		env.append(engine.Message{Topic: topic, Headers: headers[i%4], Data: fmt.Appendf(nil, "%d", i)})
	}
	for range 6 {
		ev := sk.delivery(t, env.timeout)
		f.deliver(ev)
		if ev.d.Record.Headers["region"] != "eu" {
			t.Errorf("filter let through %v with headers %v", ev, ev.d.Record.Headers)
		}
		env.ack(ev)
		f.acked(ev)
	}
	waitUntil(t, env.timeout, "filtered records to be committed", func() bool {
		for _, p := range env.groupInfo(g).Partitions {
			if p.Committed != p.Next {
				return false
			}
		}
		return true
	})
	if extra := sk.pending(); len(extra) > 0 {
		t.Errorf("extra deliveries: %v", extra)
	}
	if info := env.groupInfo(g); info.Filter["region"] != "eu" || len(info.Filter) != 1 {
		t.Errorf("group filter = %v", info.Filter)
	}
}

func testRetentionSkipped(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	topic := env.topic("skip")
	env.create(engine.TopicConfig{Name: topic, Partitions: 1, MaxMessages: 3, OnFull: engine.DropOldest})
	sk := newSink()
	g := env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m"}, sk.consumer("m"))
	env.publish(topic, 1, nil)
	if ev := sk.delivery(t, env.timeout); ev.d.Record.Offset != 0 {
		t.Fatalf("first delivery %v, want offset 0", ev)
	}
	env.publish(topic, 5, nil) // retains 3..5; the group still needs 0
	// Skips must cover what was trimmed before the group got past it and
	// come before the next delivery of the partition; deliveries of records
	// trimmed meanwhile may come too and are not acked.
	skippedTo := int64(-1)
	for {
		ev := sk.next(t, env.timeout)
		if ev.skip != nil {
			if ev.skip.group != g || ev.skip.topic != topic || ev.skip.partition != 0 || ev.skip.from >= ev.skip.to || ev.skip.to > 3 {
				t.Fatalf("bad skip %v", ev)
			}
			skippedTo = max(skippedTo, ev.skip.to)
			continue
		}
		if ev.d.Record.Offset < 3 {
			continue
		}
		if ev.d.Record.Offset != 3 {
			t.Fatalf("got %v, want offset 3 after the trimmed ones", ev)
		}
		if skippedTo != 3 {
			t.Fatalf("delivery of offset 3 before a skip reaching offset 3 (skips reached %d)", skippedTo)
		}
		env.ack(ev)
		break
	}
	for want := int64(4); want < 6; want++ {
		ev := sk.delivery(t, env.timeout)
		if ev.d.Record.Offset != want {
			t.Fatalf("got %v, want offset %d", ev, want)
		}
		env.ack(ev)
	}
	if p := env.groupInfo(g).Partitions[0]; p.Committed != 6 || p.Skipped < 2 {
		t.Errorf("partition %+v, want committed 6 and at least 2 skipped", p)
	}
}

func testGroupErrors(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	topic := env.topic("errs")
	env.create(engine.TopicConfig{Name: topic, Partitions: 1})
	nope := env.group("nope")
	pos := engine.Position{Topic: topic, Partition: 0, Offset: 0}
	wantErr(t, "Ack of an unknown group", env.e.Ack(ctx(), nope, "m", pos), engine.ErrUnknownGroup)
	wantErr(t, "Nack of an unknown group", env.e.Nack(ctx(), nope, "m", pos, "x"), engine.ErrUnknownGroup)
	wantErr(t, "Leave of an unknown group", env.e.Leave(ctx(), nope, "m"), engine.ErrUnknownGroup)
	_, err := env.e.Group(ctx(), nope)
	wantErr(t, "Group of an unknown group", err, engine.ErrUnknownGroup)

	sk := newSink()
	g := env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m"}, sk.consumer("m"))
	wantErr(t, "Ack of a never-delivered record", env.e.Ack(ctx(), g, "m", engine.Position{Topic: topic, Offset: 99}), engine.ErrNotInFlight)
	env.publish(topic, 1, nil)
	ev := sk.delivery(t, env.timeout)
	env.ack(ev)
	wantErr(t, "second Ack", env.e.Ack(ctx(), g, "m", position(ev.d.Record)), engine.ErrNotInFlight)
	wantErr(t, "Nack after Ack", env.e.Nack(ctx(), g, "m", position(ev.d.Record), "x"), engine.ErrNotInFlight)
	wantErr(t, "Leave of an unknown member", env.e.Leave(ctx(), g, "ghost"), engine.ErrUnknownMember)
	if err := env.e.Leave(ctx(), g, "m"); err != nil {
		t.Fatalf("Leave: %v", err)
	}
	wantErr(t, "second Leave", env.e.Leave(ctx(), g, "m"), engine.ErrUnknownMember)
	groups, err := env.e.Groups(ctx())
	if err != nil || !slices.ContainsFunc(groups, func(gi engine.GroupInfo) bool { return gi.Name == g }) {
		t.Errorf("Groups() = %v, %v; want it to list %s after its last member left", groups, err, g)
	}
}

func testQueueFullLetters(t *testing.T, s *suite) {
	env := s.env(t, Config{Policy: engine.GroupPolicy{DeadLetterLimit: 3}})
	topic := env.topic("qf")
	for i := range 5 {
		err := env.e.AddDeadLetter(ctx(), engine.DeadLetter{
			Reason: engine.ReasonQueueFull, Subscriber: fmt.Sprintf("s%d", i),
			Record: engine.Record{Topic: topic, Offset: int64(i), Data: []byte("x")},
		})
		if err != nil {
			t.Fatalf("AddDeadLetter: %v", err)
		}
	}
	dls, err := env.e.DeadLetters(ctx(), engine.DeadLetterFilter{Reason: engine.ReasonQueueFull})
	if err != nil {
		t.Fatal(err)
	}
	var subs []string
	ids := map[string]bool{}
	for _, dl := range dls {
		if dl.Record.Topic != topic {
			continue
		}
		subs = append(subs, dl.Subscriber)
		if dl.ID == "" || ids[dl.ID] || dl.Time.IsZero() {
			t.Errorf("letter %+v: want a unique ID and a time", dl)
		}
		ids[dl.ID] = true
	}
	if join(subs) != "s2,s3,s4" {
		t.Errorf("kept %v, want the newest three [s2 s3 s4]", subs)
	}
	if dls, _ := env.e.DeadLetters(ctx(), engine.DeadLetterFilter{Reason: engine.ReasonQueueFull, Limit: 2}); len(dls) != 2 {
		t.Errorf("Limit 2 returned %d letters", len(dls))
	}
	if dls, _ := env.e.DeadLetters(ctx(), engine.DeadLetterFilter{Reason: engine.ReasonMaxAttempts}); slices.ContainsFunc(dls, func(dl engine.DeadLetter) bool { return dl.Record.Topic == topic }) {
		t.Errorf("reason filter let queue_full letters through")
	}
}

func testClose(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	ignore := goleak.IgnoreCurrent() // the factory's own machinery
	topic, _, _ := blockedTopic(t, env, time.Hour)
	blocked := make(chan error, 1)
	go func() {
		_, err := env.e.Append(context.Background(), engine.Message{Topic: topic})
		blocked <- err
	}()
	cctx, cancel := context.WithTimeout(context.Background(), env.timeout)
	defer cancel()
	if err := env.e.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wantErr(t, "Append blocked across Close", waitFor(t, blocked, env.timeout, "the blocked Append to return"), engine.ErrClosed)
	_, err := env.e.Append(ctx(), engine.Message{Topic: env.topic("after")})
	wantErr(t, "Append after Close", err, engine.ErrClosed)
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("goroutines left after Close: %v", err)
	}
}

// seekFixture is a one-partition topic with three records that member m1
// of group g has consumed and acked.
type seekFixture struct {
	env   *env
	topic string
	g     string
	m1    *sink
}

func newSeekFixture(t *testing.T, s *suite, name string, policy engine.GroupPolicy) seekFixture {
	env := s.env(t, Config{Policy: policy})
	f := seekFixture{env: env, topic: env.topic(name), g: env.group("g"), m1: newSink()}
	env.create(engine.TopicConfig{Name: f.topic, Partitions: 1})
	env.join(engine.JoinRequest{Group: f.g, Pattern: f.topic, Member: "m1"}, f.m1.consumer("m1"))
	env.publish(f.topic, 3, nil)
	env.consume(f.m1, newFlow(t), 3)
	return f
}

func (f seekFixture) seek(t *testing.T, offset int64) {
	t.Helper()
	if err := f.env.e.Seek(ctx(), f.g, f.topic, 0, engine.Start{Kind: engine.StartOffset, Offset: offset}); err != nil {
		t.Fatalf("Seek: %v", err)
	}
}

func (f seekFixture) leave(t *testing.T, member string) {
	t.Helper()
	if err := f.env.e.Leave(ctx(), f.g, member); err != nil {
		t.Fatalf("Leave %s: %v", member, err)
	}
}

// joinAndExpect joins m2, runs then (if any), and checks that m2 gets
// offsets from to 2 in order.
func (f seekFixture) joinAndExpect(t *testing.T, from int64, then func()) {
	t.Helper()
	sk2 := newSink()
	f.env.join(engine.JoinRequest{Group: f.g, Pattern: f.topic, Member: "m2"}, sk2.consumer("m2"))
	if then != nil {
		then()
	}
	for want := from; want < 3; want++ {
		ev := sk2.delivery(t, f.env.timeout)
		if ev.d.Record.Offset != want {
			t.Fatalf("m2 got %v, want offset %d", ev, want)
		}
		f.env.ack(ev)
	}
}

// testSeekThenMemberChange: a seek replays to the member that holds the
// partition; when that member leaves with the replayed record unacked and
// another joins (before or after the leave), the newcomer gets the replay
// in offset order, starting at the record the first member held.
func testSeekThenMemberChange(t *testing.T, s *suite) {
	for _, leaveFirst := range []bool{false, true} {
		t.Run(fmt.Sprintf("leaveFirst=%v", leaveFirst), func(t *testing.T) {
			policy := fastRetry
			policy.BackoffMin, policy.BackoffMax = 50*time.Millisecond, 50*time.Millisecond
			f := newSeekFixture(t, s, "seekleave", policy)
			f.seek(t, 1)
			if ev := f.m1.delivery(t, f.env.timeout); ev.member != "m1" || ev.d.Record.Offset != 1 {
				t.Fatalf("after the seek got %v, want offset 1 to m1", ev)
			}
			if leaveFirst {
				f.leave(t, "m1")
				f.joinAndExpect(t, 1, nil)
			} else {
				f.joinAndExpect(t, 1, func() { f.leave(t, "m1") })
			}
			if extra := f.m1.pending(); len(extra) > 0 {
				t.Errorf("m1 got records after it left: %v", extra)
			}
		})
	}
}

// testSeekWithoutMembers: a seek on a group that has no member replays to
// the next member that joins, from the offset sought.
func testSeekWithoutMembers(t *testing.T, s *suite) {
	f := newSeekFixture(t, s, "seekidle", fastRetry)
	f.leave(t, "m1")
	f.seek(t, 1)
	f.joinAndExpect(t, 1, nil)
}
