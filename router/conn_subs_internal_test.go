package router

import (
	"fmt"
	"testing"
)

// TestConnSubsIndex: a session's subscriptions are found by key whether
// it scans them (few) or indexes them (more than keyIndexAt), after adds
// and removals on both sides of the threshold; one with a single
// subscription holds no key index.
func TestConnSubsIndex(t *testing.T) {
	cn := &conn{byID: make(map[uint64]*subscription)}
	const n = 3 * keyIndexAt
	subs := make([]*subscription, n)
	check := func(when string, held func(i int) bool) {
		t.Helper()
		for i, s := range subs {
			// The same pattern in and out of a group: two keys.
			got := cn.subNamed(subKey{s.pattern, s.group})
			if want := held(i); (got == s) != want || !want && got != nil {
				t.Fatalf("%s: subscription %d (%q, %q): found %v, want held %v", when, i, s.pattern, s.group, got, want)
			}
		}
		if cn.subNamed(subKey{"none", ""}) != nil {
			t.Fatalf("%s: found a subscription never made", when)
		}
	}
	for i := range subs {
		group := ""
		if i%2 == 1 {
			group = "g"
		}
		subs[i] = &subscription{c: cn, id: uint64(i + 1), pattern: fmt.Sprintf("p.%d", i/2), group: group}
	}
	cn.addLocked(subs[0])
	if cn.byKey != nil {
		t.Fatal("a session with one subscription holds a key index")
	}
	check("one", func(i int) bool { return i == 0 })
	for i := 1; i < n; i++ {
		cn.addLocked(subs[i])
		if indexed := cn.byKey != nil; indexed != (i+1 > keyIndexAt) {
			t.Fatalf("with %d subscriptions indexed is %v", i+1, indexed)
		}
		check(fmt.Sprintf("after adding %d", i+1), func(j int) bool { return j <= i })
	}
	// Remove every other one, then all but the first: the index follows.
	for i := 0; i < n; i += 2 {
		if !cn.removeLocked(subs[i]) {
			t.Fatalf("subscription %d was not held", i)
		}
		if cn.removeLocked(subs[i]) {
			t.Fatalf("subscription %d removed twice", i)
		}
	}
	check("after removing the even ones", func(i int) bool { return i%2 == 1 })
	for i := 3; i < n; i += 2 {
		cn.removeLocked(subs[i])
	}
	check("one left", func(i int) bool { return i == 1 })
	// A key taken again by a new subscription is found as the new one.
	again := &subscription{c: cn, id: n + 1, pattern: subs[0].pattern}
	cn.addLocked(again)
	if got := cn.subNamed(subKey{again.pattern, ""}); got != again {
		t.Fatalf("a key subscribed again: found %v, want the new subscription", got)
	}
	if len(cn.byID) != 2 || cn.byKey != nil {
		t.Fatalf("held %d by id and %d by key, want 2 and no key index (back under keyIndexAt/2)", len(cn.byID), len(cn.byKey))
	}
}
