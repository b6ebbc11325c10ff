package client_test

// Every HTTP response of the in-process gateways these tests start
// (startGatewayOn, authGateway) is validated against the published OpenAPI
// document (router/apidocs) by package apicheck; event streams' events
// against the AsyncAPI frame schemas. The gateways are started from
// examples and helpers without a testing.TB too, so one checker serves
// the whole run and TestMain fails it for every mismatch, listing each.

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"github.com/switchyard/switchyard/router/apidocs/apicheck"
)

// apiChecker is the run's checker, set by checkedMain before any test.
var apiChecker *apicheck.Checker

// apiChecked returns h with every response validated.
func apiChecked(h http.Handler) http.Handler { return apiChecker.Wrap(h) }

// checkedMain runs the tests with apiChecker set and fails the run for
// every mismatch; goleak.VerifyTestMain runs it.
type checkedMain struct{ m *testing.M }

func (c checkedMain) Run() int {
	var err error
	if apiChecker, err = apicheck.Detached(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := c.m.Run()
	if s := apicheck.Summary(); s != "" {
		fmt.Fprintln(os.Stderr, s)
	}
	for _, e := range apiChecker.Errors() {
		fmt.Fprintf(os.Stderr, "API description mismatch: %s\n", e)
		code = 1
	}
	return code
}
