package trie

import (
	"errors"
	"strings"
	"testing"
)

// nameCases exercises every rule of the Names section of the protocol. A
// case is valid as a topic, as a pattern, both or neither.
var nameCases = []struct {
	name    string
	in      string
	topic   bool // valid topic
	pattern bool // valid pattern
}{
	{"one segment", "orders", true, true},
	{"several segments", "orders.created.eu", true, true},
	{"all allowed bytes", "AZaz09_-:.x", true, true},
	{"colon and dash", "tenant:42.user-1", true, true},
	{"max bytes", strings.Repeat("a", MaxNameBytes), true, true},
	{"max bytes and max segments", strings.Repeat(strings.Repeat("a", 15)+".", 15) + strings.Repeat("a", 15), true, true},
	{"over max bytes with max segments", strings.Repeat(strings.Repeat("a", 15)+".", 15) + strings.Repeat("a", 16), false, false},
	{"over max bytes", strings.Repeat("a", MaxNameBytes+1), false, false},
	{"max segments", strings.Repeat("a.", MaxSegments-1) + "a", true, true},
	{"over max segments", strings.Repeat("a.", MaxSegments) + "a", false, false},
	{"max segments ending in #", strings.Repeat("a.", MaxSegments-1) + "#", false, true},
	{"over max segments ending in #", strings.Repeat("a.", MaxSegments) + "#", false, false},
	{"empty", "", false, false},
	{"empty segment", "a..b", false, false},
	{"leading dot", ".a", false, false},
	{"trailing dot", "a.", false, false},
	{"only a dot", ".", false, false},
	{"system", "$sys.stats", true, true},
	{"system only", "$sys", true, true},
	{"dollar alone", "$", false, false},
	{"dollar alone then more", "$.a", false, false},
	{"dollar inside first segment", "s$ys.a", false, false},
	{"dollar in second segment", "a.$b", false, false},
	{"double dollar", "$$a", false, false},
	{"system wildcard", "$sys.*", false, true},
	{"system rest", "$sys.#", false, true},
	{"star", "*", false, true},
	{"rest", "#", false, true},
	{"star in the middle", "orders.*.eu", false, true},
	{"rest at the end", "orders.#", false, true},
	{"star then rest", "*.#", false, true},
	{"star in a segment", "a*", false, false},
	{"star after dot in a segment", "a.b*", false, false},
	{"rest in a segment", "a#", false, false},
	{"rest not last", "#.x", false, false},
	{"rest in the middle", "a.#.b", false, false},
	{"two rests", "#.#", false, false},
	{"dollar star", "$*", false, false},
	{"space", "a b", false, false},
	{"leading space", " a", false, false},
	{"tab", "a\tb", false, false},
	{"newline", "a\n", false, false},
	{"nul", "a\x00b", false, false},
	{"del", "a\x7fb", false, false},
	{"unicode letter", "ordérs", false, false},
	{"unicode only", "日本", false, false},
	{"invalid utf8", "a\xffb", false, false},
	{"slash", "a/b", false, false},
	{"plus", "a+b", false, false},
	{"greater than", "a>b", false, false},
}

func TestValidateTopic(t *testing.T) {
	for _, tc := range nameCases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateTopic(tc.in)
			if got := err == nil; got != tc.topic {
				t.Fatalf("ValidateTopic(%q) = %v, want valid %v", tc.in, err, tc.topic)
			}
			if err != nil && !errors.Is(err, ErrInvalidTopic) {
				t.Fatalf("ValidateTopic(%q) = %v, does not wrap ErrInvalidTopic", tc.in, err)
			}
			if err != nil && errors.Is(err, ErrInvalidPattern) {
				t.Fatalf("ValidateTopic(%q) = %v, wraps ErrInvalidPattern", tc.in, err)
			}
		})
	}
}

func TestValidatePattern(t *testing.T) {
	for _, tc := range nameCases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidatePattern(tc.in)
			if got := err == nil; got != tc.pattern {
				t.Fatalf("ValidatePattern(%q) = %v, want valid %v", tc.in, err, tc.pattern)
			}
			if err != nil && !errors.Is(err, ErrInvalidPattern) {
				t.Fatalf("ValidatePattern(%q) = %v, does not wrap ErrInvalidPattern", tc.in, err)
			}
		})
	}
}

func TestValidateReason(t *testing.T) {
	tests := []struct {
		name, in, reason string
	}{
		{"empty", "", `invalid pattern "": a pattern is one or more segments separated by dots, such as "orders.created"`},
		{"too long", strings.Repeat("a", MaxNameBytes+1), "256 bytes, longer than the limit of 255"},
		{"too many segments", strings.Repeat("a.", MaxSegments) + "a", "more than 16 segments"},
		{"empty segment", "orders..eu", `invalid pattern "orders..eu": segment 2 is empty (segments are separated by single dots)`},
		{"trailing dot", "orders.", `segment 2 is empty: the pattern ends in a dot; for every topic under "orders" write "orders.#" (in a URL, "orders.%23")`},
		{"rest not last", "#.x", `segment 1 is "#", which is allowed only as the last segment`},
		{"partial wildcard", "a*", `segment 1 has "*" inside it: a wildcard must be a whole segment`},
		{"dollar", "a.$b", `"$", which is allowed only as the first character`},
		{"dollar alone", "$.a", `segment 1 is "$", which must be followed by a name`},
		{"space", "a b", `segment 1 has the character " ", which is not allowed (segments use only A-Z a-z 0-9 _ - :)`},
		{"utf-8 shown as written", "café.eu", `invalid pattern "café.eu": segment 1 has the character "é", which is not allowed`},
		{"invalid utf-8", "a\xffb", `segment 1 has the byte 0xff, which is not UTF-8`},
		{"control character", "a\tb", `the character U+0009 '\t', which is not allowed`},
		{"nats rest", "orders.>", `segment 2 is ">", which is not a wildcard here: write "orders.#"`},
		{"mqtt one", "a.+.b", `segment 2 is "+", which is not a wildcard here: write "a.*.b"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidatePattern(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("ValidatePattern(%q) = %v, want reason %q", tc.in, err, tc.reason)
			}
		})
	}
}

func TestIsSystem(t *testing.T) {
	tests := []struct {
		in   string
		want bool
	}{
		{"$sys.stats", true},
		{"$sys.#", true},
		{"sys.stats", false},
		{"#", false},
		{"", false},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			if got := IsSystem(tc.in); got != tc.want {
				t.Fatalf("IsSystem(%q) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
}

// matchCases are (pattern, topic) pairs with the reference answer.
var matchCases = []struct {
	name           string
	pattern, topic string
	want           bool
}{
	{"literal", "orders", "orders", true},
	{"literal differs", "orders", "order", false},
	{"literal longer topic", "orders", "orders.a", false},
	{"literal shorter topic", "orders.a", "orders", false},
	{"case sensitive", "Orders", "orders", false},
	{"star middle", "orders.*.eu", "orders.created.eu", true},
	{"star middle wrong tail", "orders.*.eu", "orders.created.us", false},
	{"star middle too short", "orders.*.eu", "orders.eu", false},
	{"star middle too long", "orders.*.eu", "orders.a.b.eu", false},
	{"star is one segment", "orders.*", "orders.a.b", false},
	{"star needs a segment", "orders.*", "orders", false},
	{"rest not zero segments", "orders.#", "orders", false},
	{"rest one segment", "orders.#", "orders.a", true},
	{"rest two segments", "orders.#", "orders.a.b", true},
	{"rest prefix differs", "orders.#", "order.a", false},
	{"rest alone", "#", "a.b.c", true},
	{"star alone", "*", "a", true},
	{"star alone two segments", "*", "a.b", false},
	{"star then rest", "*.#", "a.b", true},
	{"star then rest one segment", "*.#", "a", false},
	{"max segments", strings.Repeat("*.", MaxSegments-1) + "*", strings.Repeat("a.", MaxSegments-1) + "a", true},
	{"star on system", "*", "$sys", false},
	{"star first on system", "*.stats", "$sys.stats", false},
	{"rest on system", "#", "$sys.stats", false},
	{"system literal", "$sys.stats", "$sys.stats", true},
	{"system star", "$sys.*", "$sys.stats", true},
	{"system rest", "$sys.#", "$sys.a.b", true},
	{"system rest not bare", "$sys.#", "$sys", false},
	{"dollar rule only first segment", "a.*", "a.b", true},
	{"literal vs star segment", "orders.created", "orders.*", false},
}

func TestMatches(t *testing.T) {
	for _, tc := range matchCases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Matches(tc.pattern, tc.topic); got != tc.want {
				t.Fatalf("Matches(%q, %q) = %v, want %v", tc.pattern, tc.topic, got, tc.want)
			}
		})
	}
}

func FuzzValidate(f *testing.F) {
	for _, tc := range nameCases {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, s string) {
		terr, perr := ValidateTopic(s), ValidatePattern(s)
		if terr != nil && !errors.Is(terr, ErrInvalidTopic) {
			t.Fatalf("ValidateTopic(%q) = %v", s, terr)
		}
		if perr != nil && !errors.Is(perr, ErrInvalidPattern) {
			t.Fatalf("ValidatePattern(%q) = %v", s, perr)
		}
		if terr == nil && perr != nil {
			t.Fatalf("%q is a valid topic but not a valid pattern: %v", s, perr)
		}
		if perr != nil {
			return
		}
		// Check the rules independently of the validator.
		if len(s) == 0 || len(s) > MaxNameBytes {
			t.Fatalf("%q (%d bytes) accepted", s, len(s))
		}
		segs := strings.Split(s, ".")
		if len(segs) > MaxSegments {
			t.Fatalf("%q (%d segments) accepted", s, len(segs))
		}
		for i, seg := range segs {
			if seg == "*" || seg == "#" && i == len(segs)-1 {
				if terr == nil {
					t.Fatalf("%q has wildcards but is a valid topic", s)
				}
				continue
			}
			body := seg
			if i == 0 {
				body = strings.TrimPrefix(seg, "$")
			}
			if body == "" {
				t.Fatalf("%q: segment %d %q accepted", s, i+1, seg)
			}
			for j := 0; j < len(body); j++ {
				if !segmentByte(body[j]) {
					t.Fatalf("%q: segment %d %q accepted", s, i+1, seg)
				}
			}
		}
		if terr == nil && !Matches(s, s) {
			t.Fatalf("topic %q does not match itself", s)
		}
	})
}
