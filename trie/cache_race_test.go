package trie

import (
	"fmt"
	"hash/maphash"
	"sync"
	"testing"
)

// slotOf returns the cache slot of topic in tr's current snapshot.
func slotOf[T comparable](tr *Trie[T], topic string) uint64 {
	return maphash.String(tr.cur.Load().seed, topic) & (cacheSlots - 1)
}

// holding returns the cache slots whose entry holds v among its subscribers.
func holding[T comparable](tr *Trie[T], v T) []int {
	var at []int
	for i := range tr.cache.slots {
		e := tr.cache.slots[i].Load()
		if e == nil {
			continue
		}
		for _, hit := range e.hits {
			for _, s := range hit.subs {
				if s == v {
					at = append(at, i)
				}
			}
		}
	}
	return at
}

// TestMatchCacheReleaseRacesAdmission: a Match that admits an entry can be
// stopped by the scheduler between taking its place in the list of filled
// slots and writing its slot there, while a Remove releases the list and
// another Match admits a topic in the next round of the list, at the same
// place. The first Match then writes over the second's listing, so the
// Remove after that does not empty the second's slot, and the entry keeps
// the subscriber it removed reachable: the retention the release is there
// to prevent, with no later Remove to end it while the topic is not
// published again.
func TestMatchCacheReleaseRacesAdmission(t *testing.T) {
	tr := New[int]()
	const one, two = "race.one", "race.two"
	for v, topic := range map[int]string{1: one, 2: two, 3: two, 9: "race.other"} {
		if err := tr.Add(topic, v); err != nil {
			t.Fatal(err)
		}
	}
	if slotOf(tr, one) == slotOf(tr, two) {
		t.Skip("the two topics share a slot under this seed")
	}
	tr.Match(one, func(string, []int) {}) // first miss of this generation
	tr.cache.listing = func() {
		tr.cache.listing = nil
		// While the Match of one is stopped: a Remove, then two is
		// admitted in the new generation.
		if !tr.Remove("race.other", 9) {
			t.Fatal("Remove(race.other, 9) = false")
		}
		tr.Match(two, func(string, []int) {})
		tr.Match(two, func(string, []int) {})
		if len(holding(tr, 2)) != 1 {
			t.Fatalf("%s was not admitted", two)
		}
	}
	tr.Match(one, func(string, []int) {}) // second miss: admitted, stopped
	if tr.cache.listing != nil {
		t.Fatal("the Match of one did not admit it")
	}
	if !tr.Remove(two, 2) {
		t.Fatal("Remove(race.two, 2) = false")
	}
	if at := holding(tr, 2); len(at) != 0 {
		t.Fatalf("removed subscriber 2 of %s is still held by the cache entry in slot %v", two, at)
	}
	if got := collect(t, tr, two); len(got[two]) != 1 || got[two][0] != 3 {
		t.Fatalf("Match(%s) = %v, want [3]", two, got)
	}
}

// TestMatchCacheReleaseUnderLoad: Matches that admit entries race a
// Remove of every subscriber, round after round; once they are all
// removed and the Matches have returned, no cache entry may hold one.
func TestMatchCacheReleaseUnderLoad(t *testing.T) {
	const rounds, topics, subs, matchers = 200, 64, 4, 2
	tr := New[int]()
	for r := range rounds {
		for k := range topics * subs {
			if err := tr.Add(fmt.Sprintf("load.t%d", k%topics), r*topics*subs+k); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		done := make(chan struct{})
		for g := range matchers {
			wg.Go(func() {
				for n := 0; ; n++ {
					select {
					case <-done:
						return
					default:
					}
					tr.Match(fmt.Sprintf("load.t%d", (n/2+g)%topics), func(string, []int) {})
				}
			})
		}
		for k := range topics * subs {
			if !tr.Remove(fmt.Sprintf("load.t%d", k%topics), r*topics*subs+k) {
				t.Fatalf("round %d: Remove of subscriber %d = false", r, k)
			}
		}
		close(done)
		wg.Wait()
		for i := range tr.cache.slots {
			if e := tr.cache.slots[i].Load(); e != nil && len(e.hits) != 0 {
				t.Fatalf("round %d: with no subscriber left, slot %d holds %s's %v", r, i, e.topic, e.hits[0].subs)
			}
		}
	}
}

// TestMatchCacheReleaseAfterAdd: an Add leaves the entries admitted before
// it in place, stale but holding only subscribers still subscribed; the
// next Remove empties them with the rest, so an Add between admission and
// Remove keeps nothing removed reachable. A Trie without a cache removes
// as before.
func TestMatchCacheReleaseAfterAdd(t *testing.T) {
	for _, cache := range []bool{true, false} {
		t.Run(fmt.Sprintf("cache=%v", cache), func(t *testing.T) {
			tr := newTrie[int](cache)
			for v := range 3 {
				if err := tr.Add("add.t", v); err != nil {
					t.Fatal(err)
				}
			}
			tr.Match("add.t", func(string, []int) {})
			tr.Match("add.t", func(string, []int) {})
			if err := tr.Add("add.other", 9); err != nil {
				t.Fatal(err)
			}
			if cache && len(holding(tr, 1)) != 1 {
				t.Fatal("the entry admitted before the Add is gone; want it kept until a Remove")
			}
			if !tr.Remove("add.t", 1) {
				t.Fatal("Remove(add.t, 1) = false")
			}
			if cache {
				if at := holding(tr, 1); len(at) != 0 {
					t.Fatalf("removed subscriber 1 held in slots %v", at)
				}
			}
			if got := collect(t, tr, "add.t"); len(got["add.t"]) != 2 {
				t.Fatalf("Match(add.t) = %v, want [0 2]", got)
			}
		})
	}
}
