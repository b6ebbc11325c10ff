package wire

// This file is the fast path of Decode: a scanner for the frames
// clients send most (publish, ack, nack with plain fields), which fills a
// request exactly as encoding/json would, or gives up and leaves the frame
// to encoding/json. It gives up on anything it does not handle itself: a
// key that is not one of its fields spelled exactly (encoding/json also
// matches keys case-insensitively), a key given twice, null, escapes in a
// string field, a number that is not a plain integer, nesting deeper than
// maxFastDepth, anything after the object. FuzzDecodeFast checks that
// whatever it accepts decodes the same through encoding/json.

import (
	"encoding/json"
	"strconv"
)

// maxFastDepth bounds the nesting of a "data" value the fast path scans.
const maxFastDepth = 64

// fast-path field bits, to refuse a key given twice.
const (
	fOp = 1 << iota
	fID
	fTopic
	fData
	fKey
	fMsgID
	fPriority
	fGroup
	fPartition
	fOffset
	fOffsets
)

// DecodeFast fills req from data and reports true, or reports false and
// leaves req to be filled by encoding/json (it may have set some fields).
// Decode calls it first; it is exported for the router's fuzz tests.
// It is one loop of about 110 lines on purpose: one switch over the
// request's keys, each case filling its field in place, which is what
// keeps the path free of allocations; split, the cases would share the
// scanner and the seen-bits through arguments on every key.
func DecodeFast(data []byte, req *Request) bool {
	s := fastScanner{b: data}
	s.ws()
	if !s.eat('{') {
		return false
	}
	seen := 0
	s.ws()
	if s.eat('}') {
		return s.end()
	}
	for {
		s.ws()
		key, ok := s.plainString()
		if !ok {
			return false
		}
		s.ws()
		if !s.eat(':') {
			return false
		}
		s.ws()
		bit, ok := fastField(key)
		if !ok || seen&bit != 0 {
			return false
		}
		seen |= bit
		switch bit {
		case fOp:
			v, ok := s.plainString()
			if !ok {
				return false
			}
			req.Op = string(v)
		case fTopic, fKey, fMsgID, fGroup:
			v, ok := s.plainString()
			if !ok {
				return false
			}
			str := string(v)
			switch bit {
			case fTopic:
				req.Topic = &str
			case fKey:
				req.Key = &str
			case fMsgID:
				req.MsgID = &str
			case fGroup:
				req.Group = &str
			}
		case fID, fData:
			start := s.i
			if !s.value(0) {
				return false
			}
			raw := json.RawMessage(append([]byte(nil), s.b[start:s.i]...))
			if bit == fID {
				req.ID = raw
			} else {
				req.Data = raw
			}
		case fPriority, fPartition:
			n, ok := s.integer()
			if !ok || n != int64(int(n)) {
				return false
			}
			v := int(n)
			if bit == fPriority {
				req.Priority = &v
			} else {
				req.Partition = &v
			}
		case fOffset:
			n, ok := s.integer()
			if !ok {
				return false
			}
			req.Offset = &n
		case fOffsets:
			if !s.eat('[') {
				return false
			}
			offs := []int64{}
			s.ws()
			if !s.eat(']') {
				for {
					s.ws()
					n, ok := s.integer()
					if !ok {
						return false
					}
					offs = append(offs, n)
					s.ws()
					if s.eat(']') {
						break
					}
					if !s.eat(',') {
						return false
					}
				}
			}
			req.Offsets = offs
		}
		s.ws()
		if s.eat('}') {
			return s.end()
		}
		if !s.eat(',') {
			return false
		}
	}
}

// fastField maps a key the fast path handles to its bit.
func fastField(key []byte) (int, bool) {
	switch string(key) { // no allocation: the compiler compares in place
	case "op":
		return fOp, true
	case "id":
		return fID, true
	case "topic":
		return fTopic, true
	case "data":
		return fData, true
	case "key":
		return fKey, true
	case "msg_id":
		return fMsgID, true
	case "priority":
		return fPriority, true
	case "group":
		return fGroup, true
	case "partition":
		return fPartition, true
	case "offset":
		return fOffset, true
	case "offsets":
		return fOffsets, true
	}
	return 0, false
}

// fastScanner reads JSON from b at i.
type fastScanner struct {
	b []byte
	i int
}

func (s *fastScanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *fastScanner) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// end reports whether only whitespace follows.
func (s *fastScanner) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// plainString reads a string without escapes or control characters and
// returns its contents (a slice of b). Bytes of 0x80 and above pass as they
// are: the session admits only valid UTF-8, which encoding/json keeps.
func (s *fastScanner) plainString() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return s.b[start : s.i-1], true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return nil, false // escapes and non-ASCII: encoding/json decides
		}
		s.i++
	}
	return nil, false
}

// integer reads -?[0-9]+ as JSON allows it (no leading zeros), when it
// fits an int64 and is not followed by a fraction or exponent.
func (s *fastScanner) integer() (int64, bool) {
	start := s.i
	s.eat('-')
	digits := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	switch {
	case s.i == digits, s.b[digits] == '0' && s.i-digits > 1:
		return 0, false
	case s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E'):
		return 0, false
	}
	n, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	return n, err == nil
}

// value skips one JSON value, checking its syntax, except null (which
// encoding/json treats as absent for the fields here).
func (s *fastScanner) value(depth int) bool {
	if s.i >= len(s.b) || depth > maxFastDepth {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		return s.anyString()
	case c == '-' || c >= '0' && c <= '9':
		return s.number()
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n' && depth > 0:
		return s.literal("null")
	case c == '[':
		s.i++
		s.ws()
		if s.eat(']') {
			return true
		}
		for {
			s.ws()
			if !s.value(depth + 1) {
				return false
			}
			s.ws()
			if s.eat(']') {
				return true
			}
			if !s.eat(',') {
				return false
			}
		}
	case c == '{':
		s.i++
		s.ws()
		if s.eat('}') {
			return true
		}
		for {
			s.ws()
			if !s.anyString() {
				return false
			}
			s.ws()
			if !s.eat(':') {
				return false
			}
			s.ws()
			if !s.value(depth + 1) {
				return false
			}
			s.ws()
			if s.eat('}') {
				return true
			}
			if !s.eat(',') {
				return false
			}
		}
	}
	return false
}

func (s *fastScanner) literal(lit string) bool {
	if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return true
	}
	return false
}

// anyString skips a string, checking its escapes; it refuses control
// characters, as JSON does.
func (s *fastScanner) anyString() bool {
	if !s.eat('"') {
		return false
	}
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			s.i++
			if s.i >= len(s.b) {
				return false
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if len(s.b)-s.i < 5 {
					return false
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !isHex(h) {
						return false
					}
				}
				s.i += 5
			default:
				return false
			}
		default:
			s.i++
		}
	}
	return false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// number skips a JSON number, checking its grammar.
func (s *fastScanner) number() bool {
	s.eat('-')
	switch {
	case s.eat('0'):
	case s.i < len(s.b) && s.b[s.i] >= '1' && s.b[s.i] <= '9':
		s.digits()
	default:
		return false
	}
	if s.eat('.') {
		if !s.digits() {
			return false
		}
	}
	if s.eat('e') || s.eat('E') {
		if !s.eat('+') {
			s.eat('-')
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// digits skips [0-9]* and reports whether there was at least one.
func (s *fastScanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i > start
}
