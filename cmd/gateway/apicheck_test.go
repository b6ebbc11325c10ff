package main

// Every HTTP response a gateway started by these tests (through run) sends
// to the test process is validated against the published OpenAPI document
// (router/apidocs) by package apicheck, on the client's side: TestMain
// puts a checking transport in http.DefaultTransport, which every
// http.Get, http.Post and http.Client without its own transport uses, and
// the gateways' addresses are added as they start (gatewayListening). A
// mismatch fails the run after the tests, listing each.

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"github.com/switchyard/switchyard/router/apidocs/apicheck"
)

// gatewayHosts are the addresses of the gateways the tests started.
var gatewayHosts apicheck.Hosts

// gatewayListening returns a listening callback for run that adds the
// gateway's address to the checked hosts, then calls f.
func gatewayListening(f func(string)) func(string) {
	return func(addr string) {
		gatewayHosts.Add(addr)
		f(addr)
	}
}

// checkedMain runs the tests with the checking transport in place and
// fails the run for every mismatch; goleak.VerifyTestMain runs it.
type checkedMain struct{ m *testing.M }

func (c checkedMain) Run() int {
	checker, err := apicheck.Detached()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	base := http.DefaultTransport
	http.DefaultTransport = checker.Transport(base, gatewayHosts.Has)
	defer func() { http.DefaultTransport = base }()
	code := c.m.Run()
	if s := apicheck.Summary(); s != "" {
		fmt.Fprintln(os.Stderr, s)
	}
	for _, e := range checker.Errors() {
		fmt.Fprintf(os.Stderr, "API description mismatch: %s\n", e)
		code = 1
	}
	return code
}
