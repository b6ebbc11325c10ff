package router

// The router's names for the protocol defined in internal/wire: the error
// codes, the request, "from", the encoders and the text helpers. They keep
// the router's call sites as they were before the protocol moved there;
// each is a constant, an alias or a wrapper the compiler inlines.

import (
	"encoding/json"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/wire"
)

// Protocol error codes (wire.Code*).
const (
	codeBadRequest         = wire.CodeBadRequest
	codeInvalidTopic       = wire.CodeInvalidTopic
	codeInvalidPattern     = wire.CodeInvalidPattern
	codeUnknownTopic       = wire.CodeUnknownTopic
	codeUnauthorized       = wire.CodeUnauthorized
	codeForbidden          = wire.CodeForbidden
	codeRateLimited        = wire.CodeRateLimited
	codeBackpressure       = wire.CodeBackpressure
	codeTooLarge           = wire.CodeTooLarge
	codeTooManySubs        = wire.CodeTooManySubs
	codeNotSubscribed      = wire.CodeNotSubscribed
	codeGroupConflict      = wire.CodeGroupConflict
	codeShuttingDown       = wire.CodeShuttingDown
	codeInternal           = wire.CodeInternal
	codeTopicExists        = wire.CodeTopicExists
	codeUnknownGroup       = wire.CodeUnknownGroup
	codeNotInFlight        = wire.CodeNotInFlight
	codeUnavailable        = wire.CodeUnavailable
	codeNotFound           = wire.CodeNotFound
	codeUnknownSession     = wire.CodeUnknownSession
	codeMethodNotAllowed   = wire.CodeMethodNotAllowed
	codeTooManyConnections = wire.CodeTooManyConnections
	codeTooManyTopics      = wire.CodeTooManyTopics
	codeUnsupportedMedia   = wire.CodeUnsupportedMedia
)

type (
	request    = wire.Request
	filterSpec = wire.Filter
)

// decodeRequest parses one client frame (wire.Decode).
func decodeRequest(data []byte) (*request, *protoError) { return wire.Decode(data) }

// fromSpec is a parsed "from" (wire.From).
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
	f, e := wire.ParseFrom(raw)
	if e != nil {
		return fromSpec{}, e
	}
	return fromSpec{start: f.Start, positions: f.Positions, epoch: f.Epoch, pos: f.Pos, last: f.Last}, nil
}

// timeFormat is RFC3339 in UTC with exactly three fractional digits.
const timeFormat = wire.TimeFormat

func appendTime(dst []byte, t time.Time) []byte { return wire.AppendTime(dst, t) }
func appendString(dst []byte, s string) []byte  { return wire.AppendString(dst, s) }

func recordBody(dst []byte, rec *engine.Record) (body []byte, lean int) {
	return wire.RecordBody(dst, rec)
}

func encodeMessage(pattern string, body []byte) []byte { return wire.EncodeMessage(pattern, body) }

func encodeLeanMessage(pattern, topic string, leanBody []byte) []byte {
	return wire.EncodeLeanMessage(pattern, topic, leanBody)
}

func encodeGroupMessage(pattern string, d engine.Delivery) []byte {
	return wire.EncodeGroupMessage(pattern, d)
}

func encodeGap(dst []byte, pattern, group, topic string, partition int, from, to int64, reason string) []byte {
	return wire.EncodeGap(dst, pattern, group, topic, partition, from, to, reason)
}

func encodePublished(id json.RawMessage, topic string, a engine.Appended) []byte {
	return wire.EncodePublished(id, topic, a)
}

func encodeError(id json.RawMessage, code, msg string) []byte { return wire.EncodeError(id, code, msg) }

func encodeReply(op string, id json.RawMessage, fields map[string]any) []byte {
	return wire.EncodeReply(op, id, fields)
}

// Envelopes a WebSocket client may ask for with ?envelope=.
const (
	envelopeFull = wire.EnvelopeFull
	envelopeLean = wire.EnvelopeLean
)

// Text helpers (internal/wire, text.go).
const (
	maxEcho         = wire.MaxEcho
	maxErrorMessage = wire.MaxErrorMessage
)

func cutUTF8(s string, n int) (string, bool) { return wire.CutUTF8(s, n) }
func quoteInput(s string) string             { return wire.Quote(s) }
func capMessage(msg string) string           { return wire.CapMessage(msg) }

func nameError(code, name string, err error) *protoError {
	return wire.NameError(code, name, err)
}
