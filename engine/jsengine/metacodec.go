package jsengine

// The record metadata header (Sy-Meta): the JSON object {k, h, p} that
// encoding/json writes for recMeta. Most records carry one (a WebSocket
// publish has priority 1), and the live tail decodes one per record, so
// encoding/json's reflection was a tenth of a gateway's CPU on the
// publish path. Both directions therefore take a fast path for the
// layouts encoding/json writes for the common cases and hand anything
// else to encoding/json: the fast paths give exactly what encoding/json
// gives (metacodec_test.go compares them on a table and under fuzzing).
//
// Encoding: a record without headers whose key holds only printable
// ASCII that encoding/json writes as is (no quote, backslash, <, > or &)
// is written by hand; others by json.Marshal.
//
// Decoding: an object of the keys k, h and p, in that order, each at most
// once, without whitespace, whose strings hold no escape or control
// character and are valid UTF-8, and whose p is a decimal integer of at
// most 255 written without a sign, fraction, exponent or leading zero, is
// read by hand; anything else by json.Unmarshal.

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"

	"github.com/switchyard/switchyard/engine"
)

// priorityMeta holds the metadata of a record with only a priority, by
// priority (index 0 is unused: such a record has no metadata).
var priorityMeta = func() (t [256]string) {
	for p := 1; p < len(t); p++ {
		t[p] = `{"p":` + strconv.Itoa(p) + `}`
	}
	return t
}()

// metaOf returns m's metadata header, "" when m has no key, headers or
// priority.
func metaOf(m *engine.Message) string {
	if m.Key == "" && len(m.Headers) == 0 && m.Priority == 0 {
		return ""
	}
	if len(m.Headers) == 0 {
		if m.Key == "" {
			return priorityMeta[m.Priority]
		}
		if plainASCII(m.Key) {
			b := make([]byte, 0, len(m.Key)+len(`{"k":"","p":255}`))
			b = append(b, `{"k":"`...)
			b = append(b, m.Key...)
			b = append(b, '"')
			if m.Priority != 0 {
				b = append(b, `,"p":`...)
				b = strconv.AppendUint(b, uint64(m.Priority), 10)
			}
			return string(append(b, '}'))
		}
	}
	meta, _ := json.Marshal(recMeta{K: m.Key, H: m.Headers, P: m.Priority})
	return string(meta)
}

// plainASCII reports whether json.Marshal writes s between quotes as is.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// decodeMeta decodes a metadata header as json.Unmarshal into a recMeta
// does; ok is false where json.Unmarshal fails.
func decodeMeta(s string) (recMeta, bool) {
	if meta, ok := scanMeta(s); ok {
		return meta, true
	}
	return unmarshalMeta(s)
}

// unmarshalMeta is decodeMeta's slow path, apart so that only it moves
// its result to the heap.
func unmarshalMeta(s string) (recMeta, bool) {
	var meta recMeta
	if err := json.Unmarshal([]byte(s), &meta); err != nil {
		return recMeta{}, false
	}
	return meta, true
}

// scanMeta is decodeMeta's fast path (see the file comment); ok is false
// for anything outside it, valid JSON or not.
func scanMeta(s string) (m recMeta, ok bool) {
	n := len(s)
	if n < 2 || s[0] != '{' || s[n-1] != '}' {
		return recMeta{}, false
	}
	if n == 2 {
		return m, true
	}
	i, next := 1, 0 // next: 0 k may come, 1 h, 2 p, 3 nothing
	for {
		key, j, ok := plainString(s, i)
		if !ok || j >= n || s[j] != ':' {
			return recMeta{}, false
		}
		j++
		switch {
		case key == "k" && next == 0:
			m.K, j, ok = plainString(s, j)
			next = 1
		case key == "h" && next <= 1:
			m.H, j, ok = plainObject(s, j)
			next = 2
		case key == "p" && next <= 2:
			m.P, j, ok = smallUint(s, j)
			next = 3
		default:
			ok = false
		}
		if !ok || j >= n {
			return recMeta{}, false
		}
		switch {
		case s[j] == '}' && j == n-1:
			return m, true
		case s[j] == ',':
			i = j + 1
		default:
			return recMeta{}, false
		}
	}
}

// plainString reads the string at s[i]: its value and the index after
// it; ok is false unless it is quoted, with no escape or control
// character, and valid UTF-8.
func plainString(s string, i int) (v string, j int, ok bool) {
	if i >= len(s) || s[i] != '"' {
		return "", i, false
	}
	ascii := true
	for j = i + 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '"':
			v = s[i+1 : j]
			if !ascii && !utf8.ValidString(v) {
				return "", j, false
			}
			return v, j + 1, true
		case c == '\\', c < 0x20:
			return "", j, false
		case c >= 0x80:
			ascii = false
		}
	}
	return "", j, false
}

// plainObject reads the object of plain strings at s[i] (later keys
// replace earlier ones, as in json.Unmarshal) and the index after it.
func plainObject(s string, i int) (h map[string]string, j int, ok bool) {
	if i >= len(s) || s[i] != '{' {
		return nil, i, false
	}
	h = map[string]string{}
	j = i + 1
	if j < len(s) && s[j] == '}' {
		return h, j + 1, true
	}
	for {
		var k, v string
		if k, j, ok = plainString(s, j); !ok || j >= len(s) || s[j] != ':' {
			return nil, j, false
		}
		if v, j, ok = plainString(s, j+1); !ok || j >= len(s) {
			return nil, j, false
		}
		h[k] = v
		switch s[j] {
		case '}':
			return h, j + 1, true
		case ',':
			j++
		default:
			return nil, j, false
		}
	}
}

// smallUint reads the decimal integer at s[i], at most 255, with no
// sign, fraction, exponent or leading zero, and the index after it.
func smallUint(s string, i int) (v uint8, j int, ok bool) {
	var x int
	for j = i; j < len(s) && s[j] >= '0' && s[j] <= '9'; j++ {
		if j-i == 3 || (j > i && s[i] == '0') {
			return 0, j, false
		}
		x = x*10 + int(s[j]-'0')
	}
	if j == i || x > 255 {
		return 0, j, false
	}
	if j < len(s) {
		if c := s[j]; c == '.' || c == 'e' || c == 'E' {
			return 0, j, false
		}
	}
	return uint8(x), j, true
}
