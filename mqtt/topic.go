package mqtt

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/switchyard/switchyard/trie"
)

// MaxMQTTNameBytes is the longest topic name or filter MQTT can carry (a
// two-byte length prefix). Switchyard's own limits (trie.MaxNameBytes,
// trie.MaxSegments) are stricter and apply to the mapped name.
const MaxMQTTNameBytes = 65535

// Sentinel errors of the topic mapping. Errors wrap one of them with the
// offending name and the reason, so errors.Is(err, ErrInvalidTopic) holds
// and err.Error() says why.
var (
	// ErrInvalidTopic: a topic name that MQTT itself forbids (empty, bad
	// UTF-8, U+0000, a wildcard character, longer than 65535 bytes).
	ErrInvalidTopic = errors.New("mqtt: invalid topic name")
	// ErrInvalidFilter: a topic filter or shared subscription that MQTT
	// itself forbids.
	ErrInvalidFilter = errors.New("mqtt: invalid topic filter")
	// ErrTooLong: a valid MQTT name whose Switchyard form exceeds
	// trie.MaxNameBytes bytes or trie.MaxSegments segments. Errors with it
	// also wrap ErrInvalidTopic or ErrInvalidFilter.
	ErrTooLong = errors.New("mqtt: name exceeds Switchyard's name limits")
	// ErrNoMQTTName: a native topic that no MQTT topic name maps to (a
	// segment starting with ':' that is not the canonical escape of a
	// level). MQTT subscribers never see such topics.
	ErrNoMQTTName = errors.New("mqtt: native topic has no MQTT name")
)

// sharePrefix starts a shared subscription, "$share/<group>/<filter>".
const sharePrefix = "$share/"

// nameByte reports whether c is a Switchyard name character, the bytes a
// segment is made of (see trie.ValidateTopic).
func nameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '-' || c == ':'
}

// groupByte reports whether c may appear in a native group name: the name
// characters and '.'.
func groupByte(c byte) bool { return nameByte(c) || c == '.' }

// escapeMark starts an escaped level or group name.
const escapeMark = ':'

// plain reports whether s maps unchanged: non-empty, made of bytes ok
// accepts, and not starting with the escape mark.
func plain(s string, ok func(byte) bool) bool {
	if s == "" || s[0] == escapeMark {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return false
		}
	}
	return true
}

const hexDigits = "0123456789ABCDEF"

// appendEscaped appends s unchanged if it is plain, and otherwise ':'
// followed by s with every byte that is not a name character, and every
// ':', written as ':' and two upper-case hex digits.
func appendEscaped(dst []byte, s string, ok func(byte) bool) []byte {
	if plain(s, ok) {
		return append(dst, s...)
	}
	dst = append(dst, escapeMark)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if ok(c) && c != escapeMark {
			dst = append(dst, c)
			continue
		}
		dst = append(dst, escapeMark, hexDigits[c>>4], hexDigits[c&15])
	}
	return dst
}

// appendUnescaped appends to dst the level or name s is the escape of,
// reversing appendEscaped. It accepts only the canonical form
// appendEscaped produces, so that the mapping is a bijection between MQTT
// names and the native names it produces; otherwise it reports false.
func appendUnescaped(dst []byte, s string, ok func(byte) bool) ([]byte, bool) {
	if s == "" {
		return dst, false
	}
	if s[0] != escapeMark {
		return append(dst, s...), plain(s, ok)
	}
	start := len(dst)
	for i := 1; i < len(s); i++ {
		c := s[i]
		if c != escapeMark {
			if !ok(c) {
				return dst, false
			}
			dst = append(dst, c)
			continue
		}
		if i+2 >= len(s) {
			return dst, false
		}
		hi, lo := unhex(s[i+1]), unhex(s[i+2])
		if hi < 0 || lo < 0 {
			return dst, false
		}
		c = byte(hi<<4 | lo)
		if ok(c) && c != escapeMark {
			return dst, false // would have been written as itself
		}
		dst = append(dst, c)
		i += 2
	}
	// Written unchanged if plain; never escaped if it were.
	return dst, !plainBytes(dst[start:], ok)
}

// plainBytes is plain for a byte slice.
func plainBytes(b []byte, ok func(byte) bool) bool {
	if len(b) == 0 || b[0] == escapeMark {
		return false
	}
	for _, c := range b {
		if !ok(c) {
			return false
		}
	}
	return true
}

func unhex(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return int(c - '0')
	case c >= 'A' && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}

// appendLevel appends the native segment of one MQTT level. A first level
// starting with '$' keeps the '$' in front of the mapped rest, so that
// MQTT's $-topics are exactly Switchyard's $-topics.
func appendLevel(dst []byte, level string, first bool) []byte {
	if first && level != "" && level[0] == '$' {
		return appendEscaped(append(dst, '$'), level[1:], nameByte)
	}
	return appendEscaped(dst, level, nameByte)
}

// ValidateTopic reports whether name is a valid MQTT topic name: 1 to 65535
// bytes of UTF-8 without U+0000, '+' or '#'. It does not check
// Switchyard's limits; TopicToNative does.
func ValidateTopic(name string) error {
	if err := validName(name); err != "" {
		return fmt.Errorf("%w %q: %s", ErrInvalidTopic, name, err)
	}
	if i := strings.IndexAny(name, "+#"); i >= 0 {
		return fmt.Errorf("%w %q: wildcard %q in a topic name", ErrInvalidTopic, name, name[i])
	}
	return nil
}

func validName(s string) string {
	switch {
	case s == "":
		return "empty"
	case len(s) > MaxMQTTNameBytes:
		return fmt.Sprintf("longer than %d bytes", MaxMQTTNameBytes)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "contains U+0000"
	}
	return ""
}

// TopicToNative returns the Switchyard topic of a valid MQTT topic name.
//
// Levels separated by '/' become segments separated by '.'. A level made
// of the name characters A-Z a-z 0-9 _ - : that does not start with ':'
// is its own segment, so "sensors/room1/temp" is "sensors.room1.temp".
// Every other level (empty, or holding any other character, or starting
// with ':') becomes ':' followed by the level with each byte outside
// A-Z a-z 0-9 _ - written as ':' and two upper-case hex digits: "" is ":",
// "room 1" is ":room:201", "a.b" is ":a:2Eb", "é" is "::C3:A9". A first
// level starting with '$' keeps the '$' and maps the rest the same way
// ("$SYS" stays, "$" is "$:"). The result must fit Switchyard's limits
// (255 bytes, 16 segments); otherwise the error wraps ErrTooLong.
func TopicToNative(name string) (string, error) {
	if err := ValidateTopic(name); err != nil {
		return "", err
	}
	var buf [trie.MaxNameBytes + 4]byte
	dst := buf[:0]
	segs := 0
	for level, rest, more := name, "", true; more; level = rest {
		level, rest, more = strings.Cut(level, "/")
		if segs > 0 {
			dst = append(dst, '.')
		}
		dst = appendLevel(dst, level, segs == 0)
		segs++
		if segs > trie.MaxSegments || len(dst) > trie.MaxNameBytes {
			return "", tooLong(ErrInvalidTopic, name)
		}
	}
	return string(dst), nil
}

func tooLong(sentinel error, name string) error {
	return fmt.Errorf("%w %q: %w (%d bytes, %d segments)", sentinel, name, ErrTooLong,
		trie.MaxNameBytes, trie.MaxSegments)
}

// TopicFromNative returns the MQTT topic name of a valid Switchyard topic:
// the inverse of TopicToNative. A native topic that TopicToNative never
// produces (a segment starting with ':' that is not the canonical escape
// of a level, or the lone segment ":", which would be the empty name) has
// no MQTT name; the error wraps ErrNoMQTTName.
func TopicFromNative(native string) (string, error) {
	var buf [trie.MaxNameBytes]byte // an MQTT name is never longer than its native form
	dst := buf[:0]
	for i, seg, rest, more := 0, native, "", true; more; i, seg = i+1, rest {
		seg, rest, more = strings.Cut(seg, ".")
		if i > 0 {
			dst = append(dst, '/')
		}
		if i == 0 && seg != "" && seg[0] == '$' {
			dst = append(dst, '$')
			seg = seg[1:]
		}
		start := len(dst)
		var ok bool
		dst, ok = appendUnescaped(dst, seg, nameByte)
		if level := dst[start:]; !ok || bytes.ContainsAny(level, "+#/\x00") || !utf8.Valid(level) {
			return "", fmt.Errorf("%w: %q, segment %d", ErrNoMQTTName, native, i+1)
		}
	}
	if len(dst) == 0 { // ":" alone would be the empty topic name, which MQTT forbids
		return "", fmt.Errorf("%w: %q is the empty topic name", ErrNoMQTTName, native)
	}
	return string(dst), nil
}

// Filter is the native form of one MQTT topic filter of a SUBSCRIBE or
// UNSUBSCRIBE.
type Filter struct {
	// Filter is the topic filter without any "$share/<group>/" prefix, as
	// the client wrote it.
	Filter string
	// Share is the MQTT share name of a shared subscription, "" otherwise.
	Share string
	// Group is the native consumer group Share maps to, "" if not shared.
	// A share name made of A-Z a-z 0-9 _ - : . not starting with ':' is
	// its own group name; any other is escaped as a level is.
	Group string
	// Patterns are the native patterns that together match exactly the
	// topics the filter matches: one, or two for a filter ending in "/#",
	// which also matches its parent level ("a/#" is "a" and "a.#"). The
	// two never match the same topic, so a subscriber added under both
	// gets each message once.
	Patterns []string
}

// ParseFilter validates an MQTT topic filter, which may be a shared
// subscription "$share/<share name>/<filter>", and returns its native
// form. '+' is '*'; '#' keeps MQTT's meaning (see Filter.Patterns); other
// levels map as in TopicToNative, so a filter and the topics it matches
// map consistently, and first-level wildcards never match $-topics on
// either side. Errors wrap ErrInvalidFilter, and ErrTooLong when the
// patterns exceed Switchyard's limits.
func ParseFilter(s string) (Filter, error) {
	if err := validName(s); err != "" {
		return Filter{}, fmt.Errorf("%w %q: %s", ErrInvalidFilter, s, err)
	}
	f := Filter{Filter: s}
	if rest, ok := strings.CutPrefix(s, sharePrefix); ok {
		share, filter, found := strings.Cut(rest, "/")
		switch {
		case share == "":
			return Filter{}, fmt.Errorf("%w %q: empty share name", ErrInvalidFilter, s)
		case strings.ContainsAny(share, "+#"):
			return Filter{}, fmt.Errorf("%w %q: wildcard in the share name", ErrInvalidFilter, s)
		case !found || filter == "":
			return Filter{}, fmt.Errorf("%w %q: no filter after the share name", ErrInvalidFilter, s)
		}
		f.Filter, f.Share = filter, share
		f.Group = string(appendEscaped(nil, share, groupByte))
		if len(f.Group) > trie.MaxNameBytes {
			return Filter{}, tooLong(ErrInvalidFilter, s)
		}
	}
	var buf [trie.MaxNameBytes + 8]byte
	dst := buf[:0]
	segs, hash := 0, false
	for level, rest, more := f.Filter, "", true; more; level = rest {
		level, rest, more = strings.Cut(level, "/")
		if err := filterLevel(level, more); err != "" {
			return Filter{}, fmt.Errorf("%w %q: level %d: %s", ErrInvalidFilter, s, segs+1, err)
		}
		if level == "#" {
			hash = true
			break
		}
		if segs > 0 {
			dst = append(dst, '.')
		}
		if level == "+" {
			dst = append(dst, '*')
		} else {
			dst = appendLevel(dst, level, segs == 0)
		}
		segs++
		if segs > trie.MaxSegments || len(dst) > trie.MaxNameBytes {
			return Filter{}, tooLong(ErrInvalidFilter, s)
		}
	}
	switch {
	case !hash:
		f.Patterns = []string{string(dst)}
	case segs == 0:
		f.Patterns = []string{"#"}
	default:
		if segs+1 > trie.MaxSegments || len(dst)+2 > trie.MaxNameBytes {
			return Filter{}, tooLong(ErrInvalidFilter, s)
		}
		parent := string(dst)
		f.Patterns = []string{parent, parent + ".#"}
	}
	return f, nil
}

// filterLevel checks one level of a filter; more is whether levels follow.
func filterLevel(level string, more bool) string {
	switch {
	case level == "#" && more:
		return `"#" must be the last level`
	case level == "#" || level == "+":
		return ""
	case strings.ContainsAny(level, "+#"):
		return "a wildcard must be a whole level"
	}
	return ""
}
