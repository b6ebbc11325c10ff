package jsengine_test

import (
	neturl "net/url"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
	"github.com/switchyard/switchyard/faults"
)

// linkProxy is the fault harness's loopback TCP proxy in front of a NATS
// server, with the faults the engine's tests make of a link: a stall of
// what clients send, a hold of both ways (held bytes are not lost and flow
// on when it ends, as over a congested or silent link), a delay, and a
// reset of the connections open through it.
type linkProxy struct{ *faults.Proxy }

// newLinkProxy starts a proxy to the server at url; the test's cleanup
// stops it.
func newLinkProxy(t *testing.T, url string) *linkProxy {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faults.NewProxy("nats", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return &linkProxy{p}
}

// URL is the proxy's NATS URL.
func (p *linkProxy) URL() string { return "nats://" + p.Addr() }

// Stall holds everything clients send from now on until Resume.
func (p *linkProxy) Stall() { p.Cut(faults.Up) }

// Resume lets held bytes flow again.
func (p *linkProxy) Resume() { p.Heal() }

// Hold holds everything sent either way from now on until Release.
func (p *linkProxy) Hold() { p.CutBoth() }

// Release lets held bytes flow again.
func (p *linkProxy) Release() { p.Heal() }

// SetDelay holds each chunk clients send for d, keeping their order, as
// over a slow link; 0 ends it.
func (p *linkProxy) SetDelay(d time.Duration) { p.Set(faults.Up, faults.Faults{Latency: d}) }

// Reset resets every connection open through the proxy and ends a hold or
// stall: their clients connect again.
func (p *linkProxy) Reset() {
	p.Proxy.Reset()
	p.Heal()
}

// stalledReplicas opens a node on a three-server cluster with three
// replicas through a link proxy the test can stall (server 0's); the
// test's cleanup resumes the link and closes the node.
func stalledReplicas(t *testing.T, prefix string) (*jsengine.Engine, *linkProxy) {
	t.Helper()
	c := natstest.NewCluster(t, 3)
	px := newLinkProxy(t, c.URL(0))
	e, err := openReplicas(px.URL(), prefix, 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { px.Resume(); closeEngine(t, e) })
	return e, px
}
