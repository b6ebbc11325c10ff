package trie

import (
	"strings"
	"testing"

	"pgregory.net/rapid"
)

var coversCases = []struct {
	name               string
	allowed, requested string
	want               bool
}{
	{"rest covers star", "orders.#", "orders.*.eu", true},
	{"star does not cover rest", "orders.*", "orders.#", false},
	{"rest does not cover system", "#", "$sys.x", false},
	{"star does not cover system", "*", "$sys", false},
	{"system rest covers system literal", "$sys.#", "$sys.stats", true},
	{"star rest does not cover rest", "a.*.#", "a.#", false},
	{"rest covers star rest", "a.#", "a.*.#", true},
	{"same literal", "a.b", "a.b", true},
	{"different literal", "a.b", "a.c", false},
	{"same pattern", "a.*.#", "a.*.#", true},
	{"star covers literal", "a.*", "a.b", true},
	{"literal does not cover star", "a.b", "a.*", false},
	{"star covers star", "*.b", "*.b", true},
	{"rest covers longer literal", "a.#", "a.b.c.d", true},
	{"rest needs a segment", "a.#", "a", false},
	{"longer allowed", "a.b.c", "a.b", false},
	{"longer requested", "a.b", "a.b.c", false},
	{"rest alone covers everything else", "#", "*.#", true},
	{"rest alone covers rest alone", "#", "#", true},
	{"star alone does not cover rest alone", "*", "#", false},
	{"star covers star", "*", "*", true},
	{"star first does not cover system star", "*.*", "$sys.*", false},
	{"system star covers system literal", "$sys.*", "$sys.a", true},
	{"system literal does not cover star first", "$sys.#", "*.#", false},
	{"star rest covers star star", "*.#", "*.*", true},
	{"invalid allowed", "a..b", "a.b", false},
	{"invalid requested", "#", "a*", false},
}

func TestCovers(t *testing.T) {
	for _, tc := range coversCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Covers(tc.allowed, tc.requested); got != tc.want {
				t.Fatalf("Covers(%q, %q) = %v, want %v", tc.allowed, tc.requested, got, tc.want)
			}
		})
	}
}

// coverUniverse returns every topic of up to depth segments over the
// segment alphabet plus one segment no generated pattern names ("z"; "$z"
// in the first place).
func coverUniverse(depth int) []string {
	first := append(append([]string{}, segAlphabet...), firstExtra, "z", "$z")
	rest := append(append([]string{}, segAlphabet...), "z")
	var all []string
	level := first
	for d := 1; d <= depth; d++ {
		all = append(all, level...)
		var next []string
		for _, t := range level {
			for _, s := range rest {
				next = append(next, t+"."+s)
			}
		}
		level = next
	}
	return all
}

// coversBrute is Covers by enumeration: no topic in universe that requested
// matches escapes allowed. It is exact for patterns of up to depth-1
// segments: a counterexample never needs more than one segment beyond the
// longer pattern, nor a segment neither pattern names.
func coversBrute(allowed, requested string, universe []string) bool {
	for _, topic := range universe {
		if Matches(requested, topic) && !Matches(allowed, topic) {
			return false
		}
	}
	return true
}

func TestCoversProperty(t *testing.T) {
	const depth = 5
	universe := coverUniverse(depth)
	pattern := genPattern(depth - 1)
	rapid.Check(t, func(t *rapid.T) {
		a := pattern.Draw(t, "allowed")
		// Often derive requested from allowed, so that true answers are
		// common too.
		r := pattern.Draw(t, "requested")
		if rapid.Bool().Draw(t, "derive") {
			r = narrow(t, a)
		}
		if got, want := Covers(a, r), coversBrute(a, r, universe); got != want {
			t.Fatalf("Covers(%q, %q) = %v, brute force %v", a, r, got, want)
		}
	})
}

// narrow returns a pattern made from p by replacing some wildcards with
// something narrower, usually one that p covers.
func narrow(t *rapid.T, p string) string {
	segs := strings.Split(p, ".")
	for i, s := range segs {
		if (s == "*" || s == "#") && rapid.Bool().Draw(t, "narrow") {
			segs[i] = rapid.SampledFrom(append(append([]string{}, segAlphabet...), "*", firstExtra)).Draw(t, "by")
			if segs[i] == firstExtra && i > 0 {
				segs[i] = "*"
			}
		}
	}
	if segs[len(segs)-1] != "#" && len(segs) < 4 && rapid.Bool().Draw(t, "extend") {
		segs = append(segs, "#")
	}
	return strings.Join(segs, ".")
}

func FuzzCovers(f *testing.F) {
	for _, tc := range coversCases {
		f.Add(tc.allowed, tc.requested)
	}
	universe := coverUniverse(5)
	f.Fuzz(func(t *testing.T, a, r string) {
		got := Covers(a, r)
		if ValidatePattern(a) != nil || ValidatePattern(r) != nil {
			if got {
				t.Fatalf("Covers(%q, %q) = true for an invalid pattern", a, r)
			}
			return
		}
		if got && !coversBrute(a, r, universe) {
			t.Fatalf("Covers(%q, %q) = true, but a topic escapes", a, r)
		}
		if Covers(a, r) && Covers(r, a) != (a == r) {
			// Two valid patterns that cover each other match the same
			// topics, which only the same pattern does.
			t.Fatalf("Covers(%q, %q) and back, but the patterns differ", a, r)
		}
	})
}
