package client

import (
	"errors"
	"fmt"

	"github.com/switchyard/switchyard/internal/wire"
)

// Error is an error reported by the gateway: an error frame on the
// WebSocket. Check for it with errors.As; Code is one of the protocol's
// error codes, such as "invalid_topic" or "not_in_flight".
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "switchyard: " + e.Code
	}
	return fmt.Sprintf("switchyard: %s: %s", e.Code, e.Message)
}

// Protocol error codes a caller is likely to branch on (the protocol's
// full list is in docs/protocol.md).
const (
	CodeBadRequest     = wire.CodeBadRequest     // "bad_request"
	CodeInvalidTopic   = wire.CodeInvalidTopic   // "invalid_topic"
	CodeInvalidPattern = wire.CodeInvalidPattern // "invalid_pattern"
	CodeUnknownTopic   = wire.CodeUnknownTopic   // "unknown_topic"
	CodeForbidden      = wire.CodeForbidden      // "forbidden"
	CodeRateLimited    = wire.CodeRateLimited    // "rate_limited"
	CodeBackpressure   = wire.CodeBackpressure   // "backpressure"
	CodeNotSubscribed  = wire.CodeNotSubscribed  // "not_subscribed"
	CodeNotInFlight    = wire.CodeNotInFlight    // "not_in_flight"
	CodeGroupConflict  = wire.CodeGroupConflict  // "group_conflict"
	CodeShuttingDown   = wire.CodeShuttingDown   // "shutting_down"
)

var (
	// ErrClosed is returned by calls on a Client that was closed, or that
	// stopped after a connection loss with reconnection disabled.
	ErrClosed = errors.New("client: closed")
	// ErrConnectionLost is returned by a request whose connection dropped
	// before its reply arrived. The request may or may not have taken
	// effect; a publish with WithMsgID can be repeated safely.
	ErrConnectionLost = errors.New("client: connection lost")
	// ErrNotGroup is returned by Ack and Nack on a plain delivery.
	ErrNotGroup = errors.New("client: not a group delivery")
	// ErrAlreadySubscribed is returned by Subscribe for a pattern (and
	// group) this client is already subscribed to.
	ErrAlreadySubscribed = errors.New("client: already subscribed")
	// ErrUnsubscribed is returned by Unsubscribe on a subscription that
	// has already ended.
	ErrUnsubscribed = errors.New("client: subscription ended")
	// ErrProtocol is wrapped by errors about frames the client could not
	// understand.
	ErrProtocol = errors.New("client: protocol error")
	// ErrNotGateway is wrapped by Dial's error when the server refused the
	// WebSocket handshake without a Switchyard error body: most often the
	// URL names another server, or a proxy that does not pass WebSockets.
	ErrNotGateway = errors.New("client: not a Switchyard gateway")
)
