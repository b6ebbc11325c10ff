package trie

import (
	"errors"
	"fmt"
	"strings"
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
	if pattern {
		sentinel = ErrInvalidPattern
	}
	switch {
	case s == "":
		return invalid(sentinel, s, "empty")
	case len(s) > MaxNameBytes:
		return invalid(sentinel, s, fmt.Sprintf("longer than %d bytes", MaxNameBytes))
	}
	segs, start := 0, 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '.' {
			continue
		}
		seg := s[start:i]
		segs++
		if segs > MaxSegments {
			return invalid(sentinel, s, fmt.Sprintf("more than %d segments", MaxSegments))
		}
		if err := validSegment(seg, segs == 1, i == len(s), pattern); err != "" {
			return invalid(sentinel, s, fmt.Sprintf("segment %d: %s", segs, err))
		}
		start = i + 1
	}
	return nil
}

func validSegment(seg string, first, last, pattern bool) string {
	if seg == "" {
		return "empty segment"
	}
	if pattern {
		switch seg {
		case "*":
			return ""
		case "#":
			if !last {
				return `"#" is allowed only as the last segment`
			}
			return ""
		}
	}
	for j := 0; j < len(seg); j++ {
		c := seg[j]
		switch {
		case segmentByte(c):
		case c == '$' && first && j == 0 && len(seg) > 1:
		case c == '$' && first && j == 0:
			return `"$" must be followed by a name`
		case c == '$':
			return `"$" is allowed only as the first character of the first segment`
		case c == '*' || c == '#':
			if pattern {
				return fmt.Sprintf("%q must be a whole segment", c)
			}
			return fmt.Sprintf("%q is not allowed in a topic", c)
		default:
			return fmt.Sprintf("character %q is not allowed", c)
		}
	}
	return ""
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
