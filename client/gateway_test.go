package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

// testGateway is an in-process gateway whose connections a test can cut.
type testGateway struct {
	URL  string // WebSocket endpoint
	HTTP string // HTTP base

	srv *httptest.Server
	rt  *router.Router
	eng *memengine.Engine
	ln  *trackingListener
}

// startGateway starts a gateway with the group policy p on a loopback port.
func startGateway(p engine.GroupPolicy) (*testGateway, error) {
	return startGatewayOn(p, "")
}

// startGatewayOn starts a gateway listening on addr ("" for any free
// loopback port).
func startGatewayOn(p engine.GroupPolicy, addr string) (*testGateway, error) {
	eng := memengine.New(memengine.Options{Policy: p})
	rt, err := router.New(router.Options{Engine: eng, Registry: prometheus.NewRegistry(), StatsInterval: -1})
	if err != nil {
		return nil, err
	}
	srv := httptest.NewUnstartedServer(apiChecked(rt))
	if addr != "" {
		srv.Listener.Close()
		if srv.Listener, err = net.Listen("tcp", addr); err != nil {
			return nil, err
		}
	}
	ln := &trackingListener{Listener: srv.Listener, conns: make(map[net.Conn]struct{})}
	srv.Listener = ln
	srv.Start()
	return &testGateway{
		URL: "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/ws", HTTP: srv.URL,
		srv: srv, rt: rt, eng: eng, ln: ln,
	}, nil
}

// newGateway starts a gateway that the test's cleanup stops.
func newGateway(tb testing.TB, p engine.GroupPolicy) *testGateway {
	tb.Helper()
	g, err := startGateway(p)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(g.Close)
	return g
}

// Close stops the gateway.
func (g *testGateway) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = g.rt.Shutdown(ctx)
	g.ln.killAll()
	g.srv.Close()
	_ = g.eng.Close(ctx)
}

// KillConnections cuts every TCP connection the gateway accepted, as a
// network failure would.
func (g *testGateway) KillConnections() { g.ln.killAll() }

// post sends a JSON body over HTTP and decodes the reply into out.
func (g *testGateway) post(path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	resp, err := http.Post(g.HTTP+path, "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: HTTP %d: %s", path, resp.StatusCode, rb)
	}
	if out != nil {
		return json.Unmarshal(rb, out)
	}
	return nil
}

type trackingListener struct {
	net.Listener
	mu    sync.Mutex // guards conns
	conns map[net.Conn]struct{}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.conns[c] = struct{}{}
		l.mu.Unlock()
	}
	return c, err
}

func (l *trackingListener) killAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.conns {
		_ = c.Close()
		delete(l.conns, c)
	}
}
