package memengine

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

// TestLettersAccountingUnderChurn adds, re-adds under a reused ID and
// removes (as a redrive does) letters of both reasons under changing
// bounds, and checks after every step that the store's totals agree with
// its letters: bytes, the per-group lists, the ring, and that every letter
// added is stored, removed or counted evicted.
func TestLettersAccountingUnderChurn(t *testing.T) {
	for i, p := range []engine.GroupPolicy{
		{DeadLetterLimit: 5, MaxGroupDeadLetters: 3, MaxDeadLetters: 12, MaxDeadLetterBytes: 400},
		{DeadLetterLimit: 2, MaxGroupDeadLetters: 1, MaxDeadLetters: 6},
		{DeadLetterLimit: 9, MaxDeadLetterBytes: 150},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) { lettersChurn(t, p, uint64(i)) })
	}
}

// lettersChurn is the body of TestLettersAccountingUnderChurn (the
// engine's policy is fixed when it is made).
func lettersChurn(t *testing.T, p engine.GroupPolicy, seed uint64) {
	rng := rand.New(rand.NewPCG(1, seed))
	var ls letters
	var added, removed, replaced int64
	for step := range 20000 {
		switch op := rng.IntN(10); {
		case op < 7:
			dl := &engine.DeadLetter{ID: fmt.Sprintf("id-%d", rng.IntN(40)), Record: engine.Record{Data: make([]byte, rng.IntN(60))}}
			if rng.IntN(2) == 0 {
				dl.Reason = engine.ReasonQueueFull
			} else {
				dl.Reason, dl.Group = engine.ReasonMaxAttempts, fmt.Sprintf("g%d", rng.IntN(3))
			}
			if ls.byID[dl.ID] != nil {
				replaced++
			}
			ls.add(dl, p)
			added++
		default:
			if el := ls.byID[fmt.Sprintf("id-%d", rng.IntN(40))]; el != nil {
				ls.remove(el)
				removed++
			}
		}
		checkLetters(t, step, &ls, p)
		if got := int64(ls.all.Len()) + removed + replaced + ls.evicted; got != added {
			t.Fatalf("step %d: %d stored + %d removed + %d replaced + %d evicted = %d, want %d added", step, ls.all.Len(), removed, replaced, ls.evicted, got, added)
		}
	}
}

func checkLetters(t *testing.T, step int, ls *letters, p engine.GroupPolicy) {
	t.Helper()
	var bytes int64
	qf, perGroup := 0, map[string]int{}
	for el := ls.all.Front(); el != nil; el = el.Next() {
		dl := el.Value.(*engine.DeadLetter)
		bytes += letterBytes(dl)
		if ls.byID[dl.ID] != el {
			t.Fatalf("step %d: letter %s not indexed", step, dl.ID)
		}
		if dl.Reason == engine.ReasonQueueFull {
			qf++
		} else {
			perGroup[dl.Group]++
		}
	}
	if bytes != ls.bytes || ls.bytes < 0 {
		t.Fatalf("step %d: bytes %d, letters hold %d", step, ls.bytes, bytes)
	}
	if len(ls.byID) != ls.all.Len() {
		t.Fatalf("step %d: index holds %d, store %d", step, len(ls.byID), ls.all.Len())
	}
	if qf > p.DeadLetterLimit {
		t.Fatalf("step %d: %d queue_full letters past the limit %d", step, qf, p.DeadLetterLimit)
	}
	for g, n := range perGroup {
		gl := ls.byGroup[g]
		if gl == nil || gl.Len() != n {
			t.Fatalf("step %d: group %s holds %d letters, its list %v", step, g, n, gl)
		}
		if p.MaxGroupDeadLetters > 0 && n > p.MaxGroupDeadLetters {
			t.Fatalf("step %d: group %s holds %d letters past %d", step, g, n, p.MaxGroupDeadLetters)
		}
	}
	if len(ls.byGroup) != len(perGroup) || len(ls.inGroup) != ls.all.Len()-qf {
		t.Fatalf("step %d: %d group lists and %d group entries for %v", step, len(ls.byGroup), len(ls.inGroup), perGroup)
	}
	if p.MaxDeadLetters > 0 && ls.all.Len() > p.MaxDeadLetters {
		t.Fatalf("step %d: %d letters past %d", step, ls.all.Len(), p.MaxDeadLetters)
	}
	if p.MaxDeadLetterBytes > 0 && ls.all.Len() > 1 && ls.bytes > p.MaxDeadLetterBytes {
		t.Fatalf("step %d: %d bytes past %d", step, ls.bytes, p.MaxDeadLetterBytes)
	}
}
