// Package natstest gives tests a NATS JetStream server: the one named by
// SWITCHYARD_NATS_URL when it is set and reachable, otherwise an embedded
// nats-server started for the test on a loopback port, so tests pass
// anywhere. It is for tests only.
//
// Server is an embedded server a test can stop and start again, to
// simulate a NATS outage.
//
// Concurrency: URL, Prefix and NewServer are safe for concurrent use; a
// Server's methods are not. Every server and connection they start is
// stopped by the test's cleanup.
package natstest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// URL returns the NATS server a test should use: SWITCHYARD_NATS_URL when set
// and reachable, otherwise an embedded JetStream server for this test.
func URL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv("SWITCHYARD_NATS_URL"); u != "" {
		if pu, err := url.Parse(u); err == nil {
			if c, err := net.DialTimeout("tcp", pu.Host, time.Second); err == nil {
				c.Close()
				anchor(t, u, "sytest_anchor")
				return u
			}
		}
		t.Logf("SWITCHYARD_NATS_URL=%s is not reachable; using an embedded server", u)
	}
	ns := startServer(t, -1, t.TempDir())
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	anchor(t, ns.ClientURL(), "anchor")
	return ns.ClientURL()
}

// anchor makes sure the server at url holds an empty stream named name.
// The server removes an account's stream directory when its last stream is
// deleted, racing with a create by the next test (or by another test run
// sharing the server); one stream that outlives the tests avoids that. On
// a shared server the anchor is left in place.
func anchor(t testing.TB, url, name string) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name}, MaxMsgs: 1})
	if err != nil && !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		t.Fatalf("natstest: anchor stream: %v", err)
	}
}

// startServer starts an embedded JetStream server on a loopback port (-1:
// any free one) storing in dir.
func startServer(t testing.TB, port int, dir string) *server.Server {
	t.Helper()
	ns, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  dir,
		NoLog:     os.Getenv("SYTEST_LOG") == "",
		NoSigs:    true,
	})
	if err != nil {
		t.Fatalf("embedded nats-server: %v", err)
	}
	if os.Getenv("SYTEST_LOG") != "" {
		ns.ConfigureLogger()
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		t.Fatalf("embedded nats-server on port %d not ready", port)
	}
	return ns
}

// Server is an embedded JetStream server that a test stops and starts
// again on the same loopback port and store directory, as an operator
// restarting NATS would: clients reconnect to the same URL and find the
// streams and buckets they left. It never touches the server named by
// SWITCHYARD_NATS_URL. Its methods are not safe for concurrent use.
type Server struct {
	t    testing.TB
	port int
	dir  string
	ns   *server.Server
}

// NewServer starts a Server for the test on a free loopback port with a
// store in t.TempDir(); the test's cleanup stops it.
func NewServer(t testing.TB) *Server {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &Server{t: t, port: port, dir: t.TempDir()}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// URL is the server's client URL; it stays the same across restarts.
func (s *Server) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// Start starts the server again after Stop, on the same port and store,
// and returns once it accepts clients. Starting a running server fails the
// test.
func (s *Server) Start() {
	s.t.Helper()
	if s.ns != nil {
		s.t.Fatal("natstest: server already running")
	}
	s.ns = startServer(s.t, s.port, s.dir)
}

// Stop shuts the server down, dropping every client connection, and waits
// until it is gone. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	if s.ns == nil {
		return
	}
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
	s.ns = nil
}

var prefixSeq struct {
	sync.Mutex
	n int
}

// Prefix returns a jsengine Prefix no other test run uses, and removes what
// engines created under it when the test ends.
func Prefix(t testing.TB, url string) string {
	t.Helper()
	prefixSeq.Lock()
	prefixSeq.n++
	n := prefixSeq.n
	prefixSeq.Unlock()
	prefix := fmt.Sprintf("sytest_%d_%d_%d", os.Getpid(), time.Now().UnixNano()%1_000_000, n)
	t.Cleanup(func() { deletePrefix(t, url, prefix) })
	return prefix
}

func deletePrefix(t testing.TB, url, prefix string) {
	nc, err := nats.Connect(url)
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	names := js.StreamNames(ctx)
	var del []string
	for n := range names.Name() {
		if strings.HasPrefix(n, prefix+"_") || strings.HasPrefix(n, "KV_"+prefix+"_") {
			del = append(del, n)
		}
	}
	for _, n := range del {
		if err := js.DeleteStream(ctx, n); err != nil {
			t.Logf("cleanup %s: %v", n, err)
		}
	}
}
