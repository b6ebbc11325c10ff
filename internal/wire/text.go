package wire

import (
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
// message quotes at most MaxEcho bytes of the name.
func NameError(code, name string, err error) *Error {
	msg := err.Error()
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
