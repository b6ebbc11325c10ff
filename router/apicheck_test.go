package router_test

// Validation of everything the router's tests see against the gateway's
// published descriptions (router/apidocs), by package apidocs/apicheck:
// every HTTP response a test gateway (newGateway) sends is checked against
// openapi.json, every event of an SSE response and every frame the
// WebSocket test client reads against asyncapi.json's ServerFrame schema.
// A mismatch fails the test that caused it; TestMain prints how many were
// checked.

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"github.com/switchyard/switchyard/router/apidocs/apicheck"
)

// printAPICounts reports the counts; TestMain calls it after the tests.
func printAPICounts() {
	if s := apicheck.Summary(); s != "" {
		fmt.Fprintln(os.Stderr, s)
	}
}

func loadAPIDocs(t testing.TB) {
	t.Helper()
	apicheck.Load(t)
}

// apiCheck validates the responses of one test gateway.
type apiCheck struct{ *apicheck.Checker }

// newAPICheck returns the checker of t's gateway (see apicheck.New).
func newAPICheck(t *testing.T) apiCheck { return apiCheck{apicheck.New(t)} }

// wrap returns h with every response validated.
func (a apiCheck) wrap(h http.Handler) http.Handler { return a.Wrap(h) }

// checkServerFrame validates a frame the gateway sent and counts it.
func checkServerFrame(frame []byte) error { return apicheck.ServerFrame(frame) }
