package wire

import (
	"bytes"
	"encoding/json"
	"errors"
)

// Request is any client op. Optional fields are pointers or raw JSON so that
// "absent" and "wrong type" can be told apart.
type Request struct {
	Op      string          `json:"op"`
	ID      json.RawMessage `json:"id"`
	Pattern *string         `json:"pattern"`
	Group   *string         `json:"group"`
	From    json.RawMessage `json:"from"`
	OnFull  *string         `json:"on_full"`
	Filter  *Filter         `json:"filter"`
	// MaxInFlight is a group subscribe's window per partition.
	MaxInFlight *int            `json:"max_in_flight"`
	Topic       *string         `json:"topic"`
	Data        json.RawMessage `json:"data"`
	// Encoding "base64": Data is a string of the payload's bytes.
	Encoding *string           `json:"encoding"`
	Key      *string           `json:"key"`
	Headers  map[string]string `json:"headers"`
	MsgID    *string           `json:"msg_id"`
	Priority *int              `json:"priority"`
	// Partition and Offset of ack and nack; Offsets instead of Offset
	// settles several records of that partition in one frame.
	Partition *int    `json:"partition"`
	Offset    *int64  `json:"offset"`
	Offsets   []int64 `json:"offsets"`
	Error     *string `json:"error"`
	// Token of refresh.
	Token *string `json:"token"`
	// Presence of a plain subscribe.
	Presence *bool `json:"presence"`
	// Delta of a plain subscribe: "fossil" (delta.go).
	Delta *string `json:"delta"`
}

// Filter is a subscribe's "filter".
type Filter struct {
	Headers map[string]string `json:"headers"`
}

// MaxPriority is the highest publish priority.
const MaxPriority = 3

// Decode parses one client frame. On failure it still returns the
// frame's id when the frame is an object that carries one.
func Decode(data []byte) (*Request, *Error) {
	var req Request
	defer func() { req.ID = compactID(req.ID) }()
	if !DecodeFast(data, &req) { // the fast path fills req as this would
		req = Request{}
		if err := json.Unmarshal(data, &req); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				if te.Field == "" {
					return &req, Errorf(CodeBadRequest, "frame must be a JSON object")
				}
				return &req, Errorf(CodeBadRequest, "field %s has the wrong type (want %s)", Quote(te.Field), te.Type.String())
			}
			return &req, Errorf(CodeBadRequest, "frame is not valid JSON")
		}
	}
	if len(req.ID) > 0 && !validID(req.ID) {
		// Echoed as sent, so the client can still match the error.
		return &req, Errorf(CodeBadRequest, "id must be a number or a string, got %s", truncate(req.ID, 32))
	}
	if req.Op == "" {
		return &req, Errorf(CodeBadRequest, `missing field "op"`)
	}
	return &req, nil
}

// compactID removes the whitespace of an id that is echoed back (an array
// or object id in an error reply), so the reply stays one line: clients
// split batched frames on newlines.
func compactID(raw json.RawMessage) json.RawMessage {
	if !bytes.ContainsAny(raw, " \t\r\n") {
		return raw
	}
	var buf bytes.Buffer
	if json.Compact(&buf, raw) != nil {
		return nil
	}
	return buf.Bytes()
}

func validID(raw json.RawMessage) bool {
	switch raw[0] {
	case '"':
		return true
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return true
	}
	return false
}

func truncate(b []byte, n int) string {
	if len(b) <= n {
		return string(b)
	}
	return string(b[:n]) + "…"
}
