package web_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// waitTimeout bounds each wait of the browser tests outside the page: a
// gateway's shutdown, a WebSocket handshake, the statistics a test waits
// for before it opens the dashboard.
const waitTimeout = 10 * time.Second

// The credentials of the gateways the dashboard tests sign in to.
var (
	hmacSecret = []byte("0123456789abcdef0123456789abcdef-web-test")
	adminKey   = "admin-key-for-web-tests-only"
)

// userToken signs, with hmacSecret, a token for user valid for a minute
// that may subscribe to the given patterns and do nothing else.
func userToken(t *testing.T, user string, subscribe ...string) string {
	t.Helper()
	now := time.Now()
	c := jwt.MapClaims{"sub": user, "iat": now.Unix(), "exp": now.Add(time.Minute).Unix(), "subscribe": subscribe}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(hmacSecret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
