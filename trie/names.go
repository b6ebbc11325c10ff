package trie

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Limits on names, from the wire protocol.
const (
	MaxNameBytes = 255
	MaxSegments  = 16
)

// Sentinel errors. Validation errors wrap one of them with the reason, so
// errors.Is(err, ErrInvalidTopic) holds and err.Error() says why.
var (
	ErrInvalidTopic   = errors.New("trie: invalid topic")
	ErrInvalidPattern = errors.New("trie: invalid pattern")
)

func invalid(sentinel error, name, why string) error {
	return fmt.Errorf("%w %q: %s", sentinel, name, why)
}

// segmentByte reports whether c may appear in a segment (besides a leading
// '$' on the first segment).
func segmentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '-' || c == ':'
}

// ValidateTopic reports whether s is a valid topic: 1 to 16 non-empty
// segments of [A-Za-z0-9_:-] joined by '.', at most 255 bytes, where the
// first segment may start with '$' (reserved for the server).
func ValidateTopic(s string) error {
	return validate(s, false)
}

// ValidatePattern reports whether s is a valid pattern: like a topic, where
// a whole segment may be '*' (exactly one segment) or, as the last segment
// only, '#' (one or more trailing segments).
func ValidatePattern(s string) error {
	return validate(s, true)
}

func validate(s string, pattern bool) error {
	sentinel := ErrInvalidTopic
	what := "a topic"
	if pattern {
		sentinel, what = ErrInvalidPattern, "a pattern"
	}
	switch {
	case s == "":
		return invalid(sentinel, s, fmt.Sprintf("%s is one or more segments separated by dots, such as \"orders.created\"", what))
	case len(s) > MaxNameBytes:
		return invalid(sentinel, s, fmt.Sprintf("%d bytes, longer than the limit of %d", len(s), MaxNameBytes))
	}
	segs, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '.' {
			continue
		}
		seg := s[start:i]
		segs++
		if segs > MaxSegments {
			return invalid(sentinel, s, fmt.Sprintf("more than %d segments (at most %d, separated by dots)", MaxSegments, MaxSegments))
		}
		if seg == "" {
			return invalid(sentinel, s, emptySegment(s, segs, i == len(s), pattern))
		}
		if pattern && (seg == ">" || seg == "+") {
			return invalid(sentinel, s, foreignWildcard(s, start, i, segs))
		}
		if err := validSegment(seg, segs == 1, i == len(s), pattern); err != "" {
			return invalid(sentinel, s, fmt.Sprintf("segment %d %s", segs, err))
		}
		start = i + 1
	}
	return nil
}

// emptySegment explains an empty segment n of s. A pattern that ends in a
// dot is most often "orders.#" whose "#" a URL cut off as its fragment.
func emptySegment(s string, n int, last, pattern bool) string {
	if last && pattern && len(s) > 1 {
		stem := s[:len(s)-1]
		return fmt.Sprintf("segment %d is empty: the pattern ends in a dot; for every topic under %q write %q (in a URL, %q)", n, stem, stem+".#", stem+".%23")
	}
	return fmt.Sprintf("segment %d is empty (segments are separated by single dots)", n)
}

// foreignWildcard explains the wildcard of NATS (">") or MQTT ("+") in
// segment n, s[start:end], naming the pattern meant.
func foreignWildcard(s string, start, end, n int) string {
	if s[start] == '>' {
		if end == len(s) {
			return fmt.Sprintf(`segment %d is ">", which is not a wildcard here: write %q ("#" as the last segment matches one or more trailing segments)`, n, s[:start]+"#")
		}
		return fmt.Sprintf(`segment %d is ">", which is not a wildcard here: "#" as the last segment matches one or more trailing segments`, n)
	}
	return fmt.Sprintf(`segment %d is "+", which is not a wildcard here: write %q ("*" matches exactly one segment)`, n, s[:start]+"*"+s[end:])
}

// validSegment returns why seg is not a valid segment, as the end of a
// sentence that starts with "segment N", or "" when it is valid.
func validSegment(seg string, first, last, pattern bool) string {
	if pattern {
		switch seg {
		case "*":
			return ""
		case "#":
			if !last {
				return `is "#", which is allowed only as the last segment (it matches one or more trailing segments)`
			}
			return ""
		case ">", "+":
			return "" // wildcards of other systems: validate names the fix
		}
	}
	for j := 0; j < len(seg); j++ {
		c := seg[j]
		switch {
		case segmentByte(c):
		case c == '$' && first && j == 0 && len(seg) > 1:
		case c == '$' && first && j == 0:
			return `is "$", which must be followed by a name, such as "$sys"`
		case c == '$':
			return `has "$", which is allowed only as the first character of the first segment`
		case c == '*' || c == '#':
			if pattern {
				return fmt.Sprintf("has %q inside it: a wildcard must be a whole segment, such as \"orders.%c\"", string(c), c)
			}
			return fmt.Sprintf("has %q, a wildcard: wildcards are allowed in patterns, not in topics", string(c))
		default:
			return "has " + character(seg[j:]) + " (segments use only A-Z a-z 0-9 _ - :)"
		}
	}
	return ""
}

// character names the first character of s as written: a UTF-8 character
// whole ("é", not its first byte), a byte that is not UTF-8 by its value.
func character(s string) string {
	r, size := utf8.DecodeRuneInString(s)
	switch {
	case r == utf8.RuneError && size <= 1:
		return fmt.Sprintf("the byte 0x%02x, which is not UTF-8", s[0])
	case unicode.IsPrint(r):
		return fmt.Sprintf("the character %q, which is not allowed", string(r))
	}
	return fmt.Sprintf("the character %U %s, which is not allowed", r, strconv.QuoteRune(r))
}

// IsSystem reports whether a topic or pattern is in the server's reserved
// namespace (its first segment starts with '$').
func IsSystem(name string) bool {
	return strings.HasPrefix(name, "$")
}

// Matches reports whether a valid pattern matches a valid topic. It is the
// reference semantics the Trie implements: '*' is one segment, a trailing
// '#' one or more, and a pattern starting with a wildcard never matches a
// '$' topic. It allocates nothing.
func Matches(pattern, topic string) bool {
	if topic != "" && topic[0] == '$' && pattern != "" && (pattern[0] == '*' || pattern[0] == '#') {
		return false
	}
	for {
		pseg, prest, pmore := cut(pattern)
		if pseg == "#" {
			return topic != ""
		}
		if topic == "" {
			return false
		}
		tseg, trest, tmore := cut(topic)
		if pseg != "*" && pseg != tseg {
			return false
		}
		if !pmore || !tmore {
			return pmore == tmore
		}
		pattern, topic = prest, trest
	}
}

// cut splits off the first segment.
func cut(s string) (seg, rest string, more bool) {
	if i := strings.IndexByte(s, '.'); i >= 0 {
		return s[:i], s[i+1:], true
	}
	return s, "", false
}
