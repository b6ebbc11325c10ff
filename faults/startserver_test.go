package faults

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// TestStartServerNamesPortInUse: a NATS server of the cluster whose port
// another socket holds fails its Start after its tries, saying which port
// is taken, instead of a bare "not ready".
func TestStartServerNamesPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	opts := &server.Options{Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true}
	ns, err := startServer(opts, 300*time.Millisecond, 2)
	if err == nil {
		ns.Shutdown()
		t.Fatal("a server started on a port another socket holds")
	}
	if !strings.Contains(err.Error(), "in use") || !strings.Contains(err.Error(), "2 starts") {
		t.Fatalf("err = %v, want it to name the port in use and the starts", err)
	}
}

// TestStartServerStarts: a free port starts at the first try.
func TestStartServerStarts(t *testing.T) {
	ports, err := freePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	ns, err := startServer(&server.Options{Host: "127.0.0.1", Port: ports[0], NoLog: true, NoSigs: true}, 10*time.Second, 1)
	if err != nil {
		t.Fatal(err)
	}
	ns.Shutdown()
	ns.WaitForShutdown()
}
