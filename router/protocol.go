package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/trie"
)

// Protocol error codes (PROTOCOL.md, "Error codes").
const (
	codeBadRequest       = "bad_request"
	codeInvalidTopic     = "invalid_topic"
	codeInvalidPattern   = "invalid_pattern"
	codeUnknownTopic     = "unknown_topic"
	codeUnauthorized     = "unauthorized"
	codeForbidden        = "forbidden"
	codeRateLimited      = "rate_limited"
	codeBackpressure     = "backpressure"
	codeTooLarge         = "message_too_large"
	codeTooManySubs      = "too_many_subscriptions"
	codeNotSubscribed    = "not_subscribed"
	codeGroupConflict    = "group_conflict"
	codeShuttingDown     = "shutting_down"
	codeInternal         = "internal"
	codeTopicExists      = "topic_exists"
	codeUnknownGroup     = "unknown_group"
	codeNotInFlight      = "not_in_flight"
	codeUnavailable      = "unavailable"
	codeNotFound         = "not_found"
	codeMethodNotAllowed = "method_not_allowed"
)

// protoError is an error with a protocol code; the router's handlers return
// it and the transport (WebSocket or HTTP) renders it.
type protoError struct {
	code  string
	msg   string
	limit string // the limit that refused the request, if one did (see refuse)
}

func (e *protoError) Error() string { return e.code + ": " + e.msg }

func perr(code, format string, args ...any) *protoError {
	return &protoError{code: code, msg: fmt.Sprintf(format, args...)}
}

// classify maps any error onto a protocol code and an HTTP status. Internal
// errors are reported without their details.
func classify(err error) (code, msg string, status int) {
	var pe *protoError
	switch {
	case errors.As(err, &pe):
		return pe.code, pe.msg, statusOf(pe.code)
	case errors.Is(err, trie.ErrInvalidTopic):
		return codeInvalidTopic, err.Error(), http.StatusBadRequest
	case errors.Is(err, trie.ErrInvalidPattern):
		return codeInvalidPattern, err.Error(), http.StatusBadRequest
	case errors.Is(err, engine.ErrUnknownTopic):
		return codeUnknownTopic, "unknown topic", http.StatusNotFound
	case errors.Is(err, engine.ErrTopicExists):
		return codeTopicExists, "topic exists", http.StatusConflict
	case errors.Is(err, engine.ErrInvalidConfig):
		return codeBadRequest, trimEnginePrefix(err), http.StatusBadRequest
	case errors.Is(err, engine.ErrBackpressure):
		return codeBackpressure, "topic is full; retry later", http.StatusServiceUnavailable
	case errors.Is(err, engine.ErrUnknownPartition):
		return codeBadRequest, "unknown partition", http.StatusBadRequest
	case errors.Is(err, engine.ErrGroupConflict):
		return codeGroupConflict, trimEnginePrefix(err), http.StatusConflict
	case errors.Is(err, engine.ErrUnknownGroup):
		return codeUnknownGroup, "unknown group", http.StatusNotFound
	case errors.Is(err, engine.ErrNotInFlight):
		return codeNotInFlight, "record is not in flight for this group", http.StatusConflict
	case errors.Is(err, engine.ErrClosed):
		return codeShuttingDown, "server is shutting down", http.StatusServiceUnavailable
	case errors.Is(err, engine.ErrUnavailable):
		return codeUnavailable, "log store unavailable; retry later", http.StatusServiceUnavailable
	}
	return codeInternal, "internal error", http.StatusInternalServerError
}

func trimEnginePrefix(err error) string {
	s := err.Error()
	const p = "engine: "
	for len(s) >= len(p) && s[:len(p)] == p {
		s = s[len(p):]
	}
	return s
}

func statusOf(code string) int {
	switch code {
	case codeBadRequest, codeInvalidTopic, codeInvalidPattern:
		return http.StatusBadRequest
	case codeUnauthorized:
		return http.StatusUnauthorized
	case codeForbidden:
		return http.StatusForbidden
	case codeUnknownTopic, codeUnknownGroup, codeNotFound, codeNotSubscribed:
		return http.StatusNotFound
	case codeRateLimited:
		return http.StatusTooManyRequests
	case codeTooLarge:
		return http.StatusRequestEntityTooLarge
	case codeTopicExists, codeGroupConflict, codeNotInFlight, codeTooManyTopics:
		return http.StatusConflict
	case codeTooManySubs:
		return http.StatusTooManyRequests
	case codeBackpressure, codeShuttingDown, codeUnavailable, codeTooManyConnections:
		return http.StatusServiceUnavailable
	case codeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case codeUnsupportedMedia:
		return http.StatusUnsupportedMediaType
	}
	return http.StatusInternalServerError
}

// request is any client op. Optional fields are pointers or raw JSON so that
// "absent" and "wrong type" can be told apart.
type request struct {
	Op      string          `json:"op"`
	ID      json.RawMessage `json:"id"`
	Pattern *string         `json:"pattern"`
	Group   *string         `json:"group"`
	From    json.RawMessage `json:"from"`
	OnFull  *string         `json:"on_full"`
	Filter  *filterSpec     `json:"filter"`
	// MaxInFlight is a group subscribe's window per partition.
	MaxInFlight *int              `json:"max_in_flight"`
	Topic       *string           `json:"topic"`
	Data        json.RawMessage   `json:"data"`
	Key         *string           `json:"key"`
	Headers     map[string]string `json:"headers"`
	MsgID       *string           `json:"msg_id"`
	Priority    *int              `json:"priority"`
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
}

type filterSpec struct {
	Headers map[string]string `json:"headers"`
}

// decodeRequest parses one client frame. On failure it still returns the
// frame's id when the frame is an object that carries one.
func decodeRequest(data []byte) (*request, *protoError) {
	var req request
	defer func() { req.ID = compactID(req.ID) }()
	if !decodeFast(data, &req) { // the fast path fills req as this would
		req = request{}
		if err := json.Unmarshal(data, &req); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				if te.Field == "" {
					return &req, perr(codeBadRequest, "frame must be a JSON object")
				}
				return &req, perr(codeBadRequest, "field %s has the wrong type (want %s)", quoteInput(te.Field), te.Type.String())
			}
			return &req, perr(codeBadRequest, "frame is not valid JSON")
		}
	}
	if len(req.ID) > 0 && !validID(req.ID) {
		// Echoed as sent, so the client can still match the error.
		return &req, perr(codeBadRequest, "id must be a number or a string, got %s", truncate(req.ID, 32))
	}
	if req.Op == "" {
		return &req, perr(codeBadRequest, `missing field "op"`)
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

// maxPriority is the highest publish priority.
const maxPriority = 3

// parsePublish validates the publish fields shared by WebSocket and HTTP
// against the size limits maxBytes (data) and b.
func parsePublish(req *request, maxBytes int, b *Bounds) (engine.Message, *protoError) {
	if req.Topic == nil {
		return engine.Message{}, perr(codeBadRequest, `missing field "topic"`)
	}
	if len(req.Data) == 0 {
		return engine.Message{}, perr(codeBadRequest, `missing field "data"`)
	}
	if pe := validTopic(b, *req.Topic); pe != nil {
		return engine.Message{}, pe
	}
	if trie.IsSystem(*req.Topic) {
		return engine.Message{}, perr(codeForbidden, "topics starting with $ are reserved for the server")
	}
	if maxBytes > 0 && len(req.Data) > maxBytes {
		return engine.Message{}, perr(codeTooLarge, "data is %d bytes; the limit is %d", len(req.Data), maxBytes)
	}
	data := []byte(req.Data)
	if bytes.ContainsAny(data, "\n\r") {
		// Frames are newline-separated in batches, so stored data must be
		// compact JSON (JSON strings cannot hold a raw newline).
		var buf bytes.Buffer
		if err := json.Compact(&buf, data); err != nil {
			return engine.Message{}, perr(codeBadRequest, "data is not valid JSON")
		}
		data = buf.Bytes()
	}
	m := engine.Message{Topic: *req.Topic, Data: data, Headers: req.Headers, Priority: 1}
	if req.Key != nil {
		m.Key = *req.Key
	}
	if req.MsgID != nil {
		m.MsgID = *req.MsgID
	}
	if req.Priority != nil {
		if *req.Priority < 0 || *req.Priority > maxPriority {
			return engine.Message{}, perr(codeBadRequest, "priority must be 0 to 3")
		}
		m.Priority = uint8(*req.Priority)
	}
	if pe := checkPublishSizes(b, &m); pe != nil {
		return engine.Message{}, pe
	}
	for k, v := range m.Headers {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return engine.Message{}, perr(codeBadRequest, "headers must be valid UTF-8")
		}
	}
	return m, nil
}

// fromSpec is a parsed "from".
type fromSpec struct {
	start     engine.Start
	positions bool
	epoch     string
	pos       []engine.Position
	// last > 0: the newest last records of every matched partition, then
	// live ("last" is 1, {"last":N} is N).
	last int
}

func parseFrom(raw json.RawMessage) (fromSpec, *protoError) {
	if len(raw) == 0 || string(raw) == "null" {
		return fromSpec{}, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		switch s {
		case "latest":
			return fromSpec{start: engine.Start{Kind: engine.StartLatest}}, nil
		case "earliest":
			return fromSpec{start: engine.Start{Kind: engine.StartEarliest}}, nil
		case "last":
			return fromSpec{last: 1}, nil
		}
		return fromSpec{}, perr(codeBadRequest, `from must be "latest", "earliest", "last", {"last":N}, {"time":...} or {"epoch":...,"positions":[...]}`)
	}
	var obj struct {
		Time      *string `json:"time"`
		Last      *int64  `json:"last"`
		Epoch     *string `json:"epoch"`
		Positions []struct {
			Topic     *string `json:"topic"`
			Partition *int    `json:"partition"`
			Offset    *int64  `json:"offset"`
		} `json:"positions"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return fromSpec{}, perr(codeBadRequest, "from: %s", jsonErrText(err))
	}
	switch {
	case obj.Last != nil:
		if *obj.Last < 1 || *obj.Last > math.MaxInt32 {
			return fromSpec{}, perr(codeBadRequest, "from.last must be at least 1")
		}
		return fromSpec{last: int(*obj.Last)}, nil
	case obj.Time != nil:
		t, err := time.Parse(time.RFC3339Nano, *obj.Time)
		if err != nil {
			return fromSpec{}, perr(codeBadRequest, "from.time must be RFC3339")
		}
		return fromSpec{start: engine.Start{Kind: engine.StartTime, Time: t}}, nil
	case obj.Epoch != nil:
		f := fromSpec{positions: true, epoch: *obj.Epoch}
		for i, p := range obj.Positions {
			if p.Topic == nil || p.Partition == nil || p.Offset == nil {
				return fromSpec{}, perr(codeBadRequest, "from.positions[%d] needs topic, partition and offset", i)
			}
			if err := trie.ValidateTopic(*p.Topic); err != nil {
				return fromSpec{}, nameError(codeInvalidTopic, *p.Topic, err)
			}
			if *p.Partition < 0 || *p.Offset < -1 {
				return fromSpec{}, perr(codeBadRequest, "from.positions[%d] is out of range", i)
			}
			f.pos = append(f.pos, engine.Position{Topic: *p.Topic, Partition: *p.Partition, Offset: *p.Offset})
		}
		return f, nil
	}
	return fromSpec{}, perr(codeBadRequest, `from object needs "last", "time" or "epoch"`)
}

func jsonErrText(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("field %q has the wrong type", te.Field)
	}
	return "malformed"
}

// --- encoding of server frames ---

// timeFormat is RFC3339 in UTC with exactly three fractional digits.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

func appendTime(dst []byte, t time.Time) []byte {
	dst = append(dst, '"')
	dst = t.UTC().AppendFormat(dst, timeFormat)
	return append(dst, '"')
}

// appendString appends s as a JSON string.
func appendString(dst []byte, s string) []byte {
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

func appendHeaders(dst []byte, h map[string]string) []byte {
	b, _ := json.Marshal(h) // sorted keys: deterministic frames
	return append(dst, b...)
}

// appendRecordTail appends the part of a message frame shared by every
// pattern: from ',"topic"' to the closing brace, without group fields.
func appendRecordBody(dst []byte, r *engine.Record) []byte {
	dst = appendRecordBodyUntilTime(dst, r)
	dst = append(dst, `,"time":`...)
	return appendTime(dst, r.Time)
}

// appendRecordBodyUntilTime appends the body without its last field, time.
func appendRecordBodyUntilTime(dst []byte, r *engine.Record) []byte {
	dst = append(dst, `,"topic":`...)
	dst = appendString(dst, r.Topic)
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(r.Partition), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, r.Offset, 10)
	if r.Key != "" {
		dst = append(dst, `,"key":`...)
		dst = appendString(dst, r.Key)
	}
	if len(r.Headers) > 0 {
		dst = append(dst, `,"headers":`...)
		dst = appendHeaders(dst, r.Headers)
	}
	dst = append(dst, `,"data":`...)
	return append(dst, r.Data...)
}

// encodeMessage builds a plain subscription's message frame.
func encodeMessage(pattern string, body []byte) []byte {
	dst := make([]byte, 0, len(`{"op":"message","pattern":""}`)+len(pattern)+len(body))
	dst = append(dst, `{"op":"message","pattern":`...)
	dst = appendString(dst, pattern)
	dst = append(dst, body...)
	return append(dst, '}')
}

// encodeGroupMessage builds a consumer-group delivery frame.
func encodeGroupMessage(pattern string, d engine.Delivery) []byte {
	dst := make([]byte, 0, 192+len(d.Record.Data))
	dst = append(dst, `{"op":"message","pattern":`...)
	dst = appendString(dst, pattern)
	dst = appendRecordBody(dst, d.Record)
	dst = append(dst, `,"group":`...)
	dst = appendString(dst, d.Group)
	dst = append(dst, `,"attempt":`...)
	dst = strconv.AppendInt(dst, int64(d.Attempt), 10)
	return append(dst, '}')
}

// encodeGap builds a gap frame.
func encodeGap(dst []byte, pattern, group, topic string, partition int, from, to int64, reason string) []byte {
	dst = append(dst, `{"op":"gap","pattern":`...)
	dst = appendString(dst, pattern)
	if group != "" {
		dst = append(dst, `,"group":`...)
		dst = appendString(dst, group)
	}
	dst = append(dst, `,"topic":`...)
	dst = appendString(dst, topic)
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(partition), 10)
	dst = append(dst, `,"from":`...)
	dst = strconv.AppendInt(dst, from, 10)
	dst = append(dst, `,"to":`...)
	dst = strconv.AppendInt(dst, to, 10)
	dst = append(dst, `,"reason":`...)
	dst = appendString(dst, reason)
	return append(dst, '}')
}

// encodePublished builds the publish reply.
func encodePublished(id json.RawMessage, topic string, a engine.Appended) []byte {
	dst := make([]byte, 0, 96+len(topic)+len(id))
	dst = append(dst, `{"op":"published"`...)
	if len(id) > 0 {
		dst = append(dst, `,"id":`...)
		dst = append(dst, id...)
	}
	dst = append(dst, `,"topic":`...)
	dst = appendString(dst, topic)
	dst = append(dst, `,"partition":`...)
	dst = strconv.AppendInt(dst, int64(a.Partition), 10)
	dst = append(dst, `,"offset":`...)
	dst = strconv.AppendInt(dst, a.Offset, 10)
	if a.Duplicate {
		dst = append(dst, `,"duplicate":true`...)
	}
	return append(dst, '}')
}

// encodeError builds an error frame; msg is cut to maxErrorMessage bytes.
func encodeError(id json.RawMessage, code, msg string) []byte {
	msg = capMessage(msg)
	dst := make([]byte, 0, 64+len(msg))
	dst = append(dst, `{"op":"error"`...)
	if len(id) > 0 {
		dst = append(dst, `,"id":`...)
		dst = append(dst, id...)
	}
	dst = append(dst, `,"code":`...)
	dst = appendString(dst, code)
	dst = append(dst, `,"message":`...)
	dst = appendString(dst, msg)
	return append(dst, '}')
}

// encodeReply marshals a reply object with the id spliced in first after op.
func encodeReply(op string, id json.RawMessage, fields map[string]any) []byte {
	dst := make([]byte, 0, 96)
	dst = append(dst, `{"op":`...)
	dst = appendString(dst, op)
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
