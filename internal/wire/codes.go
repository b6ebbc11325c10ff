// Package wire is Switchyard's WebSocket protocol in one place: the op
// names, the error codes and their Error, the decoding of client frames
// (with a fast path for the frames clients send most), the "from" of a
// subscribe, the encoders of every server frame, and the text helpers
// that bound what an error message echoes. docs/protocol.md describes
// the protocol; the golden transcripts in testdata pin its frames byte
// for byte, and the gateway, the Go client, the command-line client, the
// load generator and the JS client are all tested against them.
//
// The package is internal to the module: the router turns engine and
// name errors into codes and HTTP statuses (classify), and the client
// library keeps its own public Error type; both take the codes from here.
//
// # Concurrency
//
// Everything here is a pure function of its arguments or a constant; it
// is safe for concurrent use. Encoders append to the slice they are given
// or to a new one, never to shared state.
package wire

import "fmt"

// Client ops (PROTOCOL.md, "WebSocket").
const (
	OpSubscribe   = "subscribe"
	OpUnsubscribe = "unsubscribe"
	OpPublish     = "publish"
	OpAck         = "ack"
	OpNack        = "nack"
	OpRefresh     = "refresh"
	OpPresence    = "presence"
	OpPing        = "ping"
)

// Server ops: replies and frames the gateway sends on its own.
const (
	OpWelcome         = "welcome"
	OpSubscribed      = "subscribed"
	OpUnsubscribed    = "unsubscribed"
	OpPublished       = "published"
	OpAcked           = "acked"
	OpNacked          = "nacked"
	OpRefreshed       = "refreshed"
	OpRefreshRequired = "refresh_required"
	OpPong            = "pong"
	OpMessage         = "message"
	OpGap             = "gap"
	OpError           = "error"
	OpJoin            = "join"
	OpLeave           = "leave"
	OpTopicDeleted    = "topic_deleted"
)

// Error codes (PROTOCOL.md, "Error codes", and the HTTP API's additions).
const (
	CodeBadRequest       = "bad_request"
	CodeInvalidTopic     = "invalid_topic"
	CodeInvalidPattern   = "invalid_pattern"
	CodeUnknownTopic     = "unknown_topic"
	CodeUnauthorized     = "unauthorized"
	CodeForbidden        = "forbidden"
	CodeRateLimited      = "rate_limited"
	CodeBackpressure     = "backpressure"
	CodeTooLarge         = "message_too_large"
	CodeTooManySubs      = "too_many_subscriptions"
	CodeNotSubscribed    = "not_subscribed"
	CodeGroupConflict    = "group_conflict"
	CodeShuttingDown     = "shutting_down"
	CodeInternal         = "internal"
	CodeTopicExists      = "topic_exists"
	CodeUnknownGroup     = "unknown_group"
	CodeNotInFlight      = "not_in_flight"
	CodeUnavailable      = "unavailable"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeTooManyConnections and CodeTooManyTopics are the connection
	// and topic limits' codes.
	CodeTooManyConnections = "too_many_connections"
	CodeTooManyTopics      = "too_many_topics"
	// CodeUnsupportedMedia is the code of a state-changing HTTP request
	// whose body is not declared as JSON (HTTP 415).
	CodeUnsupportedMedia = "unsupported_media_type"
	// CodeUnknownSession answers DELETE /v1/sessions/{id} for a session
	// not open on the node (HTTP 404).
	CodeUnknownSession = "unknown_session"
)

// Codes lists every error code above, in the order they are declared.
var Codes = []string{
	CodeBadRequest, CodeInvalidTopic, CodeInvalidPattern, CodeUnknownTopic, CodeUnauthorized,
	CodeForbidden, CodeRateLimited, CodeBackpressure, CodeTooLarge, CodeTooManySubs,
	CodeNotSubscribed, CodeGroupConflict, CodeShuttingDown, CodeInternal, CodeTopicExists,
	CodeUnknownGroup, CodeNotInFlight, CodeUnavailable, CodeNotFound, CodeMethodNotAllowed,
	CodeTooManyConnections, CodeTooManyTopics, CodeUnsupportedMedia, CodeUnknownSession,
}

// Error is an error with a protocol code; the router's handlers return it
// and the transport (WebSocket or HTTP) renders it.
type Error struct {
	Code  string
	Msg   string
	Limit string // the limit that refused the request, if one did
}

func (e *Error) Error() string { return e.Code + ": " + e.Msg }

// Errorf returns an Error with code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}
