// Package natstest gives tests a NATS JetStream server: the one named by
// SWITCHYARD_NATS_URL when it is set and reachable, otherwise an embedded
// nats-server started for the test on a loopback port, so tests pass
// anywhere. It is for tests only.
//
// Concurrency: URL and Prefix are safe for concurrent use; every server and
// connection they start is stopped by the test's cleanup.
package natstest

import (
	"context"
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
				return u
			}
		}
		t.Logf("SWITCHYARD_NATS_URL=%s is not reachable; using an embedded server", u)
	}
	ns, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      -1,
		JetStream: true,
		StoreDir:  t.TempDir(),
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
		t.Fatalf("embedded nats-server not ready")
	}
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	// The server removes an account's stream directory when its last
	// stream is deleted, racing with the next test's create; one stream
	// that lives as long as the server avoids that.
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: "anchor", Subjects: []string{"anchor"}}); err != nil {
		t.Fatal(err)
	}
	return ns.ClientURL()
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
