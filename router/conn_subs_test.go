package router

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// TestConnSubsChurnModel drives a session's subscription index through
// random subscribes, unsubscribes, removals of subscriptions already gone
// and sweeps that remove while iterating (as a refresh or a deleted group
// does), across keyIndexAt both ways, with the same patterns in and out of
// groups, and checks it against a plain map by key after every step: the
// same subscriptions found by key and by id, none twice, the filter bytes
// of exactly those held.
func TestConnSubsChurnModel(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		cn := &conn{byID: make(map[uint64]*subscription)}
		model := map[subKey]*subscription{}
		var gone []*subscription
		keyGen := rapid.Custom(func(rt *rapid.T) subKey {
			k := subKey{pattern: fmt.Sprintf("p.%d", rapid.IntRange(0, 7).Draw(rt, "pattern"))}
			if g := rapid.IntRange(0, 2).Draw(rt, "group"); g > 0 {
				k.group = fmt.Sprintf("g%d", g)
			}
			return k
		})
		steps := rapid.IntRange(1, 200).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			switch rapid.IntRange(0, 5).Draw(rt, "op") {
			case 0, 1, 2: // subscribe, as register does
				k := keyGen.Draw(rt, "key")
				if (cn.subNamed(k) != nil) != (model[k] != nil) {
					rt.Fatalf("step %d: key %v held %v, model %v", i, k, cn.subNamed(k) != nil, model[k] != nil)
				}
				if model[k] != nil {
					continue
				}
				cn.nextID++
				s := &subscription{c: cn, id: cn.nextID, pattern: k.pattern, group: k.group,
					filter: map[string]string{"k": k.pattern + k.group}}
				cn.filterBytes += mapSize(s.filter)
				cn.addLocked(s)
				model[k] = s
			case 3: // unsubscribe by key
				k := keyGen.Draw(rt, "key")
				s := cn.subNamed(k)
				if s != model[k] {
					rt.Fatalf("step %d: key %v found %p, model %p", i, k, s, model[k])
				}
				if s != nil {
					if !cn.removeLocked(s) {
						rt.Fatalf("step %d: %v not held on removal", i, k)
					}
					delete(model, k)
					gone = append(gone, s)
				}
			case 4: // a removal of one already gone (dropSub after unsubscribe)
				if len(gone) > 0 {
					s := gone[rapid.IntRange(0, len(gone)-1).Draw(rt, "gone")]
					if cn.removeLocked(s) {
						rt.Fatalf("step %d: %v removed twice", i, subKey{s.pattern, s.group})
					}
				}
			case 5: // a sweep of one group, removing while iterating byID
				g := fmt.Sprintf("g%d", rapid.IntRange(0, 2).Draw(rt, "sweep"))
				if g == "g0" {
					g = ""
				}
				seen := map[uint64]bool{}
				for _, s := range cn.byID {
					if seen[s.id] {
						rt.Fatalf("step %d: subscription %d seen twice in one sweep", i, s.id)
					}
					seen[s.id] = true
					if s.group == g {
						cn.removeLocked(s)
						delete(model, subKey{s.pattern, s.group})
						gone = append(gone, s)
					}
				}
			}
			checkSubsIndex(rt, cn, model, i)
		}
	})
}

func checkSubsIndex(rt *rapid.T, cn *conn, model map[subKey]*subscription, step int) {
	if len(cn.byID) != len(model) {
		rt.Fatalf("step %d: %d held by id, model %d", step, len(cn.byID), len(model))
	}
	if cn.byKey != nil && len(cn.byKey) != len(cn.byID) {
		rt.Fatalf("step %d: %d held by key, %d by id", step, len(cn.byKey), len(cn.byID))
	}
	bytes := 0
	for k, s := range model {
		if cn.byID[s.id] != s || cn.subNamed(k) != s {
			rt.Fatalf("step %d: %v not found by id or key", step, k)
		}
		bytes += mapSize(s.filter)
	}
	if cn.filterBytes != bytes {
		rt.Fatalf("step %d: filter bytes %d, model %d", step, cn.filterBytes, bytes)
	}
}

// TestConnSubsKeyIndexGoesBelowThreshold: the key index is made so that a
// session with few subscriptions holds one small map, not two, so a
// session that once held more than keyIndexAt and is back to one
// subscription must not keep the index (a map keeps its grown size):
// removeLocked gives it up at keyIndexAt/2.
func TestConnSubsKeyIndexGoesBelowThreshold(t *testing.T) {
	cn := &conn{byID: make(map[uint64]*subscription)}
	var subs []*subscription
	for i := range keyIndexAt + 1 {
		s := &subscription{c: cn, id: uint64(i + 1), pattern: fmt.Sprintf("p.%d", i)}
		cn.addLocked(s)
		subs = append(subs, s)
	}
	if cn.byKey == nil {
		t.Fatalf("%d subscriptions and no key index", len(subs))
	}
	for _, s := range subs[1:] {
		cn.removeLocked(s)
	}
	if cn.subNamed(subKey{"p.0", ""}) != subs[0] {
		t.Fatal("the one subscription left is not found")
	}
	if cn.byKey != nil {
		t.Fatalf("a session back to %d subscription still holds a key index (%d entries, made at %d)", len(cn.byID), len(cn.byKey), keyIndexAt+1)
	}
}
