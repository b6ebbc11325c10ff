package client_test

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	// Refresh tests use sub-second token lifetimes. Set once, before any test.
	jwt.TimePrecision = time.Millisecond
	goleak.VerifyTestMain(checkedMain{m})
}
