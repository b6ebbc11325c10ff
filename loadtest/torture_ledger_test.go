package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// ledgerFixture is a ledger of one deletable topic of one partition and
// one non-deletable topic, with no gateway behind it.
func ledgerFixture() *ledger {
	return newLedger([]*tortureTopic{
		{name: "tt.d.0", parts: 1, deletable: true},
		{name: "tt.k.0", parts: 1},
	}, time.Hour, &overloadWatch{})
}

// deliver feeds v the messages [from, to) of topic's generation gen.
func deliver(v *sview, topic string, gen int64, from, to int64) {
	for off := from; off < to; off++ {
		v.message(topic, gen, 0, off, time.Time{})
	}
}

// TestLedgerGapGoesToTheGenerationBeingDelivered replays what a heavily
// loaded run saw: older generations of a topic that the subscriber saw end
// at offset 88, the current one reaching offset 88, then "gap 89-103"
// and offset 104 of the current one. The gap is the current generation's.
func TestLedgerGapGoesToTheGenerationBeingDelivered(t *testing.T) {
	const topic = "tt.d.0"
	// Several subscribers, each with four older generations ending where
	// the current one is when the gap arrives: a checker that picks any
	// generation ending there picks the wrong one for one of them.
	for i := range 8 {
		l := ledgerFixture()
		v := l.newView(fmt.Sprintf("raw%d", i), "tt.d.*", true)
		v.confirmed(time.Now())
		for gen := int64(1); gen <= 4; gen++ {
			deliver(v, topic, gen, 0, 89)
			v.topicDeleted(topic)
		}
		deliver(v, topic, 5, 0, 89)
		v.gap(topic, 0, 89, 104)
		deliver(v, topic, 5, 104, 110)
		if n := l.v1.count(); n != 0 {
			t.Fatalf("%s: %d violations, want none: %q", v.name, n, l.v1.examples())
		}
	}
}

// TestLedgerGapOfAnOlderGenerationArrivingLate: the gateway may write a
// deleted generation's gap only when the stream has drained, after the
// re-created generation reached the same offset; the re-created one's next
// message, at the gap's first offset, shows whose gap it was.
func TestLedgerGapOfAnOlderGenerationArrivingLate(t *testing.T) {
	const topic = "tt.d.0"
	// A checker that guesses either generation guesses wrong for about
	// half of the subscribers.
	for i := range 20 {
		l := ledgerFixture()
		v := l.newView(fmt.Sprintf("raw%d", i), "tt.d.*", true)
		v.confirmed(time.Now())
		deliver(v, topic, 1, 0, 89)
		v.topicDeleted(topic)
		deliver(v, topic, 2, 0, 89)
		v.gap(topic, 0, 89, 104) // generation 1's records 89-103, dropped
		deliver(v, topic, 2, 89, 110)
		if n := l.v1.count(); n != 0 {
			t.Fatalf("%s: %d violations, want none: %q", v.name, n, l.v1.examples())
		}
	}
}

// TestLedgerSkipStillCaught keeps the invariant honest: a jump that no
// gap accounts for is reported, in the current generation and in a topic
// never deleted, even when another generation's gap is nearby.
func TestLedgerSkipStillCaught(t *testing.T) {
	for _, tc := range []struct {
		name string
		feed func(v *sview)
	}{
		{"gap of an older generation", func(v *sview) {
			deliver(v, "tt.d.0", 1, 0, 89)
			v.topicDeleted("tt.d.0")
			deliver(v, "tt.d.0", 2, 0, 50)
			v.gap("tt.d.0", 0, 89, 104) // continues generation 1 only
			deliver(v, "tt.d.0", 2, 60, 61)
		}},
		{"no gap at all", func(v *sview) {
			deliver(v, "tt.d.0", 1, 0, 89)
			v.topicDeleted("tt.d.0")
			deliver(v, "tt.d.0", 2, 0, 89)
			deliver(v, "tt.d.0", 2, 104, 105)
		}},
		{"skip after a gap shown to be another generation's", func(v *sview) {
			deliver(v, "tt.d.0", 1, 0, 89)
			v.topicDeleted("tt.d.0")
			deliver(v, "tt.d.0", 2, 0, 89)
			v.gap("tt.d.0", 0, 89, 104)
			deliver(v, "tt.d.0", 2, 89, 90)
			deliver(v, "tt.d.0", 2, 95, 96)
		}},
		{"duplicate within a generation", func(v *sview) {
			deliver(v, "tt.d.0", 1, 0, 89)
			v.topicDeleted("tt.d.0")
			deliver(v, "tt.d.0", 2, 0, 89)
			v.gap("tt.d.0", 0, 89, 104)
			deliver(v, "tt.d.0", 2, 104, 105)
			deliver(v, "tt.d.0", 2, 89, 90)
		}},
		{"gap ends short", func(v *sview) {
			deliver(v, "tt.k.0", 0, 0, 89)
			v.gap("tt.k.0", 0, 89, 100)
			deliver(v, "tt.k.0", 0, 104, 105)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := ledgerFixture()
			v := l.newView("raw0", "tt.*.0", true)
			v.confirmed(time.Now())
			tc.feed(v)
			if n := l.v1.count(); n != 1 {
				t.Fatalf("%d violations, want 1: %q", n, l.v1.examples())
			}
		})
	}
}

// TestLedgerStallExcusesGapOfARecreatedTopic: a gap over the first records
// of a re-created topic continues no generation the subscriber saw and is
// kept aside; the stall check accepts it as the end check does, and still
// reports what no gap covers.
func TestLedgerStallExcusesGapOfARecreatedTopic(t *testing.T) {
	const topic = "tt.d.0"
	l := ledgerFixture()
	v := l.newView("raw0", "tt.d.0", true)
	v.confirmed(time.Now().Add(-time.Second))
	for off := range int64(10) {
		l.published(topic, 1, 0, off, time.Now())
	}
	deliver(v, topic, 1, 0, 10)
	l.deleted(topic, 1)
	v.topicDeleted(topic)
	for off := range int64(8) {
		l.published(topic, 2, 0, off, time.Now())
	}
	v.gap(topic, 0, 0, 6) // the new generation's records 0-5, dropped
	v.checkStalls(time.Now().Add(time.Hour))
	if n := l.v2.count(); n != 1 {
		t.Fatalf("%d stalls, want 1 (offset 6): %q", n, l.v2.examples())
	}
	if ex := l.v2.examples(); !strings.Contains(ex[0], "offset 6 not received") {
		t.Fatalf("stall reported: %q, want offset 6", ex)
	}
	if n := v.missing(false); n != 2 {
		t.Fatalf("%d records missing, want 2 (offsets 6 and 7)", n)
	}
}

// TestTortureRecreateAfterLostDeleteReply: a DELETE whose connection is
// cut after the gateway deleted the topic is sent again; the gateway's 404
// says the topic is gone, so the books start its next generation.
func TestTortureRecreateAfterLostDeleteReply(t *testing.T) {
	var deletes, creates atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodDelete && deletes.Add(1) == 1:
			// Deleted, but the reply is lost with the connection.
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		case r.Method == http.MethodDelete:
			w.WriteHeader(http.StatusNotFound)
		case r.Method == http.MethodPost:
			creates.Add(1)
			w.WriteHeader(http.StatusCreated)
		default:
			w.WriteHeader(http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	defer http.DefaultClient.CloseIdleConnections()
	l := ledgerFixture()
	tr := &torture{gw: &tortureGateway{nodes: []*tortureNode{{httpURL: srv.URL}}}, l: l}
	topic := l.topics["tt.d.0"]
	l.published(topic.name, 0, 0, 0, time.Now())
	tr.recreate(context.Background(), topic)
	if g := topic.gen.Load(); g != 1 || !l.isDeleted(pkey{topic.name, 0, 0}) {
		t.Fatalf("generation %d (deleted in the books: %v), want 1 and the old one deleted", g, l.isDeleted(pkey{topic.name, 0, 0}))
	}
	if d, c := deletes.Load(), creates.Load(); d != 2 || c != 1 {
		t.Fatalf("%d DELETEs and %d creates, want 2 and 1", d, c)
	}
}

// TestTorturePositionsBeforeAGuessedGap: a resume asks for a partition
// from before a gap that may be another generation's, so that the records
// it covers are not lost to the guess; a message at the gap's first offset
// then settles whose gap it was, and nothing is reported.
func TestTorturePositionsBeforeAGuessedGap(t *testing.T) {
	const topic = "tt.d.0"
	l := ledgerFixture()
	tr := &torture{l: l}
	l.topics[topic].gen.Store(2)
	v := l.newView("raw0", "tt.d.0", true)
	v.confirmed(time.Now())
	deliver(v, topic, 1, 0, 89)
	v.topicDeleted(topic)
	deliver(v, topic, 2, 0, 89)
	v.gap(topic, 0, 89, 104)
	pos := tr.positions(v)
	if len(pos) != 1 || pos[0]["offset"] != int64(88) {
		t.Fatalf("positions %v, want %s/0 at offset 88", pos, topic)
	}
	v.lost()
	v.confirmed(time.Now())
	deliver(v, topic, 2, 89, 110)
	if n := l.v1.count(); n != 0 {
		t.Fatalf("%d violations, want none: %q", n, l.v1.examples())
	}
}

// resumedFixture is a subscriber of tt.k.0 (stall bound 2 s) that received
// offsets 0-4, was away while 5-9 were acknowledged, and resubscribed at
// t1; 10-14 were published after it, from t1+100ms. Nothing of the replay
// has arrived yet.
func resumedFixture(t *testing.T) (l *ledger, v *sview, t1 time.Time) {
	t.Helper()
	const topic = "tt.k.0"
	l = newLedger([]*tortureTopic{{name: topic, parts: 1}}, 2*time.Second, &overloadWatch{})
	t0 := time.Now()
	v = l.newView("raw0", topic, true)
	v.confirmed(t0)
	for off := range int64(5) {
		at := t0.Add(time.Duration(off+1) * time.Millisecond)
		l.published(topic, 1, 0, off, at)
		v.messageAt(topic, 1, 0, off, at, at.Add(time.Millisecond))
	}
	v.lost()
	for off := int64(5); off < 10; off++ {
		l.published(topic, 1, 0, off, t0.Add(10*time.Second+time.Duration(off)*time.Millisecond))
	}
	t1 = t0.Add(20 * time.Second)
	v.confirmed(t1)
	for off := int64(10); off < 15; off++ {
		l.published(topic, 1, 0, off, t1.Add(100*time.Millisecond+time.Duration(off)*time.Millisecond))
	}
	return l, v, t1
}

// TestLedgerStallClockStartsWhenTheResumeCaughtUp: a record published
// after a resubscribe queues behind the replay of what the subscriber
// missed; its stall clock starts when the replay is done, not when it was
// published (a cluster run saw a resumed SSE stream's live records 2.2 s
// after their publish, behind 5 s of replay).
func TestLedgerStallClockStartsWhenTheResumeCaughtUp(t *testing.T) {
	const topic = "tt.k.0"
	l, v, t1 := resumedFixture(t)
	// The replay: one record every 500 ms, the last at t1+3s.
	for off := int64(5); off < 10; off++ {
		v.messageAt(topic, 1, 0, off, time.Time{}, t1.Add(time.Duration(off-4)*500*time.Millisecond+500*time.Millisecond))
	}
	// Offset 10, published at t1+110ms, arrives 100 ms after the replay.
	v.messageAt(topic, 1, 0, 10, t1.Add(110*time.Millisecond), t1.Add(3100*time.Millisecond))
	v.checkStalls(t1.Add(3200 * time.Millisecond))
	if n := l.v2.count(); n != 0 {
		t.Fatalf("%d stalls, want none: %q", n, l.v2.examples())
	}
	if got := time.Duration(l.worstCatchUp.Load()); got != 3*time.Second {
		t.Fatalf("longest catch-up %v, want 3s", got)
	}
	// After the replay the bound holds again: offset 11 still missing
	// 2.5 s after the replay was done.
	v.checkStalls(t1.Add(5500 * time.Millisecond))
	if ex := l.v2.examples(); len(ex) != 1 || !strings.Contains(ex[0], "offset 11 not received 2.5s after the resume's replay was done") {
		t.Fatalf("stalls %q, want offset 11 after the replay", ex)
	}
}

// TestLedgerStalledReplayIsAStall: while a resume's replay runs, a reading
// subscriber owed live records must keep receiving; 2.5 s with nothing is
// a stall, 1 s since the last replayed record is not.
func TestLedgerStalledReplayIsAStall(t *testing.T) {
	const topic = "tt.k.0"
	l, v, t1 := resumedFixture(t)
	v.messageAt(topic, 1, 0, 5, time.Time{}, t1.Add(1500*time.Millisecond))
	v.checkStalls(t1.Add(2500 * time.Millisecond))
	if n := l.v2.count(); n != 0 {
		t.Fatalf("%d stalls 1 s after the replay's last record, want none: %q", n, l.v2.examples())
	}
	v.checkStalls(t1.Add(4 * time.Second))
	if ex := l.v2.examples(); len(ex) != 1 || !strings.Contains(ex[0], "offset 10 not received 2.5s with nothing received meanwhile") {
		t.Fatalf("stalls %q, want offset 10 with nothing received", ex)
	}
}

// twoPartResume is a subscriber of tt.k.0, two partitions, stall bound
// 2 s, that received offsets 0-4 of both, was away while 5-9 of both were
// acknowledged, and resubscribed at t1. The replay of partition 1 then
// arrives in full by t1+500ms; partition 0 never gets a frame.
func twoPartResume(t *testing.T) (l *ledger, v *sview, t1 time.Time) {
	t.Helper()
	const topic = "tt.k.0"
	l = newLedger([]*tortureTopic{{name: topic, parts: 2}}, 2*time.Second, &overloadWatch{})
	t0 := time.Now()
	v = l.newView("raw0", topic, true)
	v.confirmed(t0)
	for off := range int64(5) {
		for part := range 2 {
			at := t0.Add(time.Duration(off+1) * time.Millisecond)
			l.published(topic, 1, part, off, at)
			v.messageAt(topic, 1, part, off, at, at.Add(time.Millisecond))
		}
	}
	v.lost()
	for off := int64(5); off < 10; off++ {
		for part := range 2 {
			l.published(topic, 1, part, off, t0.Add(10*time.Second+time.Duration(off)*time.Millisecond))
		}
	}
	t1 = t0.Add(20 * time.Second)
	v.confirmed(t1)
	for off := int64(5); off < 10; off++ {
		v.messageAt(topic, 1, 1, off, time.Time{}, t1.Add(time.Duration(off)*50*time.Millisecond))
	}
	return l, v, t1
}

// TestLedgerFrozenPartitionDuringReplayIsAStall: after a resume, one
// partition's replay never arrives while the other partition's live
// records keep coming, one a second. Those frames are not the frozen
// partition's replay making progress: partition 0's records published
// after the resume, owed and never received, are a stall once nothing of
// partition 0 came for the bound, as they would be without the resume.
func TestLedgerFrozenPartitionDuringReplayIsAStall(t *testing.T) {
	const topic = "tt.k.0"
	l, v, t1 := twoPartResume(t)
	for s := int64(1); s <= 20; s++ {
		at := t1.Add(time.Duration(s) * time.Second)
		for part := range 2 {
			l.published(topic, 1, part, 9+s, at)
		}
		v.messageAt(topic, 1, 1, 9+s, at, at.Add(10*time.Millisecond))
		v.checkStalls(at.Add(500 * time.Millisecond))
	}
	ex := l.v2.examples()
	if len(ex) == 0 || !strings.Contains(ex[0], topic+"/0 offset 10 not received") {
		t.Fatalf("stalls %q, want partition 0's offset 10 (nothing of partition 0 for 19.5 s)", ex)
	}
}

// TestLedgerResumeOwedNothingKeepsTheBound: a subscriber that resumes
// having missed nothing is caught up at once; a record published after
// the resume and not received within the bound is a stall.
func TestLedgerResumeOwedNothingKeepsTheBound(t *testing.T) {
	const topic = "tt.k.0"
	l := newLedger([]*tortureTopic{{name: topic, parts: 1}}, 2*time.Second, &overloadWatch{})
	t0 := time.Now()
	v := l.newView("raw0", topic, true)
	v.confirmed(t0)
	for off := range int64(5) {
		at := t0.Add(time.Duration(off+1) * time.Millisecond)
		l.published(topic, 1, 0, off, at)
		v.messageAt(topic, 1, 0, off, at, at.Add(time.Millisecond))
	}
	v.lost()
	t1 := t0.Add(20 * time.Second)
	v.confirmed(t1)
	l.published(topic, 1, 0, 5, t1.Add(100*time.Millisecond))
	// The fixture's acknowledgements carry the wall clock, before t1: the
	// clock starts at the resume, which was caught up at once.
	v.checkStalls(t1.Add(2 * time.Second))
	if n := l.v2.count(); n != 0 {
		t.Fatalf("%d stalls 2 s after the resume, want none: %q", n, l.v2.examples())
	}
	v.checkStalls(t1.Add(2200 * time.Millisecond))
	if ex := l.v2.examples(); len(ex) != 1 || !strings.Contains(ex[0], "offset 5 not received 2.2s") {
		t.Fatalf("stalls %q, want offset 5 2.2 s after the resume", ex)
	}
}
