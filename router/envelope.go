package router

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
//
// Like the full frame, a lean frame is encoded once per record and pattern
// and shared by every lean session of that pattern.

import (
	"github.com/switchyard/switchyard/engine"
)

// Envelopes a WebSocket client may ask for with ?envelope=.
const (
	envelopeFull = ""
	envelopeLean = "lean"
)

// recordBody appends the body every message frame of rec shares (from
// ',"topic"' through "time", see appendRecordBody) and returns it with the
// length of its lean part, which ends before ',"time"'.
func recordBody(dst []byte, rec *engine.Record) (body []byte, lean int) {
	dst = appendRecordBodyUntilTime(dst, rec)
	lean = len(dst)
	dst = append(dst, `,"time":`...)
	dst = appendTime(dst, rec.Time)
	return dst, lean
}

// encodeLeanMessage builds a lean message frame from the lean part of a
// record's body.
func encodeLeanMessage(pattern, topic string, leanBody []byte) []byte {
	dst := make([]byte, 0, len(`{"op":"message","pattern":""}`)+len(pattern)+len(leanBody))
	dst = append(dst, `{"op":"message"`...)
	if pattern != topic {
		dst = append(dst, `,"pattern":`...)
		dst = appendString(dst, pattern)
	}
	dst = append(dst, leanBody...)
	return append(dst, '}')
}

// encode builds the subscription's message frame for rec in its session's
// envelope (the catch-up and replay paths; live fan-out shares frames).
func (s *subscription) encode(rec *engine.Record) []byte {
	body, lean := recordBody(nil, rec)
	if s.c.lean {
		return encodeLeanMessage(s.pattern, rec.Topic, body[:lean])
	}
	return encodeMessage(s.pattern, body)
}
