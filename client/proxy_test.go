package client_test

import (
	"testing"

	"github.com/switchyard/switchyard/faults"
)

// newLinkProxy starts the fault harness's loopback proxy to target; the
// test's cleanup stops it. Its Silence cuts the links open at that moment
// silently (nothing arrives, nothing is closed), as a NAT that forgot the
// flow or a sleeping laptop would; links made later forward normally.
func newLinkProxy(t *testing.T, target string) *faults.Proxy {
	t.Helper()
	p, err := faults.NewProxy("gateway", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}
