package router

import (
	"fmt"
	"maps"
	"testing"
)

// TestMQTTSubsFewAndMany checks mqttSubs against a map through the move
// from its slice to its map and back down to empty: every get, every
// entry ranged over, and a zero entry taking a name off.
func TestMQTTSubsFewAndMany(t *testing.T) {
	var m mqttSubs
	want := map[string]mqttSubEntry{}
	check := func(step string) {
		t.Helper()
		got := maps.Collect(m.all())
		if !maps.Equal(got, want) {
			t.Fatalf("%s: all() = %v, want %v", step, got, want)
		}
		for k, e := range want {
			if g := m.get(k); g != e {
				t.Fatalf("%s: get(%q) = %v, want %v", step, k, g, e)
			}
		}
		if g := m.get("absent"); g != (mqttSubEntry{}) {
			t.Fatalf("%s: get(absent) = %v", step, g)
		}
	}
	fs := make([]*mqttFilter, 2*mqttFewSubs)
	for i := range fs {
		fs[i] = &mqttFilter{subID: i}
	}
	for i, f := range fs {
		k := fmt.Sprintf("t/%d", i)
		m.set(k, mqttSubEntry{f: f})
		want[k] = mqttSubEntry{f: f}
		check(fmt.Sprintf("add %d", i))
		if (m.many != nil) != (len(want) > mqttFewSubs) {
			t.Fatalf("after %d entries: map made %v", len(want), m.many != nil)
		}
	}
	p := &mqttPattern{}
	m.set("t/0", mqttSubEntry{f: fs[0], p: p})
	want["t/0"] = mqttSubEntry{f: fs[0], p: p}
	check("replace")
	for i := range fs {
		k := fmt.Sprintf("t/%d", i)
		m.set(k, mqttSubEntry{})
		delete(want, k)
		check(fmt.Sprintf("drop %d", i))
	}

	var few mqttSubs
	few.set("a", mqttSubEntry{f: fs[0]})
	few.set("b", mqttSubEntry{p: p})
	few.set("a", mqttSubEntry{})
	if len(few.few) != 1 || few.get("b").p != p || few.get("a") != (mqttSubEntry{}) {
		t.Fatalf("after dropping a of two: %+v", few.few)
	}
	few.set("b", mqttSubEntry{})
	if few.few != nil || few.many != nil {
		t.Fatalf("empty set holds %v, %v", few.few, few.many)
	}
}

// TestMQTTSessionEnded checks the lazily made done channel: a wait made
// before the end is released by it, and one made after finds it closed.
func TestMQTTSessionEnded(t *testing.T) {
	closed := func(c <-chan struct{}) bool {
		select {
		case <-c:
			return true
		default:
			return false
		}
	}
	var early mqttSession
	c := early.ended()
	if closed(c) {
		t.Fatal("ended() closed before the end")
	}
	early.markEnded()
	if !closed(c) || !closed(early.ended()) {
		t.Fatal("a wait made before the end is not released")
	}
	var late mqttSession
	late.markEnded()
	if late.done == nil || !closed(late.ended()) {
		t.Fatal("a wait made after the end is not released")
	}
}
