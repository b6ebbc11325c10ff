package mqtt

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/switchyard/switchyard/trie"
)

func TestTopicToNative(t *testing.T) {
	for _, tc := range []struct{ mqtt, native string }{
		{"sensors/room1/temp", "sensors.room1.temp"},
		{"a", "a"},
		{"urn:x/A-b_c", "urn:x.A-b_c"},
		{"$SYS/broker/load", "$SYS.broker.load"},
		{"/", ":.:"},
		{"a//b", "a.:.b"},
		{"room 1", ":room:201"},
		{"a.b", ":a:2Eb"},
		{"température", ":temp:C3:A9rature"},
		{":x", "::3Ax"},
		{"*", "::2A"},
		{"$", "$:"},
		{"$ x", "$::20x"},
		{"a/$b", "a.::24b"},
		{"$$", "$::24"},
		{"$:", "$::3A"},
		{"a/:", "a.::3A"},
	} {
		t.Run(tc.mqtt, func(t *testing.T) {
			got, err := TopicToNative(tc.mqtt)
			if err != nil || got != tc.native {
				t.Fatalf("TopicToNative(%q) = %q, %v; want %q", tc.mqtt, got, err, tc.native)
			}
			if err := trie.ValidateTopic(got); err != nil {
				t.Fatalf("mapped topic is not a valid native topic: %v", err)
			}
			back, err := TopicFromNative(got)
			if err != nil || back != tc.mqtt {
				t.Fatalf("TopicFromNative(%q) = %q, %v; want %q", got, back, err, tc.mqtt)
			}
		})
	}
}

func TestTopicErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		want []error
	}{
		{"", []error{ErrInvalidTopic}},
		{"a/+", []error{ErrInvalidTopic}},
		{"a/#", []error{ErrInvalidTopic}},
		{"a\x00", []error{ErrInvalidTopic}},
		{"\xff", []error{ErrInvalidTopic}},
		{strings.Repeat("a/", 16) + "a", []error{ErrInvalidTopic, ErrTooLong}},
		{strings.Repeat("é", 50), []error{ErrInvalidTopic, ErrTooLong}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := TopicToNative(tc.name)
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Fatalf("TopicToNative(%q) = %v, want it to wrap %v", tc.name, err, w)
				}
			}
		})
	}
}

func TestTopicFromNativeRejectsNonCanonical(t *testing.T) {
	for _, native := range []string{
		":abc",     // "abc" maps to itself
		":3A",      // "3A" maps to itself
		"::61",     // 'a' escaped needlessly
		"::2e",     // lower-case hex
		"::2",      // truncated escape
		"a.::2B",   // '+' has no place in a topic name
		"a.::2F",   // '/' inside a level
		"::00",     // U+0000
		"::FF",     // not UTF-8
		"$abc.:x1", // second segment: "x1" is plain
		":",        // the empty topic name
	} {
		t.Run(native, func(t *testing.T) {
			if got, err := TopicFromNative(native); !errors.Is(err, ErrNoMQTTName) {
				t.Fatalf("TopicFromNative(%q) = %q, %v; want ErrNoMQTTName", native, got, err)
			}
		})
	}
}

func TestParseFilter(t *testing.T) {
	for _, tc := range []struct {
		in       string
		filter   string
		share    string
		group    string
		patterns []string
	}{
		{"sensors/+/temp", "sensors/+/temp", "", "", []string{"sensors.*.temp"}},
		{"a/#", "a/#", "", "", []string{"a", "a.#"}},
		{"#", "#", "", "", []string{"#"}},
		{"+", "+", "", "", []string{"*"}},
		{"+/#", "+/#", "", "", []string{"*", "*.#"}},
		{"/#", "/#", "", "", []string{":", ":.#"}},
		{"$SYS/#", "$SYS/#", "", "", []string{"$SYS", "$SYS.#"}},
		{"a b/+", "a b/+", "", "", []string{":a:20b.*"}},
		{"$share/g1/a/+", "a/+", "g1", "g1", []string{"a.*"}},
		{"$share/g.x/#", "#", "g.x", "g.x", []string{"#"}},
		{"$share/my group/a", "a", "my group", ":my:20group", []string{"a"}},
		{"$share/:g/a", "a", ":g", "::3Ag", []string{"a"}},
		{"$share", "$share", "", "", []string{"$share"}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			f, err := ParseFilter(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if f.Filter != tc.filter || f.Share != tc.share || f.Group != tc.group || !slices.Equal(f.Patterns, tc.patterns) {
				t.Fatalf("ParseFilter(%q) = %+v; want filter %q share %q group %q patterns %q",
					tc.in, f, tc.filter, tc.share, tc.group, tc.patterns)
			}
			for _, p := range f.Patterns {
				if err := trie.ValidatePattern(p); err != nil {
					t.Fatalf("pattern %q: %v", p, err)
				}
			}
		})
	}
}

func TestParseFilterErrors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []error
	}{
		{"", []error{ErrInvalidFilter}},
		{"a/#/b", []error{ErrInvalidFilter}},
		{"a#", []error{ErrInvalidFilter}},
		{"a/b+", []error{ErrInvalidFilter}},
		{"$share/g", []error{ErrInvalidFilter}},
		{"$share/g/", []error{ErrInvalidFilter}},
		{"$share//a", []error{ErrInvalidFilter}},
		{"$share/g+/a", []error{ErrInvalidFilter}},
		{"a\xffb", []error{ErrInvalidFilter}},
		{strings.Repeat("+/", 16) + "#", []error{ErrInvalidFilter, ErrTooLong}},
		{strings.Repeat("+/", 15) + "#", nil},
		{strings.Repeat("+/", 16) + "+", []error{ErrInvalidFilter, ErrTooLong}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			_, err := ParseFilter(tc.in)
			if tc.want == nil && err != nil {
				t.Fatalf("ParseFilter(%q) = %v, want no error", tc.in, err)
			}
			for _, w := range tc.want {
				if !errors.Is(err, w) {
					t.Fatalf("ParseFilter(%q) = %v, want it to wrap %v", tc.in, err, w)
				}
			}
		})
	}
}

// mqttTopicGen draws valid MQTT topic names: arbitrary UTF-8 levels mixed
// with levels from a small alphabet that exercises the mapping's edges.
func mqttTopicGen() *rapid.Generator[string] {
	edge := rapid.SampledFrom([]string{"", "a", "B9", ":", ":x", "$", "$a", "a.b", "é", "*", " ", "::3A", ":2A", "a:3A"})
	anyLevel := rapid.StringOf(rapid.Rune().Filter(func(r rune) bool {
		return r != 0 && r != '/' && r != '+' && r != '#'
	}))
	level := rapid.OneOf(edge, anyLevel)
	return rapid.Custom(func(t *rapid.T) string {
		levels := rapid.SliceOfN(level, 1, 6).Draw(t, "levels")
		s := strings.Join(levels, "/")
		if s == "" {
			s = "/"
		}
		return s
	})
}

// TestTopicRoundTrip: every valid MQTT topic name either exceeds
// Switchyard's limits or maps to a valid native topic that maps back to
// it.
func TestTopicRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		name := mqttTopicGen().Draw(t, "name")
		native, err := TopicToNative(name)
		if errors.Is(err, ErrTooLong) {
			return
		}
		if err != nil {
			t.Fatalf("TopicToNative(%q): %v", name, err)
		}
		if err := trie.ValidateTopic(native); err != nil {
			t.Fatalf("TopicToNative(%q) = %q, not a native topic: %v", name, native, err)
		}
		if strings.HasPrefix(name, "$") != trie.IsSystem(native) {
			t.Fatalf("$-topic status differs: %q -> %q", name, native)
		}
		back, err := TopicFromNative(native)
		if err != nil || back != name {
			t.Fatalf("TopicFromNative(%q) = %q, %v; want %q", native, back, err, name)
		}
	})
}

// TestNativeRoundTrip: a native topic that has an MQTT name maps back to
// itself, so the mapping is one to one in both directions.
func TestNativeRoundTrip(t *testing.T) {
	seg := rapid.OneOf(
		rapid.SampledFrom([]string{"a", ":", "::3A", ":2A", ":a:20b", ":abc", "::61", ":C3:A9", ":3A", "$:", "$x"}),
		rapid.StringMatching(`[A-Za-z0-9_:-]{1,6}`),
	)
	rapid.Check(t, func(t *rapid.T) {
		native := strings.Join(rapid.SliceOfN(seg, 1, 5).Draw(t, "segs"), ".")
		if trie.ValidateTopic(native) != nil {
			return
		}
		name, err := TopicFromNative(native)
		if err != nil {
			if !errors.Is(err, ErrNoMQTTName) {
				t.Fatalf("TopicFromNative(%q): %v", native, err)
			}
			return
		}
		again, err := TopicToNative(name)
		if err != nil || again != native {
			t.Fatalf("TopicToNative(TopicFromNative(%q) = %q) = %q, %v", native, name, again, err)
		}
	})
}

// mqttMatches is MQTT's matching rule, written from the specification
// (MQTT 5.0 section 4.7, 3.1.1 section 4.7): levels compare exactly, '+'
// is one level (possibly empty), a last '#' is the parent level and any
// number of levels below it, and a filter starting with a wildcard
// matches no topic starting with '$'.
func mqttMatches(filter, topic string) bool {
	if topic[0] == '$' && (filter[0] == '+' || filter[0] == '#') {
		return false
	}
	f, tl := strings.Split(filter, "/"), strings.Split(topic, "/")
	for i, fl := range f {
		if fl == "#" {
			return true // i <= len(tl): the parent level or below
		}
		if i >= len(tl) || fl != "+" && fl != tl[i] {
			return false
		}
	}
	return len(f) == len(tl)
}

func TestMQTTMatchesReference(t *testing.T) {
	for _, tc := range []struct {
		filter, topic string
		want          bool
	}{
		{"a/#", "a", true}, {"a/#", "a/b/c", true}, {"a/#", "ab", false},
		{"a/+", "a/", true}, {"a/+", "a", false}, {"+", "/", false}, {"+/+", "/", true},
		{"#", "$SYS/x", false}, {"+/x", "$a/x", false}, {"$SYS/#", "$SYS", true},
		{"/#", "/", true}, {"a/b/#", "a", false},
	} {
		if got := mqttMatches(tc.filter, tc.topic); got != tc.want {
			t.Errorf("mqttMatches(%q, %q) = %v, want %v", tc.filter, tc.topic, got, tc.want)
		}
	}
}

// TestNativeMatchingEqualsMQTT: for random filters and topics, the trie
// matching the mapped patterns against the mapped topic gives exactly
// MQTT's answer, and a filter's patterns never both match one topic.
func TestNativeMatchingEqualsMQTT(t *testing.T) {
	level := rapid.SampledFrom([]string{"", "a", "b", "$", "$a", ":", "a.b", " ", "é", "*", ":2A"})
	topicGen := rapid.Custom(func(t *rapid.T) string {
		s := strings.Join(rapid.SliceOfN(level, 1, 4).Draw(t, "levels"), "/")
		if s == "" {
			s = "/"
		}
		return s
	})
	filterGen := rapid.Custom(func(t *rapid.T) string {
		fl := rapid.OneOf(level, rapid.SampledFrom([]string{"+", "+"}))
		levels := rapid.SliceOfN(fl, 0, 4).Draw(t, "levels")
		if rapid.Bool().Draw(t, "hash") || len(levels) == 0 {
			levels = append(levels, "#")
		}
		s := strings.Join(levels, "/")
		if s == "" {
			s = "/"
		}
		return s
	})
	rapid.Check(t, func(t *rapid.T) {
		filters := rapid.SliceOfN(filterGen, 1, 8).Draw(t, "filters")
		topics := rapid.SliceOfN(topicGen, 1, 8).Draw(t, "topics")
		tr := trie.New[int]()
		for i, f := range filters {
			pf, err := ParseFilter(f)
			if err != nil {
				t.Fatalf("ParseFilter(%q): %v", f, err)
			}
			for _, p := range pf.Patterns {
				if err := tr.Add(p, i); err != nil {
					t.Fatalf("filter %q: Add(%q): %v", f, p, err)
				}
			}
		}
		for _, topic := range topics {
			native, err := TopicToNative(topic)
			if err != nil {
				t.Fatalf("TopicToNative(%q): %v", topic, err)
			}
			got := make([]int, len(filters))
			tr.Match(native, func(pattern string, subs []int) {
				if !trie.Matches(pattern, native) {
					t.Fatalf("trie reported %q for %q, trie.Matches disagrees", pattern, native)
				}
				for _, i := range subs {
					got[i]++
				}
			})
			for i, f := range filters {
				want := 0
				if mqttMatches(f, topic) {
					want = 1
				}
				if got[i] != want {
					t.Fatalf("filter %q topic %q (native %q): matched %d times, MQTT says %d",
						f, topic, native, got[i], want)
				}
			}
		}
	})
}

// BenchmarkTopicMapping: an MQTT publish maps its topic once; a delivery
// maps the native topic back once per message (not per session).
func BenchmarkTopicMapping(b *testing.B) {
	for _, name := range []string{"sensors/room1/temp", "home/living room/température"} {
		native, err := TopicToNative(name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run("ToNative/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := TopicToNative(name); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("FromNative/"+name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := TopicFromNative(native); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
