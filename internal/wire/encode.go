package wire

// The encoders of server frames. They are written by hand, not with
// encoding/json, because they run once per delivered record (or once per
// record and pattern, the frame then shared by every session): field
// order is fixed and nothing is reflected on.
//
// The lean envelope: a WebSocket client that connects with
// GET /v1/ws?envelope=lean receives its plain subscriptions' messages
// without the fields it can do without: "time" is left out, and "pattern"
// is left out when the subscription's pattern is the topic itself (a
// literal subscription; the topic names it). Everything else (op, topic,
// partition, offset, key, headers, data) is as in the full envelope, and
// group deliveries, gaps and replies are unchanged. The welcome frame then
// carries "envelope":"lean". At some 80-byte payloads the lean frame is
// about a third smaller, which the gateway pays for per delivery in copies
// and system-call bytes, and the client in bytes to read and parse.

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// TimeFormat is RFC3339 in UTC with exactly three fractional digits.
const TimeFormat = "2006-01-02T15:04:05.000Z07:00"

// AppendTime appends t as a JSON string in TimeFormat, in UTC. It runs
// for every frame that carries a time, so the usual case (years 0 to
// 9999) is written digit by digit, byte for byte as AppendFormat writes
// it (TestAppendTimeMatchesFormat, FuzzAppendTime); other years go
// through AppendFormat.
func AppendTime(dst []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		dst = append(dst, '"')
		dst = t.AppendFormat(dst, TimeFormat)
		return append(dst, '"')
	}
	hour, minute, sec := t.Clock()
	ms := t.Nanosecond() / 1_000_000
	return append(dst, '"',
		byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10), '-',
		byte('0'+int(month)/10), byte('0'+int(month)%10), '-',
		byte('0'+day/10), byte('0'+day%10), 'T',
		byte('0'+hour/10), byte('0'+hour%10), ':',
		byte('0'+minute/10), byte('0'+minute%10), ':',
		byte('0'+sec/10), byte('0'+sec%10), '.',
		byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10), 'Z', '"')
}

// AppendString appends s as a JSON string.
func AppendString(dst []byte, s string) []byte {
	// Names (topics, patterns, groups) are plain ASCII and need no escaping;
	// anything else goes through the JSON encoder's rules.
	plain := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x7f || c == '<' || c == '>' || c == '&' {
			plain = false
			break
		}
	}
	if plain {
		dst = append(dst, '"')
		dst = append(dst, s...)
		return append(dst, '"')
	}
	b, _ := json.Marshal(s)
	return append(dst, b...)
}

// AppendHeaders appends h as a JSON object with its keys sorted.
func AppendHeaders(dst []byte, h map[string]string) []byte {
	b, _ := json.Marshal(h) // sorted keys: deterministic frames
	return append(dst, b...)
}

// AppendRecordBody appends the part of a message frame shared by every
// pattern: from ',"topic"' through "time", without the closing brace and
// without group fields.
func AppendRecordBody(dst []byte, r *engine.Record) []byte {
	dst = AppendRecordBodyUntilTime(dst, r)
	dst = append(dst, `,"time":`...)
	return AppendTime(dst, r.Time)
}

// appendRecordHead appends a message's first record fields: topic,
// partition, offset and, when it has one, key.
func appendRecordHead(dst []byte, r *engine.Record) []byte {
	dst = append(dst, `,"topic":`...)
	dst = AppendString(dst, r.Topic)
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(r.Partition), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, r.Offset, 10)
	if r.Key != "" {
		dst = append(dst, `,"key":`...)
		dst = AppendString(dst, r.Key)
	}
	return dst
}

// AppendRecordBodyUntilTime appends the body without its last field, time.
func AppendRecordBodyUntilTime(dst []byte, r *engine.Record) []byte {
	dst = appendRecordHead(dst, r)
	binary := false
	if len(r.Headers) > 0 {
		// Bytes that are not JSON carry BinaryHeader (binary.go): one
		// lookup, only for records with headers.
		h := r.Headers
		if binary = IsBinary(h); binary {
			h = UserHeaders(h)
		}
		if len(h) > 0 {
			dst = append(dst, `,"headers":`...)
			dst = AppendHeaders(dst, h)
		}
	}
	dst = append(dst, `,"data":`...)
	if binary {
		return AppendBase64Data(dst, r.Data)
	}
	return append(dst, r.Data...)
}

// EncodeMessage builds a plain subscription's message frame.
func EncodeMessage(pattern string, body []byte) []byte {
	dst := make([]byte, 0, len(`{"op":"message","pattern":""}`)+len(pattern)+len(body))
	dst = append(dst, `{"op":"message","pattern":`...)
	dst = AppendString(dst, pattern)
	dst = append(dst, body...)
	return append(dst, '}')
}

// EncodeGroupMessage builds a consumer-group delivery frame.
func EncodeGroupMessage(pattern string, d engine.Delivery) []byte {
	dst := make([]byte, 0, 192+len(d.Record.Data))
	dst = append(dst, `{"op":"message","pattern":`...)
	dst = AppendString(dst, pattern)
	dst = AppendRecordBody(dst, d.Record)
	dst = append(dst, `,"group":`...)
	dst = AppendString(dst, d.Group)
	dst = append(dst, `,"attempt":`...)
	dst = strconv.AppendInt(dst, int64(d.Attempt), 10)
	return append(dst, '}')
}

// EncodeGap builds a gap frame.
func EncodeGap(dst []byte, pattern, group, topic string, partition int, from, to int64, reason string) []byte {
	dst = append(dst, `{"op":"gap","pattern":`...)
	dst = AppendString(dst, pattern)
	if group != "" {
		dst = append(dst, `,"group":`...)
		dst = AppendString(dst, group)
	}
	dst = append(dst, `,"topic":`...)
	dst = AppendString(dst, topic)
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(partition), 10)
	dst = append(dst, `,"from":`...)
	dst = strconv.AppendInt(dst, from, 10)
	dst = append(dst, `,"to":`...)
	dst = strconv.AppendInt(dst, to, 10)
	dst = append(dst, `,"reason":`...)
	dst = AppendString(dst, reason)
	return append(dst, '}')
}

// EncodePublished builds the publish reply.
func EncodePublished(id json.RawMessage, topic string, a engine.Appended) []byte {
	dst := make([]byte, 0, 96+len(topic)+len(id))
	dst = append(dst, `{"op":"published"`...)
	if len(id) > 0 {
		dst = append(dst, `,"id":`...)
		dst = append(dst, id...)
	}
	dst = append(dst, `,"topic":`...)
	dst = AppendString(dst, topic)
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(a.Partition), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, a.Offset, 10)
	if a.Duplicate {
		dst = append(dst, `,"duplicate":true`...)
	}
	return append(dst, '}')
}

// EncodeError builds an error frame; msg is cut to MaxErrorMessage bytes.
func EncodeError(id json.RawMessage, code, msg string) []byte {
	msg = CapMessage(msg)
	dst := make([]byte, 0, 64+len(msg))
	dst = append(dst, `{"op":"error"`...)
	if len(id) > 0 {
		dst = append(dst, `,"id":`...)
		dst = append(dst, id...)
	}
	dst = append(dst, `,"code":`...)
	dst = AppendString(dst, code)
	dst = append(dst, `,"message":`...)
	dst = AppendText(dst, msg)
	return append(dst, '}')
}

// EncodeReply marshals a reply object with the id spliced in first after op.
func EncodeReply(op string, id json.RawMessage, fields map[string]any) []byte {
	dst := make([]byte, 0, 96)
	dst = append(dst, `{"op":`...)
	dst = AppendString(dst, op)
	if len(id) > 0 {
		dst = append(dst, `,"id":`...)
		dst = append(dst, id...)
	}
	if len(fields) > 0 {
		b, _ := json.Marshal(fields)
		dst = append(dst, ',')
		dst = append(dst, b[1:len(b)-1]...)
	}
	return append(dst, '}')
}

// Envelopes a WebSocket client may ask for with ?envelope=.
const (
	EnvelopeFull = ""
	EnvelopeLean = "lean"
)

// RecordBody appends the body every message frame of rec shares (from
// ',"topic"' through "time", see AppendRecordBody) and returns it with the
// length of its lean part, which ends before ',"time"'.
func RecordBody(dst []byte, rec *engine.Record) (body []byte, lean int) {
	dst = AppendRecordBodyUntilTime(dst, rec)
	lean = len(dst)
	dst = append(dst, `,"time":`...)
	dst = AppendTime(dst, rec.Time)
	return dst, lean
}

// EncodeLeanMessage builds a lean message frame from the lean part of a
// record's body.
func EncodeLeanMessage(pattern, topic string, leanBody []byte) []byte {
	dst := make([]byte, 0, len(`{"op":"message","pattern":""}`)+len(pattern)+len(leanBody))
	dst = append(dst, `{"op":"message"`...)
	if pattern != topic {
		dst = append(dst, `,"pattern":`...)
		dst = AppendString(dst, pattern)
	}
	dst = append(dst, leanBody...)
	return append(dst, '}')
}
