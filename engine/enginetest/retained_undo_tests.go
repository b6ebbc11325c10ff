package enginetest

// The undo of a retained write (engine.Retainer.UndoRetained): it puts the
// topic back as it was while the topic still holds what the write made,
// and changes nothing once another write has changed it.

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// retainedData returns topic's retained data and whether it has one.
func retainedData(t *testing.T, r engine.Retainer, topic string) (string, bool) {
	t.Helper()
	_, msgs := retainedTopics(t, r, topic)
	m, ok := msgs[topic]
	return string(m.Data), ok
}

// setRetained stores (or removes) a retained message, failing t on an
// error.
func setRetained(t *testing.T, r engine.Retainer, m engine.RetainedMessage) engine.RetainedWrite {
	t.Helper()
	w, err := r.SetRetained(ctx(), m, engine.RetainLimits{})
	if err != nil {
		t.Fatalf("SetRetained(%s, %q): %v", m.Topic, m.Data, err)
	}
	return w
}

func undoRetained(t *testing.T, r engine.Retainer, w engine.RetainedWrite) bool {
	t.Helper()
	ok, err := r.UndoRetained(ctx(), w)
	if err != nil {
		t.Fatalf("UndoRetained(%s rev %d): %v", w.Topic, w.Rev, err)
	}
	return ok
}

// testRetainedUndo: SetRetained returns the message it replaced or
// removed; UndoRetained of the topic's last write puts that message back
// with every field (or removes the topic's message when it had none) and
// reports true; an undo is a write, so a second undo of the same write
// changes nothing; removing what is not there changes nothing and cannot
// be undone.
func testRetainedUndo(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	r := env.retainer()
	n0, b0 := retainedStats(t, r)
	a, b := env.topic("a"), env.topic("b")
	at := time.Date(2026, 12, 3, 8, 0, 0, 0, time.UTC)
	first := engine.RetainedMessage{Topic: a, Key: "k", Headers: map[string]string{"h": "v"}, Data: []byte("1"), QoS: 1, Time: at}

	w1 := setRetained(t, r, first)
	if w1.Topic != a || w1.Had || w1.Rev == 0 {
		t.Fatalf("first write of %s = topic %s, had %v, rev %d; want %s, false, a revision", a, w1.Topic, w1.Had, w1.Rev, a)
	}
	w2 := setRetained(t, r, engine.RetainedMessage{Topic: a, Data: []byte("2"), Time: at})
	if !w2.Had || string(w2.Prev.Data) != "1" || w2.Rev == 0 {
		t.Fatalf("replacing write = had %v, prev %q, rev %d; want true, \"1\", a revision", w2.Had, w2.Prev.Data, w2.Rev)
	}
	if !undoRetained(t, r, w2) {
		t.Fatal("UndoRetained of the topic's last write = false, want true")
	}
	_, msgs := retainedTopics(t, r, a)
	if m := msgs[a]; string(m.Data) != "1" || m.Key != "k" || !maps.Equal(m.Headers, first.Headers) || m.QoS != 1 || !m.Time.Equal(at) {
		t.Errorf("after the undo: %+v, want the first message %+v", m, first)
	}
	if undoRetained(t, r, w2) {
		t.Error("a second UndoRetained of the same write = true, want false (the undo was a write)")
	}
	if undoRetained(t, r, w1) {
		t.Error("UndoRetained of a write replaced since = true, want false")
	}
	if d, ok := retainedData(t, r, a); !ok || d != "1" {
		t.Errorf("after undos that changed nothing: %q (%v), want \"1\"", d, ok)
	}

	// The undo of a removal puts the message back.
	w3 := setRetained(t, r, engine.RetainedMessage{Topic: a})
	if !w3.Had || string(w3.Prev.Data) != "1" || w3.Rev == 0 {
		t.Fatalf("removing write = had %v, prev %q, rev %d; want true, \"1\", a revision", w3.Had, w3.Prev.Data, w3.Rev)
	}
	if _, ok := retainedData(t, r, a); ok {
		t.Fatal("the removal left the message")
	}
	if !undoRetained(t, r, w3) {
		t.Fatal("UndoRetained of a removal = false, want true")
	}
	if d, ok := retainedData(t, r, a); !ok || d != "1" {
		t.Errorf("after undoing the removal: %q (%v), want \"1\"", d, ok)
	}

	// The undo of a topic's first message removes it.
	wb := setRetained(t, r, engine.RetainedMessage{Topic: b, Data: []byte("b")})
	if !undoRetained(t, r, wb) {
		t.Fatal("UndoRetained of a new topic's message = false, want true")
	}
	if _, ok := retainedData(t, r, b); ok {
		t.Error("after undoing a new topic's message, the topic still has one")
	}
	firstSize := first.Size() // topic, key, header, data
	if n, bytes := retainedStats(t, r); n != n0+1 || bytes != b0+firstSize {
		t.Errorf("RetainedStats = %d, %d; want %d, %d (the first message of a only)", n, bytes, n0+1, b0+firstSize)
	}

	// Removing what is not there changes nothing to undo.
	wn := setRetained(t, r, engine.RetainedMessage{Topic: env.topic("none")})
	if wn.Rev != 0 || wn.Had {
		t.Errorf("removing nothing = rev %d, had %v; want 0, false", wn.Rev, wn.Had)
	}
	if undoRetained(t, r, wn) {
		t.Error("UndoRetained of a removal of nothing = true, want false")
	}
	setRetained(t, r, engine.RetainedMessage{Topic: a})
}

// testRetainedUndoAfterAnotherWrite: once another write has changed the
// topic (a store, a removal, or a store then a removal that leave it as
// the undone write did), UndoRetained changes nothing and reports false.
func testRetainedUndoAfterAnotherWrite(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	r := env.retainer()
	a, b, c := env.topic("a"), env.topic("b"), env.topic("c")
	defer func() {
		for _, topic := range []string{a, b, c} {
			_, _ = r.SetRetained(ctx(), engine.RetainedMessage{Topic: topic}, engine.RetainLimits{})
		}
	}()

	setRetained(t, r, engine.RetainedMessage{Topic: a, Data: []byte("before")})
	w := setRetained(t, r, engine.RetainedMessage{Topic: a, Data: []byte("mine")})
	setRetained(t, r, engine.RetainedMessage{Topic: a, Data: []byte("theirs")})
	if undoRetained(t, r, w) {
		t.Error("UndoRetained after another store = true, want false")
	}
	if d, _ := retainedData(t, r, a); d != "theirs" {
		t.Errorf("after the undo: %q, want the other writer's \"theirs\"", d)
	}

	w = setRetained(t, r, engine.RetainedMessage{Topic: b, Data: []byte("mine")})
	setRetained(t, r, engine.RetainedMessage{Topic: b})
	if undoRetained(t, r, w) {
		t.Error("UndoRetained after another removal = true, want false")
	}
	if d, ok := retainedData(t, r, b); ok {
		t.Errorf("after the undo: %q, want the other writer's removal kept", d)
	}

	setRetained(t, r, engine.RetainedMessage{Topic: c, Data: []byte("before")})
	w = setRetained(t, r, engine.RetainedMessage{Topic: c})
	setRetained(t, r, engine.RetainedMessage{Topic: c, Data: []byte("theirs")})
	setRetained(t, r, engine.RetainedMessage{Topic: c})
	if undoRetained(t, r, w) {
		t.Error("UndoRetained of a removal after another store and removal = true, want false")
	}
	if d, ok := retainedData(t, r, c); ok {
		t.Errorf("after the undo: %q, want none (the other writer's removal)", d)
	}
}

// testRetainedUndoConcurrent: writers of one topic each store a message
// and undo it at once, concurrently. An undo that reported true removed
// its message for good (nothing was written between the write and its
// undo, so no later undo puts it back): the topic ends with the first
// message or one whose undo reported false.
func testRetainedUndoConcurrent(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	r := env.retainer()
	topic := env.topic("t")
	setRetained(t, r, engine.RetainedMessage{Topic: topic, Data: []byte("first")})
	defer func() { _, _ = r.SetRetained(ctx(), engine.RetainedMessage{Topic: topic}, engine.RetainLimits{}) }()
	const writers, rounds = 4, 5
	kept := make([][]string, writers) // by writer, the messages its undo left
	errs := make(chan error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range rounds {
				data := fmt.Sprintf("w%d-%d", i, j)
				w, err := r.SetRetained(ctx(), engine.RetainedMessage{Topic: topic, Data: []byte(data)}, engine.RetainLimits{})
				if err != nil {
					errs <- err
					return
				}
				ok, err := r.UndoRetained(ctx(), w)
				if err != nil {
					errs <- err
					return
				}
				if !ok {
					kept[i] = append(kept[i], data)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("SetRetained or UndoRetained: %v", err)
	}
	d, ok := retainedData(t, r, topic)
	allowed := []string{"first"}
	for _, k := range kept {
		allowed = append(allowed, k...)
	}
	if !ok || !slices.Contains(allowed, d) {
		t.Errorf("the topic ends with %q (%v), want one of %q (the first message or one whose undo reported false)", d, ok, allowed)
	}
}
