package wire

import "strings"

// How to send a credential, as the gateway's authentication errors end.
// A client that sends the credential itself (the command-line client)
// cuts these hints (CutAuthHint) and names its own flag instead.
const (
	// HintToken ends the message of an HTTP call without a credential, or
	// with an Authorization header that is not a bearer one.
	HintToken = `: send a token or the admin key in the Authorization header as "Bearer <token>"`
	// HintAdminKey ends the message of an admin call made without the
	// admin key.
	HintAdminKey = `: send it in the Authorization header as "Bearer <admin key>"`
	// HintUpgradeToken ends the message of a WebSocket upgrade or event
	// stream without a credential.
	HintUpgradeToken = `: send it in the Authorization header as "Bearer <token>" or as the token query parameter`
)

// CutAuthHint returns msg without the hint it ends with, if any.
func CutAuthHint(msg string) string {
	for _, h := range []string{HintToken, HintAdminKey, HintUpgradeToken} {
		if m, ok := strings.CutSuffix(msg, h); ok {
			return m
		}
	}
	return msg
}
