package natstest

// Cluster: several embedded JetStream servers clustered on loopback.

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Cluster is n embedded JetStream servers routed to each other on loopback
// ports, each storing its files in its own t.TempDir(), as a user deploys a
// NATS cluster. A test stops one server and starts it again on the same
// ports and store, as an operator restarting a node would: the server
// rejoins and catches its streams up from the others. Its methods are not
// safe for concurrent use; the test's cleanup stops every server.
type Cluster struct {
	t       testing.TB
	name    string
	members []*member
}

type member struct {
	name        string
	port, route int
	dir         string
	ns          *server.Server // nil while stopped
}

// NewCluster starts n clustered servers and returns once every one is
// routed to all the others and the cluster has a JetStream meta leader.
func NewCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	if n < 1 {
		t.Fatalf("natstest: cluster of %d servers", n)
	}
	c := &Cluster{t: t, name: fmt.Sprintf("sytest-%d", os.Getpid())}
	ports := freePorts(t, 2*n)
	for i := range n {
		c.members = append(c.members, &member{
			name:  fmt.Sprintf("n%d", i),
			port:  ports[2*i],
			route: ports[2*i+1],
			dir:   t.TempDir(),
		})
	}
	t.Cleanup(func() {
		for i := range c.members {
			c.Stop(i)
		}
	})
	// Start them together: each server's JetStream waits for its peers.
	for _, m := range c.members {
		c.start(m)
	}
	c.WaitReady(30 * time.Second)
	return c
}

// freePorts returns n distinct free loopback ports. They are held open
// together so no two are the same, then released for the servers.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, n)
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports
}

// Len is the number of servers, running or not.
func (c *Cluster) Len() int { return len(c.members) }

// URL is server i's client URL; it stays the same across restarts.
func (c *Cluster) URL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.members[i].port) }

// URLs is every server's client URL, comma-separated, starting with server
// first and going round: a client given it connects to that server first
// (when it does not randomize) and fails over to the others.
func (c *Cluster) URLs(first int) string {
	us := make([]string, len(c.members))
	for i := range us {
		us[i] = c.URL((first + i) % len(c.members))
	}
	return strings.Join(us, ",")
}

// Server is server i while it runs, nil while it is stopped: for the
// test's questions to it (JetStreamIsStreamLeader, NumClients).
func (c *Cluster) Server(i int) *server.Server { return c.members[i].ns }

// StreamLeader is the index of the running server that leads the stream
// in the global account, or -1 when none does (an election is on).
func (c *Cluster) StreamLeader(stream string) int {
	for i, m := range c.members {
		if m.ns != nil && m.ns.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// Stop shuts server i down, dropping its clients and routes, and waits
// until it is gone; its store stays for Start. Stopping a stopped server
// does nothing.
func (c *Cluster) Stop(i int) {
	m := c.members[i]
	if m.ns == nil {
		return
	}
	m.ns.Shutdown()
	m.ns.WaitForShutdown()
	m.ns = nil
}

// Start starts server i again on its ports and store and returns once it
// accepts clients and its JetStream is current with the cluster's meta
// leader. Starting a running server fails the test.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	m := c.members[i]
	if m.ns != nil {
		c.t.Fatalf("natstest: server %d already running", i)
	}
	c.start(m)
	c.WaitReady(30 * time.Second)
}

// WaitReady waits until every running server is routed to every other
// running one, the cluster has a meta leader that counts every running
// server as an online peer, and every running server is current with it;
// it fails the test after d.
func (c *Cluster) WaitReady(d time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for {
		if c.ready() {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("natstest: cluster not ready within %v", d)
		}
		time.Sleep(20 * time.Millisecond) // polls the servers' state; they have no event for it
	}
}

func (c *Cluster) ready() bool {
	running, leader := 0, false
	for _, m := range c.members {
		if m.ns != nil {
			running++
		}
	}
	for _, m := range c.members {
		if m.ns == nil {
			continue
		}
		// NumRoutes counts route connections (a pool per peer), so
		// ask for at least one per peer.
		if m.ns.NumRoutes() < running-1 || !m.ns.JetStreamIsCurrent() {
			return false
		}
		// The meta leader places replicas only on peers it has current
		// stats of ("no suitable peers for placement" before that).
		if m.ns.JetStreamIsLeader() {
			if len(m.ns.JetStreamClusterPeers()) < running {
				return false
			}
			leader = true
		}
	}
	return leader
}

func (c *Cluster) start(m *member) {
	c.t.Helper()
	var routes []*url.URL
	for _, o := range c.members {
		if o != m {
			routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", o.route)})
		}
	}
	opts := &server.Options{
		ServerName: m.name,
		Host:       "127.0.0.1",
		Port:       m.port,
		JetStream:  true,
		StoreDir:   m.dir,
		NoLog:      os.Getenv("SYTEST_LOG") == "",
		NoSigs:     true,
		Cluster: server.ClusterOpts{
			Name: c.name,
			Host: "127.0.0.1",
			Port: m.route,
		},
		Routes: routes,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		c.t.Fatalf("natstest: server %s: %v", m.name, err)
	}
	if os.Getenv("SYTEST_LOG") != "" {
		ns.ConfigureLogger()
	}
	ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		c.t.Fatalf("natstest: server %s on port %d not ready", m.name, m.port)
	}
	m.ns = ns
}

// MoveStreamLeader makes server to the leader of the stream (in the global
// account): it asks the current leader to step down in favour of it, and
// returns once server to leads. The test fails if that takes more than 15 s.
func (c *Cluster) MoveStreamLeader(stream string, to int) {
	c.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for c.StreamLeader(stream) != to {
		if time.Now().After(deadline) {
			c.t.Fatalf("natstest: %s did not move its leader to server %d", stream, to)
		}
		if err := c.stepDown(stream, c.members[to].name); err != nil {
			c.t.Logf("natstest: step down %s: %v", stream, err)
		}
		for end := time.Now().Add(2 * time.Second); c.StreamLeader(stream) != to && time.Now().Before(end); {
			time.Sleep(20 * time.Millisecond) // polls the servers' state
		}
	}
}

func (c *Cluster) stepDown(stream, preferred string) error {
	nc, err := nats.Connect(c.URLs(0))
	if err != nil {
		return err
	}
	defer nc.Close()
	req, _ := json.Marshal(map[string]any{"placement": map[string]string{"preferred": preferred}})
	resp, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, req, 5*time.Second)
	if err != nil {
		return err
	}
	var r struct {
		Error *struct{ Description string } `json:"error"`
	}
	if json.Unmarshal(resp.Data, &r) == nil && r.Error != nil {
		return errors.New(r.Error.Description)
	}
	return nil
}
