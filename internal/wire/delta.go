package wire

// Delta message frames. A plain subscription that asked for
// "delta":"fossil" receives, after a full message of a (topic, partition),
// messages whose "data" is the Fossil delta of the record's payload against
// the payload of the previous message of that partition it received,
// marked "delta":true. The delta is bytes: when they are valid UTF-8 they
// are sent as a JSON string of that text, else as standard base64 with
// "encoding":"base64" (the rule of binary payloads, here applied to the
// delta itself). Applying the delta to the previous payload's bytes gives
// the new payload's bytes, which are JSON (only JSON payloads are sent as
// deltas; a binary record is always sent full).

import (
	"unicode/utf8"

	"github.com/switchyard/switchyard/engine"
)

// DeltaFossil is the only "delta" a subscribe may ask for.
const DeltaFossil = "fossil"

// RecordDeltaBody is RecordBody for a delta message: "data" holds delta
// (see the file comment) followed by "delta":true. The record's key and
// headers are carried as in a full message.
func RecordDeltaBody(dst []byte, r *engine.Record, delta []byte) (body []byte, lean int) {
	dst = appendRecordHead(dst, r)
	if h := UserHeaders(r.Headers); len(h) > 0 {
		dst = append(dst, `,"headers":`...)
		dst = AppendHeaders(dst, h)
	}
	dst = append(dst, `,"data":`...)
	dst = AppendDelta(dst, delta)
	dst = append(dst, `,"delta":true`...)
	lean = len(dst)
	dst = append(dst, `,"time":`...)
	dst = AppendTime(dst, r.Time)
	return dst, lean
}

// AppendDelta appends delta as a message's "data": a JSON string of its
// text when it is valid UTF-8, else its base64 followed by
// "encoding":"base64".
func AppendDelta(dst, delta []byte) []byte {
	if utf8.Valid(delta) {
		return AppendText(dst, string(delta))
	}
	return AppendBase64Data(dst, delta)
}
