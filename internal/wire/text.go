package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf8"
)

// What an error message may repeat of a client's input.
const (
	// MaxEcho bounds the bytes of one offending value an error quotes.
	MaxEcho = 128
	// MaxErrorMessage bounds an error's whole message.
	MaxErrorMessage = 512
)

// CutUTF8 returns s cut to at most n bytes on a UTF-8 boundary, and
// whether it was cut.
func CutUTF8(s string, n int) (string, bool) {
	if len(s) <= n {
		return s, false
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n], true
}

// Quote quotes a client's value for an error message, at most MaxEcho
// bytes of it ("…" marks the cut).
func Quote(s string) string {
	cut, more := CutUTF8(s, MaxEcho)
	if more {
		return strconv.Quote(cut) + "…"
	}
	return strconv.Quote(cut)
}

// NameError turns a trie validation error into a protocol error whose
// message quotes at most MaxEcho bytes of the name and carries no package
// prefix: `invalid topic "orders..eu": segment 2 is empty (…)`.
func NameError(code, name string, err error) *Error {
	msg := UserText(err)
	if len(name) > MaxEcho {
		msg = strings.Replace(msg, strconv.Quote(name), Quote(name), 1)
	}
	return &Error{Code: code, Msg: msg}
}

// CapMessage bounds an error message to MaxErrorMessage bytes.
func CapMessage(msg string) string {
	if cut, more := CutUTF8(msg, MaxErrorMessage); more {
		return cut + "…"
	}
	return msg
}

// packagePrefixes are the prefixes Go packages give their errors, helpful
// in logs and noise to the person who sent the request.
var packagePrefixes = []string{"trie: ", "engine: ", "memengine: ", "jsengine: "}

// UserText returns err's message without leading package prefixes
// ("trie: invalid topic …" becomes "invalid topic …").
func UserText(err error) string {
	s := err.Error()
	for cut := true; cut; {
		cut = false
		for _, p := range packagePrefixes {
			if strings.HasPrefix(s, p) {
				s, cut = s[len(p):], true
			}
		}
	}
	return s
}

// AppendText appends s as a JSON string the way a person reads it: <, >
// and & as themselves (not \u003c, \u003e, \u0026), UTF-8 as written. It
// is for error messages, not the hot path.
func AppendText(dst []byte, s string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return append(dst, bytes.TrimSuffix(b.Bytes(), []byte("\n"))...)
}
