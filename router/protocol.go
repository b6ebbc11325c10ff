package router

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/trie"
)

// protoError is an error with a protocol code (wire.Error); the router's
// handlers return it and the transport (WebSocket or HTTP) renders it.
type protoError = wire.Error

func perr(code, format string, args ...any) *protoError {
	return wire.Errorf(code, format, args...)
}

// classify maps any error onto a protocol code and an HTTP status. Internal
// errors are reported without their details.
func classify(err error) (code, msg string, status int) {
	var pe *protoError
	switch {
	case errors.As(err, &pe):
		return pe.Code, pe.Msg, statusOf(pe.Code)
	case errors.Is(err, trie.ErrInvalidTopic):
		return codeInvalidTopic, wire.UserText(err), http.StatusBadRequest
	case errors.Is(err, trie.ErrInvalidPattern):
		return codeInvalidPattern, wire.UserText(err), http.StatusBadRequest
	case errors.Is(err, engine.ErrUnknownTopic):
		return codeUnknownTopic, unknownName("topic", err, "GET /v1/topics lists the topics"), http.StatusNotFound
	case errors.Is(err, engine.ErrTopicExists):
		if name, ok := quotedName("topic", err); ok {
			return codeTopicExists, fmt.Sprintf("topic %s exists (GET /v1/topics/{name} shows it)", quoteInput(name)), http.StatusConflict
		}
		return codeTopicExists, "topic exists", http.StatusConflict
	case errors.Is(err, engine.ErrInvalidConfig):
		return codeBadRequest, trimEnginePrefix(err), http.StatusBadRequest
	case errors.Is(err, engine.ErrBackpressure):
		return codeBackpressure, "topic is full; retry later", http.StatusServiceUnavailable
	case errors.Is(err, engine.ErrUnknownPartition):
		return codeBadRequest, "unknown partition", http.StatusBadRequest
	case errors.Is(err, engine.ErrGroupConflict):
		return codeGroupConflict, groupConflict(err), http.StatusConflict
	case errors.Is(err, engine.ErrUnknownGroup):
		return codeUnknownGroup, unknownName("group", err, "GET /v1/groups lists the groups"), http.StatusNotFound
	case errors.Is(err, engine.ErrNotInFlight):
		return codeNotInFlight, "record is not in flight for this group", http.StatusConflict
	case errors.Is(err, engine.ErrClosed):
		return codeShuttingDown, "server is shutting down", http.StatusServiceUnavailable
	case errors.Is(err, engine.ErrUnavailable):
		return codeUnavailable, "log store unavailable; retry later", http.StatusServiceUnavailable
	}
	return codeInternal, "internal error", http.StatusInternalServerError
}

// unknownName says which topic or group (kind) err is about, when the
// engine's error names it (`topic "orders.x": engine: unknown topic`),
// and where to look: `unknown topic "orders.x" (GET /v1/topics lists the
// topics)`.
func unknownName(kind string, err error, hint string) string {
	if name, ok := quotedName(kind, err); ok {
		return fmt.Sprintf("unknown %s %s (%s)", kind, quoteInput(name), hint)
	}
	return fmt.Sprintf("unknown %s (%s)", kind, hint)
}

// quotedName returns the name err's text quotes after kind (`topic "x"`).
func quotedName(kind string, err error) (string, bool) {
	s := err.Error()
	i := strings.Index(s, kind+` "`)
	if i < 0 {
		return "", false
	}
	q, qerr := strconv.QuotedPrefix(s[i+len(kind)+1:])
	if qerr != nil {
		return "", false
	}
	name, uerr := strconv.Unquote(q)
	return name, uerr == nil
}

// groupConflict is a group conflict's text without the engines' prefixes,
// their sentinel's text at its end and an empty filter: `group "billing"
// is fixed to pattern "orders.*"`.
func groupConflict(err error) string {
	s := wire.UserText(err)
	s = strings.TrimSuffix(s, ": "+engine.ErrGroupConflict.Error())
	return strings.Replace(s, " and filter map[]", "", 1) + "; join it with that pattern and filter, or choose another group name"
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
	case codeUnknownTopic, codeUnknownGroup, codeNotFound, codeNotSubscribed, codeUnknownSession:
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
	if req.Encoding != nil {
		// Bytes: stored as they are; readers see them as JSON when they
		// are, else as base64 (internal/wire, binary.go).
		var pe *protoError
		if data, pe = wire.DecodePayload(req.Data, req.Encoding); pe != nil {
			return engine.Message{}, pe
		}
		if maxBytes > 0 && len(data) > maxBytes {
			return engine.Message{}, perr(codeTooLarge, "data is %d bytes; the limit is %d", len(data), maxBytes)
		}
	} else if bytes.ContainsAny(data, "\n\r") {
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
		if *req.Priority < 0 || *req.Priority > wire.MaxPriority {
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
	if _, ok := m.Headers[wire.BinaryHeader]; ok {
		return engine.Message{}, perr(codeBadRequest, "header %q is reserved; publish bytes with \"encoding\":\"base64\"", wire.BinaryHeader)
	}
	if req.Encoding != nil {
		m.Headers = wire.MarkBinary(m.Headers, m.Data)
	}
	return m, nil
}
