package enginetest

import (
	"slices"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// retainer returns env's engine as an engine.Retainer, skipping when it
// is not one.
func (env *env) retainer() engine.Retainer {
	env.t.Helper()
	r, ok := env.e.(engine.Retainer)
	if !ok {
		env.t.Skip("the engine does not implement engine.Retainer")
	}
	return r
}

// retainedTopics returns the sorted topics of the retained messages
// matching pattern, and the messages by topic.
func retainedTopics(t *testing.T, r engine.Retainer, pattern string) ([]string, map[string]engine.RetainedMessage) {
	t.Helper()
	var topics []string
	msgs := map[string]engine.RetainedMessage{}
	if err := r.Retained(ctx(), pattern, func(m engine.RetainedMessage) bool {
		topics = append(topics, m.Topic)
		msgs[m.Topic] = m
		return true
	}); err != nil {
		t.Fatalf("Retained(%s): %v", pattern, err)
	}
	slices.Sort(topics)
	return topics, msgs
}

func retainedStats(t *testing.T, r engine.Retainer) (int, int64) {
	t.Helper()
	n, b, err := r.RetainedStats(ctx())
	if err != nil {
		t.Fatalf("RetainedStats: %v", err)
	}
	return n, b
}

// testRetained: one retained message per topic, replaced by the next and
// removed by an empty one; listed by pattern with every field kept.
func testRetained(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	r := env.retainer()
	n0, b0 := retainedStats(t, r)
	a, b, c := env.topic("a.x"), env.topic("b.x"), env.topic("a.y.z")
	at := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	set := func(m engine.RetainedMessage) {
		t.Helper()
		if err := r.SetRetained(ctx(), m, engine.RetainLimits{}); err != nil {
			t.Fatalf("SetRetained(%s): %v", m.Topic, err)
		}
	}
	set(engine.RetainedMessage{Topic: a, Key: "k", Headers: map[string]string{"h": "v"}, Data: []byte("1"), QoS: 1, Time: at})
	set(engine.RetainedMessage{Topic: a, Data: []byte("two"), QoS: 2, Time: at})
	set(engine.RetainedMessage{Topic: b, Data: []byte("b")})
	set(engine.RetainedMessage{Topic: c, Data: []byte("c")})
	set(engine.RetainedMessage{Topic: env.topic("none"), Data: nil}) // removing what is not there

	if got, want := mustTopics(t, r, env.base+".#"), []string{a, c, b}; !slices.Equal(got, want) {
		t.Errorf("Retained(base.#) = %q, want %q", got, want)
	}
	if got, want := mustTopics(t, r, env.base+".*.x"), []string{a, b}; !slices.Equal(got, want) {
		t.Errorf("Retained(base.*.x) = %q, want %q", got, want)
	}
	if got := mustTopics(t, r, env.base+".a"); len(got) != 0 {
		t.Errorf("Retained(base.a) = %q, want none", got)
	}
	_, msgs := retainedTopics(t, r, a)
	m := msgs[a]
	if string(m.Data) != "two" || m.QoS != 2 || !m.Time.Equal(at) || m.Key != "" || len(m.Headers) != 0 {
		t.Errorf("replaced message = %+v, want data two, QoS 2, time %v, no key or headers", m, at)
	}
	if n, bytes := retainedStats(t, r); n != n0+3 || bytes != b0+int64(len(a)+3+len(b)+1+len(c)+1) {
		t.Errorf("RetainedStats = %d, %d; want %d, %d", n, bytes, n0+3, b0+int64(len(a)+3+len(b)+1+len(c)+1))
	}

	set(engine.RetainedMessage{Topic: a})
	if got, want := mustTopics(t, r, env.base+".#"), []string{c, b}; !slices.Equal(got, want) {
		t.Errorf("after removing %s: Retained = %q, want %q", a, got, want)
	}
	calls := 0
	if err := r.Retained(ctx(), env.base+".#", func(engine.RetainedMessage) bool { calls++; return false }); err != nil || calls != 1 {
		t.Errorf("Retained stopped by fn: %d calls, err %v; want 1, nil", calls, err)
	}
	set(engine.RetainedMessage{Topic: b})
	set(engine.RetainedMessage{Topic: c})
	if n, bytes := retainedStats(t, r); n != n0 || bytes != b0 {
		t.Errorf("RetainedStats after removing all = %d, %d; want %d, %d", n, bytes, n0, b0)
	}
}

func mustTopics(t *testing.T, r engine.Retainer, pattern string) []string {
	t.Helper()
	topics, _ := retainedTopics(t, r, pattern)
	return topics
}

// testRetainedBounds: a new topic past the count or byte bound is refused
// with ErrRetainedFull and changes nothing; replacing a topic's message
// needs room only for its growth; removing makes room.
func testRetainedBounds(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	r := env.retainer()
	n0, b0 := retainedStats(t, r)
	a, b := env.topic("a"), env.topic("b")
	defer func() {
		for _, topic := range []string{a, b} {
			_ = r.SetRetained(ctx(), engine.RetainedMessage{Topic: topic}, engine.RetainLimits{})
		}
	}()
	byCount := engine.RetainLimits{MaxCount: n0 + 1}
	if err := r.SetRetained(ctx(), engine.RetainedMessage{Topic: a, Data: []byte("1")}, byCount); err != nil {
		t.Fatalf("SetRetained within the count bound: %v", err)
	}
	err := r.SetRetained(ctx(), engine.RetainedMessage{Topic: b, Data: []byte("1")}, byCount)
	wantErr(t, "SetRetained of a new topic past the count bound", err, engine.ErrRetainedFull)
	if err := r.SetRetained(ctx(), engine.RetainedMessage{Topic: a, Data: []byte("22")}, byCount); err != nil {
		t.Errorf("replacing a message at the count bound: %v", err)
	}
	if got := mustTopics(t, r, b); len(got) != 0 {
		t.Errorf("a refused message was stored: %q", got)
	}

	// a holds len(a)+2 bytes; room for one more byte.
	byBytes := engine.RetainLimits{MaxBytes: b0 + int64(len(a)) + 3}
	err = r.SetRetained(ctx(), engine.RetainedMessage{Topic: a, Data: []byte("4444")}, byBytes)
	wantErr(t, "replacing a message past the byte bound", err, engine.ErrRetainedFull)
	if err := r.SetRetained(ctx(), engine.RetainedMessage{Topic: a, Data: []byte("333")}, byBytes); err != nil {
		t.Errorf("replacing a message within the byte bound: %v", err)
	}
	err = r.SetRetained(ctx(), engine.RetainedMessage{Topic: b, Data: []byte("1")}, byBytes)
	wantErr(t, "SetRetained of a new topic past the byte bound", err, engine.ErrRetainedFull)
	if err := r.SetRetained(ctx(), engine.RetainedMessage{Topic: a}, byBytes); err != nil {
		t.Errorf("removing a message at the bound: %v", err)
	}
	if err := r.SetRetained(ctx(), engine.RetainedMessage{Topic: b, Data: []byte("1")}, byBytes); err != nil {
		t.Errorf("SetRetained once removing made room: %v", err)
	}
	if n, _ := retainedStats(t, r); n != n0+1 {
		t.Errorf("RetainedStats count = %d, want %d", n, n0+1)
	}
}
