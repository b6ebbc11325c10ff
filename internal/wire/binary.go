package wire

// Binary payloads (PROTOCOL.md, third-round additions). A record's
// payload is bytes. A payload that is valid JSON (with no raw line break,
// which would split a batch of frames) appears as "data" as it is; any
// other appears as "data":"<standard base64>","encoding":"base64". A
// client publishes bytes the same way: "encoding":"base64" beside a
// "data" string of standard base64.
//
// Every payload published as JSON is valid compact JSON, so the encoders
// copy it without looking at it. A payload published as bytes that is not
// JSON carries the reserved header BinaryHeader, which the engines store
// like any other header: the encoders tell the two apart with the header
// lookup they already make (none for a record without headers), never by
// validating a payload on the delivery path, and leave the header out of
// what readers see. Clients may not set it.

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"maps"
	"slices"
)

// EncodingBase64 is the one value of a frame's "encoding".
const EncodingBase64 = "base64"

// BinaryHeader marks a stored payload that is not JSON; readers never see
// it.
const BinaryHeader = "$encoding"

// DecodePayload returns the payload a publish carries: data itself, or
// with encoding "base64" the bytes data's base64 string holds.
func DecodePayload(data json.RawMessage, encoding *string) ([]byte, *Error) {
	if encoding == nil {
		return data, nil
	}
	if *encoding != EncodingBase64 {
		return nil, Errorf(CodeBadRequest, `encoding %s is not supported; the one encoding is "base64"`, Quote(*encoding))
	}
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, Errorf(CodeBadRequest, `with "encoding":"base64", "data" must be a string of standard base64`)
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, Errorf(CodeBadRequest, `"data" is not standard base64 (%v); encode the bytes with the padded standard alphabet, A-Z a-z 0-9 + /`, err)
	}
	return b, nil
}

// IsJSONPayload reports whether payload can appear as JSON "data" as it
// is. It reads the whole payload: for publishes, not deliveries.
func IsJSONPayload(payload []byte) bool {
	return bytes.IndexByte(payload, '\n') < 0 && bytes.IndexByte(payload, '\r') < 0 && json.Valid(payload)
}

// MarkBinary returns the headers to store with a payload published as
// bytes: h itself when the payload is JSON, else a copy of h with
// BinaryHeader.
func MarkBinary(h map[string]string, payload []byte) map[string]string {
	if IsJSONPayload(payload) {
		return h
	}
	out := make(map[string]string, len(h)+1)
	maps.Copy(out, h)
	out[BinaryHeader] = EncodingBase64
	return out
}

// IsBinary reports whether a stored record's payload is bytes that are
// not JSON (its headers carry BinaryHeader).
func IsBinary(h map[string]string) bool {
	if len(h) == 0 {
		return false
	}
	_, ok := h[BinaryHeader]
	return ok
}

// UserHeaders returns h as readers see it: without BinaryHeader.
func UserHeaders(h map[string]string) map[string]string {
	if !IsBinary(h) {
		return h
	}
	if len(h) == 1 {
		return nil
	}
	out := maps.Clone(h)
	delete(out, BinaryHeader)
	return out
}

// AppendBase64Data appends payload as "<base64>","encoding":"base64".
func AppendBase64Data(dst, payload []byte) []byte {
	n := base64.StdEncoding.EncodedLen(len(payload))
	dst = append(dst, '"')
	at := len(dst)
	dst = slices.Grow(dst, n)[:at+n]
	base64.StdEncoding.Encode(dst[at:], payload)
	return append(dst, `","encoding":"base64"`...)
}

// DataField returns a stored record's payload as an HTTP reply's "data"
// and "encoding": itself and "" for JSON, its base64 string and "base64"
// for bytes (binary: IsBinary of its headers).
func DataField(payload []byte, binary bool) (json.RawMessage, string) {
	if !binary {
		return payload, ""
	}
	b, _ := json.Marshal(base64.StdEncoding.EncodeToString(payload))
	return b, EncodingBase64
}
