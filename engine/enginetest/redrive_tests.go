package enginetest

import (
	"slices"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

// Redrive conformance: a group's dead letter goes back to that group only,
// at its original position, with a fresh attempt count; nothing is
// appended to the log. Letters that cannot go back in place (no group, or a
// record retention has trimmed) are appended again only when asked.

// redrive calls Redrive, failing the test on an error.
func (env *env) redrive(req engine.RedriveRequest) int {
	env.t.Helper()
	n, err := env.e.Redrive(ctx(), req)
	if err != nil {
		env.t.Fatalf("Redrive(%+v): %v", req, err)
	}
	return n
}

// letters returns the dead letters of topic that f selects.
func (env *env) letters(topic string, f engine.DeadLetterFilter) []engine.DeadLetter {
	env.t.Helper()
	dls, err := env.e.DeadLetters(ctx(), f)
	if err != nil {
		env.t.Fatalf("DeadLetters(%+v): %v", f, err)
	}
	return slices.DeleteFunc(dls, func(dl engine.DeadLetter) bool { return dl.Record.Topic != topic })
}

// waitLetters waits until n dead letters of topic match f and returns them.
func (env *env) waitLetters(topic string, f engine.DeadLetterFilter, n int) []engine.DeadLetter {
	env.t.Helper()
	var dls []engine.DeadLetter
	waitUntil(env.t, env.timeout, "the dead letters", func() bool {
		dls = env.letters(topic, f)
		return len(dls) == n
	})
	return dls
}

// head returns the next offset of a topic's partition 0.
func (env *env) head(topic string) int64 {
	env.t.Helper()
	return env.info(topic).Parts[0].Next
}

// expect takes the next delivery from sk and checks its group, offset,
// attempt and data.
func expect(t *testing.T, sk *sink, env *env, group string, offset int64, attempt int, data string) event {
	t.Helper()
	ev := sk.delivery(t, env.timeout)
	if ev.d.Group != group || ev.d.Record.Offset != offset || ev.d.Attempt != attempt || string(ev.d.Record.Data) != data {
		t.Fatalf("got %v %q, want %s offset %d attempt %d %q", ev, ev.d.Record.Data, group, offset, attempt, data)
	}
	return ev
}

// testRedriveToGroupOnly: after group A dead-letters a record that group B
// and a plain observer also got, redrive hands it to A again at the same
// topic, partition and offset, attempt 1; B and the observer never see it
// again and the log's head does not move. It can be acked, or
// dead-lettered and redriven again.
func testRedriveToGroupOnly(t *testing.T, s *suite) {
	policy := fastRetry
	policy.MaxAttempts = 1
	env := s.env(t, Config{Policy: policy})
	topic := env.topic("inplace")
	env.create(engine.TopicConfig{Name: topic, Partitions: 1})
	obs := &tail{}
	defer env.e.Watch(obs)()
	ska, skb := newSink(), newSink()
	ga, gb := env.group("a"), env.group("b")
	env.join(engine.JoinRequest{Group: ga, Pattern: topic, Member: "a"}, ska.consumer("a"))
	env.join(engine.JoinRequest{Group: gb, Pattern: topic, Member: "b"}, skb.consumer("b"))
	env.append(engine.Message{Topic: topic, Key: "k", Headers: map[string]string{"h": "v"}, Data: []byte(`"poison"`)})
	env.append(engine.Message{Topic: topic, Data: []byte(`"fine"`)})

	env.nack(expect(t, ska, env, ga, 0, 1, `"poison"`), "no")
	env.ack(expect(t, ska, env, ga, 1, 1, `"fine"`))
	env.ack(expect(t, skb, env, gb, 0, 1, `"poison"`))
	env.ack(expect(t, skb, env, gb, 1, 1, `"fine"`))
	dls := env.waitLetters(topic, engine.DeadLetterFilter{Group: ga}, 1)
	waitUntil(t, env.timeout, "group a to commit past the letter", func() bool {
		return env.groupInfo(ga).Partitions[0].Committed == 2
	})

	if n := env.redrive(engine.RedriveRequest{Group: ga}); n != 1 {
		t.Fatalf("Redrive of group a's letters = %d, want 1", n)
	}
	if dls := env.letters(topic, engine.DeadLetterFilter{Group: ga}); len(dls) != 0 {
		t.Fatalf("letters still listed after redrive: %+v", dls)
	}
	// A barrier: a record appended now reaches group b and the observer
	// right after what came before it, so whatever the redrive might have
	// handed them is in front of it.
	env.append(engine.Message{Topic: topic, Data: []byte(`"after"`)})
	ev := skb.delivery(t, env.timeout)
	if ev.d.Record.Offset != 2 || string(ev.d.Record.Data) != `"after"` {
		t.Fatalf("group b got %v %q after the redrive, want offset 2 \"after\": the redriven record must not reach another group", ev, ev.d.Record.Data)
	}
	env.ack(ev)
	waitUntil(t, env.timeout, "the observer to see offset 2", func() bool { return len(obs.of(topic)) >= 3 })
	if recs := obs.of(topic); len(recs) != 3 || join(dataOf(recs)) != `"poison","fine","after"` {
		t.Fatalf("observer saw %v at offsets %v, want each record once", dataOf(recs), offsetsOf(recs))
	}
	if got := env.head(topic); got != 3 {
		t.Fatalf("the log's head is %d, want 3: the redrive may append nothing", got)
	}

	ev = expect(t, ska, env, ga, 0, 1, `"poison"`)
	if r := ev.d.Record; r.Topic != topic || r.Partition != 0 || r.Key != "k" || r.Headers["h"] != "v" {
		t.Fatalf("redelivered record %+v, want the original's topic, partition, key and headers", r)
	}
	// Dead-lettered again, and redriven again: the count restarts each
	// time, and the redelivery goes out while the group's window is busy.
	env.nack(ev, "still no")
	after := expect(t, ska, env, ga, 2, 1, `"after"`)
	again := env.waitLetters(topic, engine.DeadLetterFilter{Group: ga}, 1)
	if again[0].ID == dls[0].ID || again[0].Record.Offset != 0 || again[0].Attempts != 1 || again[0].Error != "still no" {
		t.Fatalf("second dead letter %+v, want a new letter for offset 0 after 1 attempt", again[0])
	}
	if n := env.redrive(engine.RedriveRequest{Group: ga, IDs: []string{again[0].ID}}); n != 1 {
		t.Fatalf("second Redrive = %d, want 1", n)
	}
	ev = expect(t, ska, env, ga, 0, 1, `"poison"`)
	env.ack(ev)
	env.ack(after)
	wantErr(t, "second Ack of the redriven record", env.e.Ack(ctx(), ga, "a", position(ev.d.Record)), engine.ErrNotInFlight)
	waitUntil(t, env.timeout, "group a to commit everything", func() bool {
		p := env.groupInfo(ga).Partitions[0]
		return p.Committed == 3 && p.InFlight == 0
	})
	if extra := append(ska.pending(), skb.pending()...); len(extra) > 0 {
		t.Errorf("extra deliveries: %v", extra)
	}
	if got := env.head(topic); got != 3 {
		t.Errorf("the log's head is %d after the second redrive, want 3", got)
	}
}

// testRedriveQueueFull: a letter without a group is left alone unless the
// request asks to append it to its topic again.
func testRedriveQueueFull(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	topic := env.topic("qf")
	env.create(engine.TopicConfig{Name: topic, Partitions: 1})
	env.append(engine.Message{Topic: topic, Data: []byte(`"kept"`)})
	rec, _ := env.read(topic, 0, 0, 1)
	if len(rec) != 1 {
		t.Fatalf("read %d records, want 1", len(rec))
	}
	if err := env.e.AddDeadLetter(ctx(), engine.DeadLetter{
		Reason: engine.ReasonQueueFull, Subscriber: "s1", Record: *rec[0],
	}); err != nil {
		t.Fatal(err)
	}
	id := env.waitLetters(topic, engine.DeadLetterFilter{Reason: engine.ReasonQueueFull}, 1)[0].ID

	if n := env.redrive(engine.RedriveRequest{IDs: []string{id}}); n != 0 {
		t.Fatalf("Redrive of a queue_full letter without AppendToTopics = %d, want 0", n)
	}
	if got := env.head(topic); got != 1 {
		t.Fatalf("head %d after a redrive without AppendToTopics, want 1", got)
	}
	if dls := env.letters(topic, engine.DeadLetterFilter{}); len(dls) != 1 || dls[0].ID != id {
		t.Fatalf("letters %+v, want the queue_full letter kept", dls)
	}

	if n := env.redrive(engine.RedriveRequest{IDs: []string{id}, AppendToTopics: true}); n != 1 {
		t.Fatalf("Redrive with AppendToTopics = %d, want 1", n)
	}
	if got := env.head(topic); got != 2 {
		t.Fatalf("head %d after a redrive with AppendToTopics, want 2", got)
	}
	if recs, _ := env.read(topic, 0, 1, 1); len(recs) != 1 || string(recs[0].Data) != `"kept"` {
		t.Fatalf("appended record %v, want the letter's data", dataOf(recs))
	}
	if dls := env.letters(topic, engine.DeadLetterFilter{}); len(dls) != 0 {
		t.Fatalf("letters %+v after the append, want none", dls)
	}
	if n := env.redrive(engine.RedriveRequest{IDs: []string{id}, AppendToTopics: true}); n != 0 {
		t.Errorf("second Redrive of the same id = %d, want 0", n)
	}
}

// testRedriveUnknown: unknown ids redrive nothing and are no error; a
// request naming neither a group nor ids is invalid.
func testRedriveUnknown(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	if n := env.redrive(engine.RedriveRequest{Group: env.group("nobody"), IDs: []string{"no-such-letter"}}); n != 0 {
		t.Errorf("Redrive of an unknown id = %d, want 0", n)
	}
	if n := env.redrive(engine.RedriveRequest{IDs: []string{"no-such-letter"}, AppendToTopics: true}); n != 0 {
		t.Errorf("Redrive of an unknown id with AppendToTopics = %d, want 0", n)
	}
	_, err := env.e.Redrive(ctx(), engine.RedriveRequest{})
	wantErr(t, "Redrive with neither group nor ids", err, engine.ErrInvalidConfig)
}

// testRedriveTrimmed: a letter whose record retention has trimmed cannot
// go back in place: it stays listed (not counted) unless AppendToTopics,
// which appends it at a new offset.
func testRedriveTrimmed(t *testing.T, s *suite) {
	policy := fastRetry
	policy.MaxAttempts = 1
	env := s.env(t, Config{Policy: policy})
	topic := env.topic("trimmed")
	env.create(engine.TopicConfig{Name: topic, Partitions: 1, MaxMessages: 2, OnFull: engine.DropOldest})
	sk := newSink()
	g := env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m"}, sk.consumer("m"))
	env.append(engine.Message{Topic: topic, Data: []byte(`"poison"`)})
	env.nack(expect(t, sk, env, g, 0, 1, `"poison"`), "no")
	env.waitLetters(topic, engine.DeadLetterFilter{Group: g}, 1)
	env.publish(topic, 2, nil) // offsets 1 and 2; offset 0 is trimmed
	env.ack(expect(t, sk, env, g, 1, 1, "0"))
	env.ack(expect(t, sk, env, g, 2, 1, "1"))
	if e := env.info(topic).Parts[0].Earliest; e != 1 {
		t.Fatalf("earliest %d, want 1", e)
	}

	if n := env.redrive(engine.RedriveRequest{Group: g}); n != 0 {
		t.Fatalf("Redrive of a trimmed record = %d, want 0", n)
	}
	if dls := env.letters(topic, engine.DeadLetterFilter{Group: g}); len(dls) != 1 {
		t.Fatalf("letters %+v, want the letter of the trimmed record kept", dls)
	}
	if extra := sk.pending(); len(extra) > 0 {
		t.Fatalf("deliveries after a redrive that redrove nothing: %v", extra)
	}
	if n := env.redrive(engine.RedriveRequest{Group: g, AppendToTopics: true}); n != 1 {
		t.Fatalf("Redrive of a trimmed record with AppendToTopics = %d, want 1", n)
	}
	env.ack(expect(t, sk, env, g, 3, 1, `"poison"`))
	if dls := env.letters(topic, engine.DeadLetterFilter{Group: g}); len(dls) != 0 {
		t.Fatalf("letters %+v after the append, want none", dls)
	}
}

// testRedriveDeletedGroup: the letters of a deleted group have no group to
// go back to: they stay listed unless AppendToTopics appends them.
func testRedriveDeletedGroup(t *testing.T, s *suite) {
	policy := fastRetry
	policy.MaxAttempts = 1
	env := s.env(t, Config{Policy: policy})
	topic, g, sk := env.oneMember("gone")
	env.append(engine.Message{Topic: topic, Data: []byte(`"poison"`)})
	env.nack(expect(t, sk, env, g, 0, 1, `"poison"`), "no")
	env.waitLetters(topic, engine.DeadLetterFilter{Group: g}, 1)
	if err := env.e.DeleteGroup(ctx(), g); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, env.timeout, "the group to be gone", func() bool {
		_, err := env.e.Group(ctx(), g)
		return err != nil
	})
	if n := env.redrive(engine.RedriveRequest{Group: g}); n != 0 {
		t.Fatalf("Redrive of a deleted group's letter = %d, want 0", n)
	}
	if dls := env.letters(topic, engine.DeadLetterFilter{Group: g}); len(dls) != 1 {
		t.Fatalf("letters %+v, want the letter kept", dls)
	}
	if n := env.redrive(engine.RedriveRequest{Group: g, AppendToTopics: true}); n != 1 {
		t.Fatalf("Redrive with AppendToTopics = %d, want 1", n)
	}
	if got := env.head(topic); got != 2 {
		t.Fatalf("head %d after appending the letter, want 2", got)
	}
}
