package enginetest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

// Dead-letter bounds: max_attempts letters are kept per group up to
// GroupPolicy.MaxGroupDeadLetters, and every letter up to MaxDeadLetters
// and MaxDeadLetterBytes; past a bound the oldest letter (of the group, or
// of all) is dropped to make room for the new one, and an engine that
// counts evictions (EvictedDeadLetters) counts it. The letters kept still
// redrive to their group only.

// evictor is an engine that counts the dead letters it dropped at its
// bounds.
type evictor interface{ EvictedDeadLetters() int64 }

// waitEvicted waits, for an engine that counts evictions, until it has
// counted at least n. A bound's trim drops letters before the node counts
// them (a JetStream purge's reply carries the count), so a listing can
// show the letters gone a moment before the count has them.
func (env *env) waitEvicted(n int64, what string) {
	env.t.Helper()
	ev, ok := env.e.(evictor)
	if !ok {
		return
	}
	waitUntil(env.t, env.timeout, fmt.Sprintf("EvictedDeadLetters to count %s (at least %d)", what, n), func() bool {
		return ev.EvictedDeadLetters() >= n
	})
}

// poison appends n records of data "<tag>0".."<tag>n-1" (each padded to
// pad bytes) to topic and has a member of group, new or reading from the
// log's end, nack each once, so that with MaxAttempts 1 each becomes a
// dead letter, in offset order.
func (env *env) poison(topic, group, tag string, n, pad int) {
	env.t.Helper()
	sk := newSink()
	member := "m-" + tag
	env.join(engine.JoinRequest{Group: group, Pattern: topic, Member: member, From: engine.Start{Kind: engine.StartLatest}}, sk.consumer(member))
	for i := range n {
		data := fmt.Sprintf("%q", fmt.Sprintf("%s%d", tag, i)+strings.Repeat("x", max(pad-len(tag)-4, 0)))
		a := env.append(engine.Message{Topic: topic, Data: []byte(data)})
		ev := sk.delivery(env.t, env.timeout)
		if ev.d.Record.Offset != a.Offset {
			env.t.Fatalf("delivery %v, want offset %d", ev, a.Offset)
		}
		env.nack(ev, "poison")
	}
	if n > 0 { // the letters are stored once the group commits past them
		waitUntil(env.t, env.timeout, "the group to commit past its letters", func() bool {
			return env.groupInfo(group).Partitions[0].Committed == env.head(topic)
		})
	}
	if err := env.e.Leave(ctx(), group, member); err != nil {
		env.t.Fatalf("Leave: %v", err)
	}
}

// offsetsKept returns the record offsets of the letters f selects on
// topic, oldest first.
func (env *env) offsetsKept(topic string, f engine.DeadLetterFilter) []int64 {
	var out []int64
	for _, dl := range env.letters(topic, f) {
		out = append(out, dl.Record.Offset)
	}
	return out
}

// waitKept waits until the letters f selects on topic are of the offsets
// want, oldest first.
func (env *env) waitKept(topic string, f engine.DeadLetterFilter, want []int64) {
	env.t.Helper()
	var got []int64
	waitUntil(env.t, env.timeout, fmt.Sprintf("the dead letters of %+v to be of offsets %v", f, want), func() bool {
		got = env.offsetsKept(topic, f)
		return slices.Equal(got, want)
	})
}

func testDeadLettersBoundedPerGroup(t *testing.T, s *suite) {
	policy := fastRetry
	policy.MaxAttempts = 1
	policy.MaxGroupDeadLetters = 3
	env := s.env(t, Config{Policy: policy})
	topic := env.topic("dlgroup")
	env.create(engine.TopicConfig{Name: topic, Partitions: 1})
	ga := env.group("a")
	env.poison(topic, ga, "a", 5, 0) // offsets 0..4
	env.waitKept(topic, engine.DeadLetterFilter{Group: ga}, []int64{2, 3, 4})
	env.waitEvicted(2, "the 2 letters group a dropped")
	// Another group's letters are bounded apart from a's.
	other := env.topic("dlother")
	env.create(engine.TopicConfig{Name: other, Partitions: 1})
	env.poison(other, env.group("c"), "c", 2, 0)
	env.waitKept(other, engine.DeadLetterFilter{Group: env.group("c")}, []int64{0, 1})
	env.waitKept(topic, engine.DeadLetterFilter{Group: ga}, []int64{2, 3, 4})
	// The letters kept redrive to their group only.
	sk := newSink()
	env.join(engine.JoinRequest{Group: ga, Pattern: topic, Member: "back"}, sk.consumer("back"))
	if n := env.redrive(engine.RedriveRequest{Group: ga}); n != 3 {
		t.Fatalf("Redrive of group a = %d, want its 3 letters", n)
	}
	var got []int64
	for range 3 {
		ev := sk.delivery(t, env.timeout)
		if ev.d.Group != ga || ev.d.Attempt != 1 {
			t.Fatalf("redelivery %v, want group %s attempt 1", ev, ga)
		}
		got = append(got, ev.d.Record.Offset)
		env.ack(ev)
	}
	if slices.Sort(got); !slices.Equal(got, []int64{2, 3, 4}) {
		t.Fatalf("redrive redelivered offsets %v, want the kept letters' [2 3 4]", got)
	}
}

func testDeadLettersBoundedInAll(t *testing.T, s *suite) {
	t.Run("Count", func(t *testing.T) {
		policy := fastRetry
		policy.MaxAttempts = 1
		policy.MaxGroupDeadLetters = -1
		policy.MaxDeadLetters = 4
		env := s.env(t, Config{Policy: policy})
		topic := env.topic("dlall")
		env.create(engine.TopicConfig{Name: topic, Partitions: 1})
		env.poison(topic, env.group("a"), "a", 3, 0) // offsets 0..2
		env.poison(topic, env.group("c"), "c", 3, 0) // offsets 3..5
		env.waitKept(topic, engine.DeadLetterFilter{}, []int64{2, 3, 4, 5})
		env.waitEvicted(2, "the 2 oldest letters dropped")
	})
	t.Run("Bytes", func(t *testing.T) {
		const pad, most = 1000, 8000
		policy := fastRetry
		policy.MaxAttempts = 1
		policy.MaxDeadLetterBytes = most
		env := s.env(t, Config{Policy: policy})
		topic := env.topic("dlbytes")
		env.create(engine.TopicConfig{Name: topic, Partitions: 1})
		const n = 20
		env.poison(topic, env.group("a"), "a", n, pad)
		var kept []int64
		waitUntil(t, env.timeout, "the newest letter, within the byte bound", func() bool {
			kept = env.offsetsKept(topic, engine.DeadLetterFilter{})
			return len(kept) > 0 && kept[len(kept)-1] == n-1 && len(kept)*pad <= most
		})
		if len(kept) < 2 || kept[0] == 0 {
			t.Fatalf("kept the letters of offsets %v: want the newest few of %d, within %d bytes of %d-byte records", kept, n, most, pad)
		}
		for i := 1; i < len(kept); i++ {
			if kept[i] != kept[i-1]+1 {
				t.Fatalf("kept offsets %v: the oldest go first", kept)
			}
		}
	})
}
