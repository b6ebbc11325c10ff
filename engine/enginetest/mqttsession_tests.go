package enginetest

import (
	"errors"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// mqttStore returns env's engine as an engine.MQTTSessionStore, skipping
// when it is not one.
func (env *env) mqttStore() engine.MQTTSessionStore {
	env.t.Helper()
	st, ok := env.e.(engine.MQTTSessionStore)
	if !ok {
		env.t.Skip("the engine does not implement engine.MQTTSessionStore")
	}
	return st
}

func mustLoad(t *testing.T, st engine.MQTTSessionStore, id string, now time.Time) (engine.MQTTSession, bool) {
	t.Helper()
	s, ok, err := st.LoadMQTTSession(ctx(), id, now)
	if err != nil {
		t.Fatalf("LoadMQTTSession(%s): %v", id, err)
	}
	return s, ok
}

// testMQTTSessions: a claim stores a session with every field kept; a save
// by its owner replaces it; a save by another connection, or after the
// record was removed, fails with ErrMQTTSessionMoved and changes nothing;
// a delete names its owner or none.
func testMQTTSessions(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	st := env.mqttStore()
	id := env.base + "/c1"
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	if _, ok := mustLoad(t, st, id, now); ok {
		t.Fatalf("a session before any save")
	}
	topic := env.topic("t")
	sess := engine.MQTTSession{ClientID: id, Owner: "a", Claim: true, Expiry: time.Hour, Epoch: "e1",
		Subs: []engine.MQTTSubscription{{Filter: "x/+", QoS: 1, NoLocal: true, RetainAsPublished: true, Since: now,
			Next:     []engine.MQTTPosition{{Pattern: env.base + ".*", Position: engine.Position{Topic: topic, Partition: 2, Offset: 7}}},
			InFlight: []engine.MQTTPosition{{Pattern: env.base + ".*", Position: engine.Position{Topic: topic, Partition: 2, Offset: 5}}}}}}
	if err := st.SaveMQTTSession(ctx(), sess, engine.MQTTSessionLimits{}); err != nil {
		t.Fatalf("claim: %v", err)
	}
	got, ok := mustLoad(t, st, id, now)
	sb := got.Subs
	if !ok || got.Owner != "a" || got.Claim || got.Expiry != time.Hour || got.Epoch != "e1" || len(sb) != 1 ||
		sb[0].Filter != "x/+" || sb[0].QoS != 1 || !sb[0].NoLocal || !sb[0].RetainAsPublished || !sb[0].Since.Equal(now) ||
		len(sb[0].Next) != 1 || sb[0].Next[0].Offset != 7 || sb[0].Next[0].Partition != 2 || sb[0].Next[0].Topic != topic ||
		len(sb[0].InFlight) != 1 || sb[0].InFlight[0].Offset != 5 {
		t.Fatalf("loaded %+v (found %v), want the saved session", got, ok)
	}
	// The owner saves again (it went away: an expiry time).
	sess.Claim, sess.ExpiresAt = false, now.Add(time.Hour)
	if err := st.SaveMQTTSession(ctx(), sess, engine.MQTTSessionLimits{}); err != nil {
		t.Fatalf("owner's save: %v", err)
	}
	// Another connection claims it; the first may no longer write it.
	b := sess
	b.Owner, b.Claim, b.ExpiresAt = "b", true, time.Time{}
	if err := st.SaveMQTTSession(ctx(), b, engine.MQTTSessionLimits{}); err != nil {
		t.Fatalf("second claim: %v", err)
	}
	sess.Subs = nil
	if err := st.SaveMQTTSession(ctx(), sess, engine.MQTTSessionLimits{}); !errors.Is(err, engine.ErrMQTTSessionMoved) {
		t.Fatalf("earlier owner's save = %v, want ErrMQTTSessionMoved", err)
	}
	if got, _ := mustLoad(t, st, id, now); got.Owner != "b" || len(got.Subs) != 1 {
		t.Fatalf("after a refused save: %+v, want b's session unchanged", got)
	}
	// A delete by a connection that is not the owner changes nothing.
	if err := st.DeleteMQTTSession(ctx(), id, "a"); err != nil {
		t.Fatalf("delete by a: %v", err)
	}
	if _, ok := mustLoad(t, st, id, now); !ok {
		t.Fatalf("a delete by a non-owner removed the session")
	}
	if err := st.DeleteMQTTSession(ctx(), id, ""); err != nil {
		t.Fatalf("delete: %v", err)
	}
	if _, ok := mustLoad(t, st, id, now); ok {
		t.Fatalf("the session is there after its delete")
	}
	b.Claim = false
	if err := st.SaveMQTTSession(ctx(), b, engine.MQTTSessionLimits{}); !errors.Is(err, engine.ErrMQTTSessionMoved) {
		t.Fatalf("owner's save after a delete = %v, want ErrMQTTSessionMoved (a clean start removed it)", err)
	}
	if err := st.DeleteMQTTSession(ctx(), id, ""); err != nil {
		t.Fatalf("deleting what is absent: %v", err)
	}
}

// testMQTTSessionBounds: the count bound refuses a new client id (not one
// the store holds), the bytes bound refuses a large record, and an expired
// session is gone for Load and for ExpireMQTTSessions, while a connected
// one (no expiry time) stays.
func testMQTTSessionBounds(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	st := env.mqttStore()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	// Sessions of earlier tests on a shared engine count too: expire
	// what may be left, then read the count from an expiry in the past.
	_, base, err := st.ExpireMQTTSessions(ctx(), now.Add(-24*time.Hour))
	if err != nil {
		t.Fatalf("ExpireMQTTSessions: %v", err)
	}
	lim := engine.MQTTSessionLimits{MaxCount: base + 2, MaxBytes: 4096}
	mk := func(id string, exp time.Time) engine.MQTTSession {
		return engine.MQTTSession{ClientID: env.base + "/" + id, Owner: id, Claim: true, Expiry: time.Minute, ExpiresAt: exp}
	}
	if err := st.SaveMQTTSession(ctx(), mk("a", now.Add(time.Minute)), lim); err != nil {
		t.Fatalf("save a: %v", err)
	}
	if err := st.SaveMQTTSession(ctx(), mk("b", time.Time{}), lim); err != nil {
		t.Fatalf("save b: %v", err)
	}
	if err := st.SaveMQTTSession(ctx(), mk("c", time.Time{}), lim); !errors.Is(err, engine.ErrMQTTSessionsFull) {
		t.Fatalf("a third session = %v, want ErrMQTTSessionsFull", err)
	}
	if err := st.SaveMQTTSession(ctx(), mk("a", now.Add(time.Minute)), lim); err != nil {
		t.Fatalf("replacing a at the bound: %v", err)
	}
	big := mk("a", time.Time{})
	big.Subs = []engine.MQTTSubscription{{Filter: string(make([]byte, 5000))}}
	if err := st.SaveMQTTSession(ctx(), big, lim); !errors.Is(err, engine.ErrMQTTSessionTooLarge) {
		t.Fatalf("a session over MaxBytes = %v, want ErrMQTTSessionTooLarge", err)
	}
	if _, ok := mustLoad(t, st, env.base+"/a", now.Add(2*time.Minute)); ok {
		t.Fatalf("an expired session loaded")
	}
	if err := st.SaveMQTTSession(ctx(), mk("a", now.Add(time.Minute)), lim); err != nil {
		t.Fatalf("save a again: %v", err)
	}
	removed, left, err := st.ExpireMQTTSessions(ctx(), now.Add(2*time.Minute))
	if err != nil || removed < 1 || left != base+1 {
		t.Fatalf("ExpireMQTTSessions = %d removed, %d left, %v; want >= 1 and %d left", removed, left, err, base+1)
	}
	if _, ok := mustLoad(t, st, env.base+"/b", now.Add(time.Hour)); !ok {
		t.Fatalf("a connected session (no expiry time) expired")
	}
	if err := st.DeleteMQTTSession(ctx(), env.base+"/b", "b"); err != nil {
		t.Fatalf("delete b: %v", err)
	}
}

// testMQTTSessionHolds: a hold (a record with Expiry zero) is stored and
// loaded like a session, but counts neither against MaxCount nor among
// the sessions ExpireMQTTSessions reports left, and is stored when the
// store is full.
func testMQTTSessionHolds(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	st := env.mqttStore()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	_, base, err := st.ExpireMQTTSessions(ctx(), now.Add(-24*time.Hour))
	if err != nil {
		t.Fatalf("ExpireMQTTSessions: %v", err)
	}
	lim := engine.MQTTSessionLimits{MaxCount: base + 1, MaxBytes: 4096}
	a := engine.MQTTSession{ClientID: env.base + "/a", Owner: "a", Claim: true, Expiry: time.Minute}
	if err := st.SaveMQTTSession(ctx(), a, lim); err != nil {
		t.Fatalf("save a: %v", err)
	}
	h := engine.MQTTSession{ClientID: env.base + "/h", Owner: "h", Claim: true}
	if err := st.SaveMQTTSession(ctx(), h, lim); err != nil {
		t.Fatalf("a hold with the store full = %v, want stored", err)
	}
	got, ok := mustLoad(t, st, h.ClientID, now)
	if !ok || !got.IsHold() || got.Owner != "h" {
		t.Fatalf("hold loaded as %+v (%v)", got, ok)
	}
	b := engine.MQTTSession{ClientID: env.base + "/b", Owner: "b", Claim: true, Expiry: time.Minute}
	if err := st.SaveMQTTSession(ctx(), b, lim); !errors.Is(err, engine.ErrMQTTSessionsFull) {
		t.Fatalf("a second session = %v, want ErrMQTTSessionsFull (the hold does not free room)", err)
	}
	if _, left, err := st.ExpireMQTTSessions(ctx(), now); err != nil || left != base+1 {
		t.Fatalf("ExpireMQTTSessions left %d (%v), want %d: a hold counted", left, err, base+1)
	}
	// A hold claimed by a session (and back) moves the count with it.
	b.ClientID = h.ClientID
	if err := st.SaveMQTTSession(ctx(), b, lim); !errors.Is(err, engine.ErrMQTTSessionsFull) {
		t.Fatalf("a session over a hold with the store full = %v, want ErrMQTTSessionsFull", err)
	}
	for _, s := range []engine.MQTTSession{a, h} {
		if err := st.DeleteMQTTSession(ctx(), s.ClientID, ""); err != nil {
			t.Fatalf("delete %s: %v", s.ClientID, err)
		}
	}
}

// testMQTTSessionWatch: an engine that is an engine.MQTTSessionWatcher
// reports every save and removal, in order, with its owner and node, and
// its view names the holder.
func testMQTTSessionWatch(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	st := env.mqttStore()
	w, ok := env.e.(engine.MQTTSessionWatcher)
	if !ok {
		t.Skip("the engine does not implement engine.MQTTSessionWatcher")
	}
	type ev struct{ id, owner, node string }
	evs := make(chan ev, 64)
	id := env.base + "/w"
	stop := w.WatchMQTTSessions(func(clientID, owner, node string) {
		if clientID == id {
			select {
			case evs <- ev{clientID, owner, node}:
			default:
				t.Errorf("more events than the test made")
			}
		}
	})
	defer stop()
	next := func(want ev) {
		t.Helper()
		select {
		case got := <-evs:
			if got != want {
				t.Fatalf("event %+v, want %+v", got, want)
			}
		case <-time.After(env.timeout):
			t.Fatalf("no event %+v within %v", want, env.timeout)
		}
	}
	lim := engine.MQTTSessionLimits{}
	for _, owner := range []string{"x", "y"} {
		if err := st.SaveMQTTSession(ctx(), engine.MQTTSession{ClientID: id, Owner: owner, Node: "n" + owner, Claim: true}, lim); err != nil {
			t.Fatalf("claim by %s: %v", owner, err)
		}
		next(ev{id, owner, "n" + owner})
		if o, n, ok := w.MQTTSessionHolder(id); !ok || o != owner || n != "n"+owner {
			t.Fatalf("holder (%q, %q, %v) after %s's claim", o, n, ok, owner)
		}
	}
	if err := st.DeleteMQTTSession(ctx(), id, "y"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	next(ev{id, "", ""})
	if _, _, ok := w.MQTTSessionHolder(id); ok {
		t.Fatal("a holder after the removal")
	}
}

// testMQTTSessionRestore: a Restore save puts back a record removed
// meanwhile, or saves over its owner's, and fails with
// ErrMQTTSessionMoved, changing nothing, over another owner's record.
func testMQTTSessionRestore(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	st := env.mqttStore()
	id := env.base + "/r"
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	lim := engine.MQTTSessionLimits{}
	a := engine.MQTTSession{ClientID: id, Owner: "a", Node: "na", Claim: true}
	if err := st.SaveMQTTSession(ctx(), a, lim); err != nil {
		t.Fatalf("claim: %v", err)
	}
	if err := st.DeleteMQTTSession(ctx(), id, ""); err != nil {
		t.Fatalf("delete: %v", err)
	}
	a.Claim, a.Restore = false, true
	if err := st.SaveMQTTSession(ctx(), a, lim); err != nil {
		t.Fatalf("restore of a removed record: %v", err)
	}
	if got, ok := mustLoad(t, st, id, now); !ok || got.Owner != "a" || got.Restore || got.Claim {
		t.Fatalf("after the restore: %+v (found %v), want a's record", got, ok)
	}
	if err := st.SaveMQTTSession(ctx(), a, lim); err != nil {
		t.Fatalf("restore over the owner's record: %v", err)
	}
	b := engine.MQTTSession{ClientID: id, Owner: "b", Node: "nb", Claim: true}
	if err := st.SaveMQTTSession(ctx(), b, lim); err != nil {
		t.Fatalf("b's claim: %v", err)
	}
	if err := st.SaveMQTTSession(ctx(), a, lim); !errors.Is(err, engine.ErrMQTTSessionMoved) {
		t.Fatalf("restore over another owner's record = %v, want ErrMQTTSessionMoved", err)
	}
	if got, ok := mustLoad(t, st, id, now); !ok || got.Owner != "b" {
		t.Fatalf("after a refused restore: %+v (found %v), want b's record", got, ok)
	}
	if err := st.DeleteMQTTSession(ctx(), id, ""); err != nil {
		t.Fatalf("delete: %v", err)
	}
}
