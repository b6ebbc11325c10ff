package enginetest

// Tests of settling by member family (engine.MembersOf).

import (
	"errors"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// testSettleByMemberFamily: an ack or nack naming a family of members
// (engine.MembersOf) settles a record leased to any member of the family
// and is not_in_flight for a record leased to a member outside it; a
// member ID may not contain engine.AnyMember.
func testSettleByMemberFamily(t *testing.T, s *suite) {
	policy := fastRetry
	policy.AckTimeout = time.Hour
	env := s.env(t, Config{Policy: policy})
	topic := env.topic("family")
	env.create(engine.TopicConfig{Name: topic, Partitions: 1})
	sk := newSink()
	g := env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "pull-a"}, sk.consumer("pull-a"))
	if _, err := env.e.Join(ctx(), engine.JoinRequest{Group: g, Pattern: topic, Member: "bad" + engine.AnyMember}, sk.consumer("bad")); !errors.Is(err, engine.ErrInvalidConfig) {
		t.Fatalf("Join with %q in the member ID: %v, want ErrInvalidConfig", engine.AnyMember, err)
	}
	env.publish(topic, 2, nil)
	first := sk.delivery(t, env.timeout)
	pos := position(first.d.Record)
	wantErr(t, "Ack by another family", env.e.Ack(ctx(), g, engine.MembersOf("ws-"), pos), engine.ErrNotInFlight)
	wantErr(t, "Nack by another family", env.e.Nack(ctx(), g, engine.MembersOf("ws-"), pos, "stale"), engine.ErrNotInFlight)
	if p := env.groupInfo(g).Partitions[0]; p.InFlight != 1 || p.Committed != 0 {
		t.Fatalf("after settles of another family: %+v, want the lease intact", p)
	}
	if err := env.e.Nack(ctx(), g, engine.MembersOf("pull-"), pos, "retry"); err != nil {
		t.Fatalf("Nack by the holder's family: %v", err)
	}
	again := sk.delivery(t, env.timeout)
	if memberOf(again) != "pull-a" || again.d.Attempt != 2 || position(again.d.Record) != pos {
		t.Fatalf("after the family's nack got %v, want attempt 2 of %v", again, pos)
	}
	if err := env.e.Ack(ctx(), g, engine.MembersOf("pull-"), pos); err != nil {
		t.Fatalf("Ack by the holder's family: %v", err)
	}
	second := sk.delivery(t, env.timeout)
	if err := env.e.Ack(ctx(), g, engine.MembersOf("pull-"), position(second.d.Record)); err != nil {
		t.Fatalf("Ack by the holder's family: %v", err)
	}
	waitUntil(t, env.timeout, "committed 2", func() bool { return env.groupInfo(g).Partitions[0].Committed == 2 })
}
