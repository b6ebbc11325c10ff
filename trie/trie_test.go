package trie

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
	"pgregory.net/rapid"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// collect returns what Match reports for topic, failing the test if a
// pattern is reported twice or with no subscribers.
func collect[T comparable](t reporter, tr *Trie[T], topic string) map[string][]T {
	t.Helper()
	got := map[string][]T{}
	tr.Match(topic, func(pattern string, subs []T) {
		if _, dup := got[pattern]; dup {
			t.Errorf("Match(%q) reported %q twice", topic, pattern)
		}
		if len(subs) == 0 {
			t.Errorf("Match(%q) reported %q with no subscribers", topic, pattern)
		}
		got[pattern] = slices.Clone(subs)
	})
	return got
}

// reporter is what testing.TB and rapid.T have in common.
type reporter interface {
	Helper()
	Errorf(format string, args ...any)
}

// model is the naive reference: subscribers by pattern, matched with Matches.
type model map[string][]int

func (m model) match(topic string) map[string][]int {
	want := map[string][]int{}
	for p, subs := range m {
		if len(subs) > 0 && Matches(p, topic) {
			want[p] = subs
		}
	}
	return want
}

func (m model) len() int {
	n := 0
	for _, subs := range m {
		n += len(subs)
	}
	return n
}

func equalMatch(got, want map[string][]int) bool {
	return maps.EqualFunc(got, want, func(a, b []int) bool {
		return slices.Equal(slices.Sorted(slices.Values(a)), slices.Sorted(slices.Values(b)))
	})
}

// variants runs body, the one test of a behavior, on a Trie with and
// without the match cache.
func variants(t *testing.T, body func(t *testing.T, cache bool)) {
	t.Run("cache", func(t *testing.T) { body(t, true) })
	t.Run("nocache", func(t *testing.T) { body(t, false) })
}

func TestTrieMatch(t *testing.T) { variants(t, testTrieMatch) }

func testTrieMatch(t *testing.T, cache bool) {
	tr := newTrie[string](cache)
	subs := []struct{ pattern, sub string }{
		{"orders.created.eu", "s1"},
		{"orders.*.eu", "s2"},
		{"orders.#", "s3"},
		{"orders.#", "s4"},
		{"#", "s5"},
		{"*.created.*", "s6"},
		{"$sys.#", "s7"},
		{"$sys.stats", "s8"},
		{"*", "s9"},
		{"orders", "s10"},
	}
	for _, s := range subs {
		if err := tr.Add(s.pattern, s.sub); err != nil {
			t.Fatalf("Add(%q): %v", s.pattern, err)
		}
	}
	tests := []struct {
		topic string
		want  map[string][]string
	}{
		{"orders.created.eu", map[string][]string{
			"orders.created.eu": {"s1"}, "orders.*.eu": {"s2"}, "orders.#": {"s3", "s4"},
			"#": {"s5"}, "*.created.*": {"s6"},
		}},
		{"orders", map[string][]string{"#": {"s5"}, "*": {"s9"}, "orders": {"s10"}}},
		{"orders.a", map[string][]string{"orders.#": {"s3", "s4"}, "#": {"s5"}}},
		{"orders.a.b", map[string][]string{"orders.#": {"s3", "s4"}, "#": {"s5"}}},
		{"$sys.stats", map[string][]string{"$sys.#": {"s7"}, "$sys.stats": {"s8"}}},
		{"$sys", map[string][]string{}},
		{"Orders", map[string][]string{"#": {"s5"}, "*": {"s9"}}},
		{"", map[string][]string{}},
		{strings.Repeat("a.", MaxSegments) + "a", map[string][]string{}},
	}
	for _, tc := range tests {
		t.Run(tc.topic, func(t *testing.T) {
			for range 3 { // a miss, an admission, a hit
				got := collect(t, tr, tc.topic)
				if !maps.EqualFunc(got, tc.want, slices.Equal) {
					t.Fatalf("Match(%q) = %v, want %v", tc.topic, got, tc.want)
				}
			}
		})
	}
	if got, want := tr.Len(), len(subs); got != want {
		t.Errorf("Len() = %d, want %d", got, want)
	}
	if got, want := tr.Patterns(), len(subs)-1; got != want {
		t.Errorf("Patterns() = %d, want %d", got, want)
	}
}

func TestTrieMatchCases(t *testing.T) {
	for _, tc := range matchCases {
		t.Run(tc.name, func(t *testing.T) {
			tr := New[int]()
			if err := tr.Add(tc.pattern, 1); err != nil {
				t.Fatal(err)
			}
			got := len(collect(t, tr, tc.topic)) == 1
			if got != tc.want {
				t.Fatalf("Trie with %q matched %q: %v, want %v", tc.pattern, tc.topic, got, tc.want)
			}
		})
	}
}

// TestTrieCacheInvalidation checks that a cached result does not outlive
// the write that changes it.
func TestTrieCacheInvalidation(t *testing.T) {
	tr := New[int]()
	tr.Add("a.*", 1)
	for range 3 {
		collect(t, tr, "a.b")
	}
	steps := []struct {
		name  string
		write func()
		want  map[string][]int
	}{
		{"add subscriber", func() { tr.Add("a.*", 2) }, map[string][]int{"a.*": {1, 2}}},
		{"add pattern", func() { tr.Add("a.#", 3) }, map[string][]int{"a.*": {1, 2}, "a.#": {3}}},
		{"remove subscriber", func() { tr.Remove("a.*", 1) }, map[string][]int{"a.*": {2}, "a.#": {3}}},
		{"remove pattern", func() { tr.Remove("a.#", 3) }, map[string][]int{"a.*": {2}}},
		{"duplicate add", func() { tr.Add("a.*", 2) }, map[string][]int{"a.*": {2}}},
		{"remove all", func() { tr.Remove("a.*", 2) }, map[string][]int{}},
	}
	for _, step := range steps {
		step.write()
		for range 3 {
			if got := collect(t, tr, "a.b"); !equalMatch(got, step.want) {
				t.Fatalf("after %s: Match(a.b) = %v, want %v", step.name, got, step.want)
			}
		}
	}
}

func TestTrieAddRemove(t *testing.T) {
	var tr Trie[int] // the zero value is ready to use
	if tr.Len() != 0 || tr.Patterns() != 0 || tr.Remove("a", 1) {
		t.Fatal("zero Trie is not empty")
	}
	tr.Match("a", func(string, []int) { t.Fatal("zero Trie matched") })

	for _, p := range []string{"", "a..b", "#.a", "a*", "a b"} {
		if err := tr.Add(p, 1); !errors.Is(err, ErrInvalidPattern) {
			t.Errorf("Add(%q) = %v, want ErrInvalidPattern", p, err)
		}
	}
	if err := tr.Add("a.*", 1); err != nil {
		t.Fatal(err)
	}
	if err := tr.Add("a.*", 1); err != nil {
		t.Fatalf("second Add: %v", err)
	}
	if tr.Len() != 1 || tr.Patterns() != 1 {
		t.Fatalf("after duplicate Add: Len %d Patterns %d, want 1 1", tr.Len(), tr.Patterns())
	}
	tr.Add("a.*", 2)
	tr.Add("a.#", 2)
	if tr.Len() != 3 || tr.Patterns() != 2 {
		t.Fatalf("Len %d Patterns %d, want 3 2", tr.Len(), tr.Patterns())
	}

	for _, p := range []string{"a.b", "a", "a.*.c", "a.#.b", "", "#"} {
		if tr.Remove(p, 1) {
			t.Errorf("Remove(%q, 1) = true for an absent pattern", p)
		}
	}
	if tr.Remove("a.#", 1) {
		t.Error("Remove(a.#, 1) = true for an absent subscriber")
	}
	if !tr.Remove("a.*", 1) || tr.Remove("a.*", 1) {
		t.Error("Remove(a.*, 1) twice: want true then false")
	}
	if got := collect(t, &tr, "a.b"); !equalMatch(got, map[string][]int{"a.*": {2}, "a.#": {2}}) {
		t.Fatalf("Match(a.b) = %v", got)
	}
	tr.Remove("a.*", 2)
	tr.Remove("a.#", 2)
	if tr.Len() != 0 || tr.Patterns() != 0 {
		t.Fatalf("emptied Trie: Len %d Patterns %d", tr.Len(), tr.Patterns())
	}
	if r := tr.cur.Load(); !r.root.empty() {
		t.Fatalf("emptied Trie keeps nodes: %+v", r.root)
	}
}

// TestTrieSubsSnapshot checks that a snapshot handed to fn is not disturbed
// by later writes, nor can fn's appending disturb the Trie.
func TestTrieSubsSnapshot(t *testing.T) {
	tr := New[int]()
	for i := range 3 {
		tr.Add("a", i)
	}
	var held []int
	tr.Match("a", func(_ string, subs []int) {
		held = subs // retained only to test that the Trie does not write to it
		_ = append(subs, 99)
	})
	for i := 3; i < 10; i++ {
		tr.Add("a", i)
	}
	tr.Remove("a", 0)
	if !slices.Equal(held, []int{0, 1, 2}) {
		t.Fatalf("snapshot changed to %v", held)
	}
	got := collect(t, tr, "a")["a"]
	if want := []int{1, 2, 3, 4, 5, 6, 7, 8, 9}; !slices.Equal(got, want) {
		t.Fatalf("subscribers %v, want %v", got, want)
	}
}

// Generators over a small alphabet, so that random patterns and topics
// match each other often.
var (
	segAlphabet = []string{"a", "b", "c"}
	firstExtra  = "$s" // allowed in the first segment only
)

func genTopic(max int) *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		n := rapid.IntRange(1, max).Draw(t, "topicLen")
		segs := make([]string, n)
		for i := range segs {
			choices := segAlphabet
			if i == 0 {
				choices = append(slices.Clone(segAlphabet), firstExtra)
			}
			segs[i] = rapid.SampledFrom(choices).Draw(t, "seg")
		}
		return strings.Join(segs, ".")
	})
}

func genPattern(max int) *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		n := rapid.IntRange(1, max).Draw(t, "patternLen")
		segs := make([]string, n)
		for i := range segs {
			choices := append(slices.Clone(segAlphabet), "*")
			if i == 0 {
				choices = append(choices, firstExtra)
			}
			if i == n-1 {
				choices = append(choices, "#")
			}
			segs[i] = rapid.SampledFrom(choices).Draw(t, "seg")
		}
		return strings.Join(segs, ".")
	})
}

func TestTrieMatchProperty(t *testing.T) { variants(t, testTrieMatchProperty) }

func testTrieMatchProperty(t *testing.T, cache bool) {
	rapid.Check(t, func(t *rapid.T) {
		tr, m := newTrie[int](cache), model{}
		patterns := rapid.SliceOfN(genPattern(5), 0, 30).Draw(t, "patterns")
		for i, p := range patterns {
			if err := tr.Add(p, i); err != nil {
				t.Fatalf("Add(%q): %v", p, err)
			}
			m[p] = append(m[p], i)
		}
		for _, topic := range rapid.SliceOfN(genTopic(6), 1, 20).Draw(t, "topics") {
			if got, want := collect(t, tr, topic), m.match(topic); !equalMatch(got, want) {
				t.Fatalf("Match(%q) = %v, want %v", topic, got, want)
			}
		}
	})
}

func TestTrieModelProperty(t *testing.T) { variants(t, testTrieModelProperty) }

func testTrieModelProperty(t *testing.T, cache bool) {
	rapid.Check(t, func(t *rapid.T) {
		tr, m := newTrie[int](cache), model{}
		pattern := genPattern(4)
		sub := rapid.IntRange(0, 3)
		t.Repeat(map[string]func(*rapid.T){
			"add": func(t *rapid.T) {
				p, v := pattern.Draw(t, "pattern"), sub.Draw(t, "sub")
				if err := tr.Add(p, v); err != nil {
					t.Fatalf("Add(%q, %d): %v", p, v, err)
				}
				if !slices.Contains(m[p], v) {
					m[p] = append(m[p], v)
				}
			},
			"remove": func(t *rapid.T) {
				p, v := pattern.Draw(t, "pattern"), sub.Draw(t, "sub")
				i := slices.Index(m[p], v)
				if got := tr.Remove(p, v); got != (i >= 0) {
					t.Fatalf("Remove(%q, %d) = %v, want %v", p, v, got, i >= 0)
				}
				if i >= 0 {
					m[p] = slices.Delete(m[p], i, i+1)
					if len(m[p]) == 0 {
						delete(m, p)
					}
				}
			},
			"match": func(t *rapid.T) {
				topic := genTopic(5).Draw(t, "topic")
				if got, want := collect(t, tr, topic), m.match(topic); !equalMatch(got, want) {
					t.Fatalf("Match(%q) = %v, want %v", topic, got, want)
				}
			},
			"": func(t *rapid.T) {
				if tr.Len() != m.len() || tr.Patterns() != len(m) {
					t.Fatalf("Len %d Patterns %d, want %d %d", tr.Len(), tr.Patterns(), m.len(), len(m))
				}
			},
		})
	})
}

// TestTrieConcurrent runs writers against readers. Patterns that are never
// removed must be matched by every Match, whatever the writers do.
func TestTrieConcurrent(t *testing.T) { variants(t, testTrieConcurrent) }

func testTrieConcurrent(t *testing.T, cache bool) {
	const (
		writers    = 4
		readers    = 4
		iterations = 2048 // a multiple of 32, so every writer ends with its removes
		stableSub  = -1
	)
	tr := newTrie[int](cache)
	stable := []string{"s.a.b", "s.*.b", "s.#", "#", "*.a.*", "$sys.#"}
	for _, p := range stable {
		tr.Add(p, stableSub)
	}
	churn := []string{"s.a.b", "s.*.b", "s.#", "s.a.*", "*.*.*", "s.a.b.c", "x.#", "$sys.a.b"}
	topics := []string{"s.a.b", "s.c.b", "s.a", "x.a.b", "$sys.a.b", "s.a.b.c"}

	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range iterations {
				p, v := churn[(i+w)%len(churn)], w*iterations+i%16
				if i%32 < 16 {
					tr.Add(p, v)
				} else {
					tr.Remove(p, v)
				}
			}
		})
	}
	for r := range readers {
		wg.Go(func() {
			for i := range iterations {
				topic := topics[(i+r)%len(topics)]
				seen := map[string]bool{}
				tr.Match(topic, func(pattern string, subs []int) {
					if seen[pattern] {
						t.Errorf("Match(%q) reported %q twice", topic, pattern)
					}
					seen[pattern] = true
					if !Matches(pattern, topic) {
						t.Errorf("Match(%q) reported %q, which does not match", topic, pattern)
					}
					if len(subs) == 0 {
						t.Errorf("Match(%q) reported %q with no subscribers", topic, pattern)
					}
				})
				for _, p := range stable {
					if Matches(p, topic) && !seen[p] {
						t.Errorf("Match(%q) missed stable pattern %q", topic, p)
					}
				}
			}
		})
	}
	wg.Wait()

	if tr.Len() != len(stable) || tr.Patterns() != len(stable) {
		t.Fatalf("after churn: Len %d Patterns %d, want %d", tr.Len(), tr.Patterns(), len(stable))
	}
	for _, topic := range topics {
		for p, subs := range collect(t, tr, topic) {
			if !slices.Equal(subs, []int{stableSub}) {
				t.Errorf("Match(%q): %q has %v after churn", topic, p, subs)
			}
		}
	}
}

// FuzzMatch compares the Trie with Matches. patterns is a space-separated
// list; invalid ones are skipped.
func FuzzMatch(f *testing.F) {
	for _, tc := range matchCases {
		f.Add(tc.pattern, tc.topic)
	}
	f.Add("orders.# orders.*.eu * # $sys.# a.b.c", "orders.x.eu")
	f.Add("#  * $s.*", "$s.a")
	f.Fuzz(func(t *testing.T, patterns, topic string) {
		if ValidateTopic(topic) != nil {
			return
		}
		tr, m := New[int](), model{}
		for i, p := range strings.Fields(patterns) {
			if tr.Add(p, i) != nil {
				continue
			}
			m[p] = append(m[p], i)
		}
		for range 3 { // through the cache: a miss, an admission, a hit
			if got, want := collect(t, tr, topic), m.match(topic); !equalMatch(got, want) {
				t.Fatalf("Match(%q) = %v, want %v", topic, got, want)
			}
		}
	})
}

func TestSplit(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"a", []string{"a"}},
		{"a.b.c", []string{"a", "b", "c"}},
		{"a..b", []string{"a", "", "b"}},
		{strings.Repeat("a.", MaxSegments-1) + "a", slices.Repeat([]string{"a"}, MaxSegments)},
		{strings.Repeat("a.", MaxSegments) + "a", nil},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%.20q", tc.in), func(t *testing.T) {
			var buf [MaxSegments]string
			if got := split(tc.in, &buf); !slices.Equal(got, tc.want) {
				t.Fatalf("split(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}
