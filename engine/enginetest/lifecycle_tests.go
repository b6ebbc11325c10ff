package enginetest

// Tests of lease identity, group windows, member windows, the group
// lifecycle (delete, idle expiry) and graceful hand-back.

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// testLateAckFromPreviousHolder: once a record is leased to another member,
// an ack or nack of the previous holder is not_in_flight and changes
// nothing; in particular a stale nack does not use up an attempt.
func testLateAckFromPreviousHolder(t *testing.T, s *suite) {
	policy := fastRetry
	policy.MaxAttempts = 3
	policy.AckTimeout = time.Hour
	env := s.env(t, Config{Policy: policy})
	g, sk, first, other := env.leaseThenLeave(t, "late")
	second := sk.delivery(t, env.timeout)
	if second.member != other || second.d.Attempt != 2 {
		t.Fatalf("after %s left got %v, want attempt 2 to %s", first.member, second, other)
	}
	pos := position(first.d.Record)
	wantErr(t, "late Ack of the previous holder", env.e.Ack(ctx(), g, first.member, pos), engine.ErrNotInFlight)
	wantErr(t, "late Nack of the previous holder", env.e.Nack(ctx(), g, first.member, pos, "stale"), engine.ErrNotInFlight)
	if p := env.groupInfo(g).Partitions[0]; p.InFlight != 1 || p.Committed != 0 {
		t.Fatalf("after stale settles: %+v, want the new lease intact (1 in flight, committed 0)", p)
	}
	if extra := sk.pending(); len(extra) > 0 {
		t.Fatalf("a stale settle caused deliveries: %v", extra)
	}
	// The holder's own nack is attempt 2 failing: attempt 3 is still owed.
	env.nack(second, "real")
	third := sk.delivery(t, env.timeout)
	if third.member != other || third.d.Attempt != 3 {
		t.Fatalf("after the holder's nack got %v, want attempt 3 to %s (a stale nack must not use one up)", third, other)
	}
	env.ack(third)
	if dls, _ := env.e.DeadLetters(ctx(), engine.DeadLetterFilter{Group: g}); len(dls) != 0 {
		t.Errorf("dead letters: %+v, want none", dls)
	}
}

// leasedOnce starts a fake-clock group (ack timeout 10 s, backoff 1 s, 5
// attempts) on a new one-partition topic with one member, publishes one
// record and returns its first delivery.
func leasedOnce(t *testing.T, s *suite, name, member string) (*env, *sink, string, string, event) {
	t.Helper()
	env := s.fakeEnv(t, Config{Policy: engine.GroupPolicy{AckTimeout: 10 * time.Second, BackoffMin: time.Second, BackoffMax: time.Second, MaxAttempts: 5}})
	topic := env.topic(name)
	env.create(engine.TopicConfig{Name: topic, Partitions: 1})
	sk := newSink()
	g := env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: member}, sk.consumer(member))
	env.publish(topic, 1, nil)
	return env, sk, topic, g, sk.delivery(t, env.timeout)
}

// testLateAckAfterTimeout: the lease moves by an ack timeout while the old
// holder is still a member; its late ack must not settle the new lease.
func testLateAckAfterTimeout(t *testing.T, s *suite) {
	env, sk, topic, g, first := leasedOnce(t, s, "timeout", "m2")
	// m1 sorts first, so partition 0 moves to it; m2 still holds offset 0.
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m1"}, sk.consumer("m1"))
	env.clock.Advance(10 * time.Second) // m2's lease times out
	env.clock.Advance(time.Second)      // the backoff passes
	second := sk.delivery(t, env.timeout)
	if second.member != "m1" || second.d.Attempt != 2 {
		t.Fatalf("after the ack timeout got %v, want attempt 2 to m1", second)
	}
	wantErr(t, "late Ack of m2", env.e.Ack(ctx(), g, "m2", position(first.d.Record)), engine.ErrNotInFlight)
	if p := env.groupInfo(g).Partitions[0]; p.InFlight != 1 || p.Committed != 0 {
		t.Fatalf("after m2's late ack: %+v, want m1's lease intact", p)
	}
	env.ack(second)
	if p := env.groupInfo(g).Partitions[0]; p.Committed != 1 {
		t.Errorf("committed = %d, want 1", p.Committed)
	}
}

// testGroupWindow: a group's MaxInFlight leases that many records of a
// partition at once, in order; acks come in any order and the committed
// offset moves over the contiguous acked prefix only.
func testGroupWindow(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	topic := env.topic("window")
	env.create(engine.TopicConfig{Name: topic, Partitions: 1})
	sk := newSink()
	g := env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m", MaxInFlight: 4}, sk.consumer("m"))
	env.publish(topic, 6, nil)
	var got []event
	for range 4 {
		got = append(got, sk.delivery(t, env.timeout))
	}
	for i, ev := range got {
		if ev.d.Record.Offset != int64(i) || ev.d.Attempt != 1 {
			t.Fatalf("delivery %d: %v, want offset %d attempt 1", i, ev, i)
		}
	}
	info := env.groupInfo(g)
	if info.MaxInFlight != 4 || info.Partitions[0].InFlight != 4 {
		t.Fatalf("group %+v, want max in flight 4 with 4 in flight", info)
	}
	if extra := sk.pending(); len(extra) > 0 {
		t.Fatalf("more than the window delivered: %v", extra)
	}
	committed := func() int64 { return env.groupInfo(g).Partitions[0].Committed }
	env.ack(got[2])
	if c := committed(); c != 0 {
		t.Fatalf("committed %d after acking offset 2 only, want 0", c)
	}
	ev := sk.delivery(t, env.timeout) // offset 2 is settled: the window takes offset 4
	if ev.d.Record.Offset != 4 {
		t.Fatalf("after one ack got %v, want offset 4", ev)
	}
	got = append(got, ev)
	env.ack(got[0])
	if c := committed(); c != 1 {
		t.Fatalf("committed %d after acking 0 and 2, want 1", c)
	}
	env.ack(got[1])
	if c := committed(); c != 3 {
		t.Fatalf("committed %d after acking 0, 1 and 2, want 3", c)
	}
	got = append(got, sk.delivery(t, env.timeout))
	env.ack(got[5])
	env.ack(got[4])
	if c := committed(); c != 3 {
		t.Fatalf("committed %d with offset 3 unacked, want 3", c)
	}
	env.ack(got[3])
	if c := committed(); c != 6 {
		t.Fatalf("committed %d after acking everything, want 6", c)
	}

	_, err := env.e.Join(ctx(), engine.JoinRequest{Group: g, Pattern: topic, Member: "m2", MaxInFlight: 2}, sk.consumer("m2"))
	wantErr(t, "Join with another max in flight", err, engine.ErrGroupConflict)
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m3", MaxInFlight: 4}, sk.consumer("m3"))
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m4"}, sk.consumer("m4")) // 0: the group's
	_, err = env.e.Join(ctx(), engine.JoinRequest{Group: env.group("huge"), Pattern: topic, MaxInFlight: engine.MaxGroupInFlight + 1}, sk.consumer("m"))
	wantErr(t, "Join with a window over the bound", err, engine.ErrInvalidConfig)
}

// testMemberWindow: a member with MaxLeased holds at most that many
// records over all its partitions; the rest are held back, not pushed, and
// follow as it settles.
func testMemberWindow(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	topic := env.topic("memberwin")
	const parts, per, window = 8, 3, 3
	env.create(engine.TopicConfig{Name: topic, Partitions: parts, Partitioner: engine.RoundRobin})
	env.publish(topic, parts*per, nil)
	sk, f := newSink(), newFlow(t)
	g := env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m", MaxLeased: window}, sk.consumer("m"))
	var held []event
	for range window {
		ev := sk.delivery(t, env.timeout)
		f.deliver(ev)
		held = append(held, ev)
	}
	if extra := sk.pending(); len(extra) > 0 {
		t.Fatalf("%d deliveries past the member's window of %d: %v", len(extra), window, extra)
	}
	for len(held) > 0 {
		ev := held[0]
		held = held[1:]
		env.ack(ev)
		f.acked(ev)
		// As many as the window allows of the partitions with work left.
		busy := 0
		for _, p := range env.groupInfo(g).Partitions {
			if p.Committed < per {
				busy++
			}
		}
		for len(held) < min(window, busy) {
			next := sk.delivery(t, env.timeout)
			f.deliver(next)
			held = append(held, next)
		}
		if extra := sk.pending(); len(extra) > 0 {
			t.Fatalf("deliveries past the member's window: %v", extra)
		}
	}
	if len(f.seen) != parts*per {
		t.Fatalf("%d records delivered, want %d", len(f.seen), parts*per)
	}
	for _, p := range env.groupInfo(g).Partitions {
		if p.Committed != per {
			t.Errorf("partition %+v, want committed %d", p, per)
		}
	}
}

// testDeleteGroup: DeleteGroup removes a group and its positions; its
// leases end; the name can be joined again as a new group.
func testDeleteGroup(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	topic := env.topic("del")
	env.create(engine.TopicConfig{Name: topic, Partitions: 1})
	env.publish(topic, 2, nil)
	sk := newSink()
	g := env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m"}, sk.consumer("m"))
	env.ack(sk.delivery(t, env.timeout))
	held := sk.delivery(t, env.timeout)
	if err := env.e.DeleteGroup(ctx(), g); err != nil {
		t.Fatalf("DeleteGroup: %v", err)
	}
	_, err := env.e.Group(ctx(), g)
	wantErr(t, "Group after DeleteGroup", err, engine.ErrUnknownGroup)
	wantErr(t, "Ack after DeleteGroup", env.e.Ack(ctx(), g, "m", position(held.d.Record)), engine.ErrUnknownGroup)
	wantErr(t, "second DeleteGroup", env.e.DeleteGroup(ctx(), g), engine.ErrUnknownGroup)
	groups, err := env.e.Groups(ctx())
	if err != nil || slices.ContainsFunc(groups, func(gi engine.GroupInfo) bool { return gi.Name == g }) {
		t.Fatalf("Groups() = %v, %v after DeleteGroup", groups, err)
	}
	env.publish(topic, 1, nil)
	if extra := sk.pending(); len(extra) > 0 {
		t.Fatalf("deliveries after DeleteGroup: %v", extra)
	}
	// A new group of the same name starts afresh (from earliest).
	sk2 := newSink()
	env.join(engine.JoinRequest{Group: g, Pattern: env.base + ".#", Member: "m"}, sk2.consumer("m"))
	if ev := sk2.delivery(t, env.timeout); ev.d.Record.Offset != 0 || ev.d.Attempt != 1 {
		t.Fatalf("first delivery of the re-created group %v, want offset 0 attempt 1", ev)
	}
}

// testIdleExpiry: a group with no member is deleted after IdleTTL; a join
// in between keeps it; a negative IdleTTL keeps it forever.
func testIdleExpiry(t *testing.T, s *suite) {
	env := s.fakeEnv(t, Config{Policy: engine.GroupPolicy{IdleTTL: time.Hour}})
	topic := env.topic("idle")
	env.create(engine.TopicConfig{Name: topic, Partitions: 1})
	sk := newSink()
	g := env.group("g")
	exists := func() bool {
		_, err := env.e.Group(ctx(), g)
		return err == nil
	}
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m"}, sk.consumer("m"))
	env.clock.Advance(2 * time.Hour)
	if !exists() {
		t.Fatalf("a group with a member expired")
	}
	if err := env.e.Leave(ctx(), g, "m"); err != nil {
		t.Fatal(err)
	}
	env.clock.Advance(59 * time.Minute)
	if !exists() {
		t.Fatalf("the group expired before its idle TTL")
	}
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m"}, sk.consumer("m"))
	if err := env.e.Leave(ctx(), g, "m"); err != nil {
		t.Fatal(err)
	}
	env.clock.Advance(59 * time.Minute)
	if !exists() {
		t.Fatalf("a join did not restart the idle TTL")
	}
	env.clock.Advance(2 * time.Minute)
	waitUntil(t, env.timeout, "the idle group to expire", func() bool { return !exists() })

	keep := s.fakeEnv(t, Config{Policy: engine.GroupPolicy{IdleTTL: -1}})
	kg := keep.group("kept")
	keep.join(engine.JoinRequest{Group: kg, Pattern: topic, Member: "m"}, sk.consumer("m"))
	if err := keep.e.Leave(ctx(), kg, "m"); err != nil {
		t.Fatal(err)
	}
	keep.clock.Advance(1000 * time.Hour)
	if _, err := keep.e.Group(ctx(), kg); err != nil {
		t.Errorf("a group with a negative idle TTL expired: %v", err)
	}
}

// testIdleGroupDoesNotBlock: a group with no member does not hold back a
// block-policy topic.
func testIdleGroupDoesNotBlock(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	topic := env.topic("idleblock")
	env.create(engine.TopicConfig{Name: topic, Partitions: 1, MaxMessages: 2, OnFull: engine.Block, BlockTimeout: 100 * time.Millisecond})
	sk := newSink()
	g := env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m"}, sk.consumer("m"))
	if err := env.e.Leave(ctx(), g, "m"); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := env.e.Append(ctx(), engine.Message{Topic: topic, Data: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatalf("Append %d with only a memberless group: %v", i, err)
		}
	}
	if p := env.info(topic).Parts[0]; p.Earliest != 2 || p.Next != 4 {
		t.Errorf("partition %+v, want earliest 2, next 4", p)
	}
	// Its member comes back: it is told what it missed.
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m"}, sk.consumer("m"))
	ev := sk.next(t, env.timeout)
	if ev.skip == nil || ev.skip.from != 0 || ev.skip.to != 2 {
		t.Fatalf("first event after rejoining %v, want a skip of [0,2)", ev)
	}
}

// testHandBack: members handed back in one step give their records back,
// never to each other; a delivery that never reached its member is not an
// attempt, one that did counts.
func testHandBack(t *testing.T, s *suite) {
	policy := fastRetry
	policy.MaxAttempts = 2
	policy.AckTimeout = time.Hour
	env := s.env(t, Config{Policy: policy})
	topic := env.topic("handback")
	env.create(engine.TopicConfig{Name: topic, Partitions: 2, Partitioner: engine.RoundRobin})
	sk := newSink()
	g := env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m1"}, sk.consumer("m1"))
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m2"}, sk.consumer("m2"))
	env.publish(topic, 2, nil)
	a, b := sk.delivery(t, env.timeout), sk.delivery(t, env.timeout)
	if a.member == b.member {
		t.Fatalf("both partitions went to %s", a.member)
	}
	// a never reached its member; b did.
	err := env.e.HandBack(ctx(), []engine.MemberRef{
		{Group: g, Member: a.member, Unsent: []engine.Position{position(a.d.Record)}},
		{Group: g, Member: b.member},
		{Group: g, Member: "gone"},
	})
	if err != nil {
		t.Fatalf("HandBack: %v", err)
	}
	if extra := sk.pending(); len(extra) > 0 {
		t.Fatalf("records handed back went to a member leaving with them: %v", extra)
	}
	if dls, _ := env.e.DeadLetters(ctx(), engine.DeadLetterFilter{Group: g}); len(dls) != 0 {
		t.Fatalf("a graceful hand-back dead-lettered %+v", dls)
	}
	if info := env.groupInfo(g); len(info.Members) != 0 {
		t.Fatalf("members after HandBack: %v", members(info))
	}
	sk2 := newSink()
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m3"}, sk2.consumer("m3"))
	want := map[int]int{a.d.Record.Partition: 1, b.d.Record.Partition: 2}
	for range 2 {
		ev := sk2.delivery(t, env.timeout)
		if w := want[ev.d.Record.Partition]; ev.d.Attempt != w {
			t.Errorf("after the hand-back got %v, want attempt %d", ev, w)
		}
		env.ack(ev)
	}
}

// testLateAckOfAttempt: a settle naming an attempt (engine.LeaseOf) settles
// the record only while that attempt is in flight. The members share a
// prefix, as HTTP pull members do, so the prefix alone cannot tell the
// late ack of attempt 1 from the ack of attempt 2.
func testLateAckOfAttempt(t *testing.T, s *suite) {
	env, sk, _, g, first := leasedOnce(t, s, "attempt", "pull-a")
	env.clock.Advance(10 * time.Second) // the lease times out
	env.clock.Advance(time.Second)      // the backoff passes
	second := sk.delivery(t, env.timeout)
	if second.d.Attempt != 2 {
		t.Fatalf("after the ack timeout got %v, want attempt 2", second)
	}
	pos := position(first.d.Record)
	wantErr(t, "late Ack of attempt 1", env.e.Ack(ctx(), g, engine.LeaseOf("pull-", 1), pos), engine.ErrNotInFlight)
	wantErr(t, "late Nack of attempt 1", env.e.Nack(ctx(), g, engine.LeaseOf("pull-", 1), pos, "stale"), engine.ErrNotInFlight)
	wantErr(t, "Ack of attempt 2 by another prefix", env.e.Ack(ctx(), g, engine.LeaseOf("push-", 2), pos), engine.ErrNotInFlight)
	if p := env.groupInfo(g).Partitions[0]; p.InFlight != 1 || p.Committed != 0 {
		t.Fatalf("after stale settles: %+v, want attempt 2's lease intact", p)
	}
	if extra := sk.pending(); len(extra) > 0 {
		t.Fatalf("a stale settle caused deliveries: %v", extra)
	}
	if err := env.e.Ack(ctx(), g, engine.LeaseOf("pull-", 2), pos); err != nil {
		t.Fatalf("Ack of attempt 2: %v", err)
	}
	if p := env.groupInfo(g).Partitions[0]; p.Committed != 1 {
		t.Errorf("committed = %d, want 1", p.Committed)
	}
}

// testAcksAboveAHole: records acked above one not yet settled (a hole,
// with a window above 1) are never delivered again when the partition
// moves to another member: by Leave with the next member already there,
// by Leave or HandBack of the only member and a join after it. Only the
// unacked record comes again, its attempt counted on.
func testAcksAboveAHole(t *testing.T, s *suite) {
	const n = 10
	for _, tc := range []struct {
		name   string
		before bool // the next member joins before the first goes
		leave  func(env *env, g string) error
	}{
		{"LeaveToMember", true, func(env *env, g string) error { return env.e.Leave(ctx(), g, "m1") }},
		{"LeaveThenJoin", false, func(env *env, g string) error { return env.e.Leave(ctx(), g, "m1") }},
		{"HandBackThenJoin", false, func(env *env, g string) error {
			return env.e.HandBack(ctx(), []engine.MemberRef{{Group: g, Member: "m1"}})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s.skipKnown(t)
			env := s.env(t, Config{Policy: engine.GroupPolicy{AckTimeout: time.Hour, BackoffMin: time.Hour, BackoffMax: time.Hour}})
			topic := env.topic("hole")
			env.create(engine.TopicConfig{Name: topic, Partitions: 1})
			g := env.group("g")
			sk := newSink()
			env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m1", MaxInFlight: n}, sk.consumer("m1"))
			env.publish(topic, n, nil)
			for range n {
				if ev := sk.delivery(t, env.timeout); ev.d.Record.Offset != 0 {
					env.ack(ev) // offset 0 stays leased: the hole
				}
			}
			sk2 := newSink()
			if tc.before {
				env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m2", MaxInFlight: n}, sk2.consumer("m2"))
			}
			if err := tc.leave(env, g); err != nil {
				t.Fatalf("m1 going: %v", err)
			}
			if !tc.before {
				env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m2", MaxInFlight: n}, sk2.consumer("m2"))
			}
			env.append(engine.Message{Topic: topic, Data: []byte("marker")})
			var again []int64
			for hole, marker := false, false; !hole || !marker; {
				ev := sk2.delivery(t, env.timeout)
				switch off := ev.d.Record.Offset; {
				case off == n:
					marker = true
				case off == 0:
					hole = true
					if ev.d.Attempt != 2 {
						t.Errorf("the unacked record came again as %v, want attempt 2", ev)
					}
				default:
					again = append(again, off)
				}
				env.ack(ev)
			}
			if len(again) > 0 {
				t.Errorf("%d records acked above an unacked one were delivered again: offsets %v", len(again), again)
			}
			waitUntil(t, env.timeout, "the group to commit every record", func() bool {
				return env.groupInfo(g).Partitions[0].Committed == n+1
			})
		})
	}
}
