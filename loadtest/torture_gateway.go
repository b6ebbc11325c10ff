package main

// The torture run's gateways: routers in this process on loopback ports
// (started and stopped by serveGateway, as the soak's in-process gateway
// is), with a short keepalive ping so that dead connections with a ping
// outstanding are common. The run reads the gateways' own registries for
// their per-session figures (connections, subscriptions).
//
// Three set-ups:
//
//   - --engine memory: one gateway on the memory engine. It is never
//     restarted: the memory engine loses its log with the process by
//     design (a restart is a new epoch, every position void), so there is
//     nothing a restart could check that the kills do not.
//   - --engine embedded: one gateway on the JetStream engine over a NATS
//     server in this process storing its files in a directory of its own,
//     as the gateway's --engine embedded runs it. A graceful restart stops
//     the router (sessions told to go away), the engine and the NATS
//     server, then starts all three again on the same directory and the
//     same address; clients reconnect and resume from their positions.
//   - --cluster: three gateways, each on the JetStream engine (three
//     replicas) over its own NATS server; the three servers are clustered
//     on loopback routes, each with its own store. A graceful restart
//     stops one gateway (router and engine) and starts it again on the
//     same address while the NATS cluster stays up, as an operator rolls
//     gateways one at a time.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/session"
)

// tortureGateway is the gateways under torture. Its methods are safe for
// concurrent use; restart is called by one goroutine at a time.
type tortureGateway struct {
	cfg      *tortureConfig
	problems *problemLog
	nodes    []*tortureNode
	nats     *tortureNATS        // nil on the memory engine
	hook     *router.HookOptions // the first gateway's connect hook; nil: none
}

// tortureNode is one gateway; its addresses stay the same across restarts.
type tortureNode struct {
	i                    int
	addr, wsURL, httpURL string

	mu sync.Mutex     // guards following
	gs *servedGateway // nil while stopped
}

// tortureAckTimeout is the group ack timeout: short, so that stalled and
// crashed members' leases go round within a run.
const tortureAckTimeout = 1500 * time.Millisecond

// torturePolicy is the groups' policy; ackTimeout zero:
// tortureAckTimeout.
func torturePolicy(ackTimeout time.Duration) engine.GroupPolicy {
	if ackTimeout <= 0 {
		ackTimeout = tortureAckTimeout
	}
	return engine.GroupPolicy{AckTimeout: ackTimeout, MaxAttempts: 4,
		BackoffMin: 50 * time.Millisecond, BackoffMax: 400 * time.Millisecond}
}

func startTortureGateway(cfg *tortureConfig) (*tortureGateway, error) {
	g := &tortureGateway{cfg: cfg, problems: &problemLog{}}
	hook, err := tortureHook(cfg)
	if err != nil {
		return nil, err
	}
	g.hook = hook
	n := 1
	if cfg.cluster {
		n = 3
	}
	if cfg.engine == "embedded" {
		nn, err := startTortureNATS(n)
		if err != nil {
			_ = closeHostileHook()
			return nil, err
		}
		g.nats = nn
	}
	for i := range n {
		nd := &tortureNode{i: i}
		g.nodes = append(g.nodes, nd)
		if err := g.start(nd); err != nil {
			_ = g.stop()
			return nil, err
		}
		nd.addr = nd.gs.addr
		nd.wsURL, nd.httpURL = nd.gs.wsURL, nd.gs.httpURL
	}
	return g, nil
}

// start starts node nd's gateway (on its address once it has one).
func (g *tortureGateway) start(nd *tortureNode) error {
	logger := slog.New(g.problems)
	var eng engine.Engine
	var closeEngine func(context.Context) error
	if g.nats == nil {
		m := memengine.New(memengine.Options{Policy: torturePolicy(g.cfg.ackTimeout)})
		eng, closeEngine = m, m.Close
	} else {
		if !g.cfg.cluster && !g.nats.running(0) {
			// A restart of the embedded set-up: its NATS server first.
			if err := g.nats.startServer(0); err != nil {
				return err
			}
		}
		e, closeConn, err := g.nats.engine(nd.i, logger, torturePolicy(g.cfg.ackTimeout))
		if err != nil {
			return err
		}
		eng, closeEngine = e, func(ctx context.Context) error {
			err := e.Close(ctx)
			closeConn()
			if !g.cfg.cluster {
				g.nats.stopServer(0)
			}
			return err
		}
	}
	opts := router.Options{
		Engine:        eng,
		Registry:      prometheus.NewRegistry(),
		StatsInterval: -1,
		Logger:        logger,
		Session:       session.Options{QueueMessages: 256, PingInterval: g.cfg.keepalive, WriteTimeout: g.cfg.writeTimeout},
	}
	if g.hook != nil && nd.i == 0 {
		opts.Hooks = *g.hook
	}
	gs, err := serveGateway(gatewayServe{
		name: fmt.Sprintf("torture gateway %d", nd.i), addr: nd.addr,
		router:           opts,
		server:           router.ServerOptions{ErrorLog: log.New(g.problems.writer(), "http: ", 0)},
		smallSendBuffers: true,
		stopTimeout:      15 * time.Second,
		closeEngine:      closeEngine,
	})
	if err != nil {
		return err
	}
	nd.mu.Lock()
	nd.gs = gs
	nd.mu.Unlock()
	return nil
}

// stopNode stops node nd's gateway gracefully.
func (g *tortureGateway) stopNode(nd *tortureNode) error {
	nd.mu.Lock()
	gs := nd.gs
	nd.gs = nil
	nd.mu.Unlock()
	if gs == nil {
		return nil
	}
	return gs.stop()
}

// restart stops node i's gateway gracefully and starts it again on the
// same address (and, on the embedded engine, the same directory); it
// returns how long the node was away.
func (g *tortureGateway) restart(i int) (time.Duration, error) {
	start := time.Now()
	nd := g.nodes[i]
	if err := g.stopNode(nd); err != nil {
		return time.Since(start), fmt.Errorf("restart of gateway %d: stop: %w", i, err)
	}
	// The address was just freed; a connection's TIME_WAIT does not hold
	// a listener off (Go listens with SO_REUSEADDR), but retry briefly.
	var err error
	for try := 0; try < 20; try++ {
		if err = g.start(nd); err == nil {
			break
		}
		pause(context.Background(), 100*time.Millisecond)
	}
	if err != nil {
		return time.Since(start), fmt.Errorf("restart of gateway %d: start: %w", i, err)
	}
	return time.Since(start), nil
}

// stop stops every gateway, then the NATS servers, and removes their
// directories.
func (g *tortureGateway) stop() error {
	var errs []error
	for _, nd := range g.nodes {
		errs = append(errs, g.stopNode(nd))
	}
	if g.nats != nil {
		g.nats.close()
	}
	if err := closeHostileHook(); err != nil {
		errs = append(errs, fmt.Errorf("torture gateway: connect hook: %w", err))
	}
	return errors.Join(errs...)
}

// pick returns the node a new client uses.
func (g *tortureGateway) pick(rng *rand.Rand) *tortureNode {
	return g.nodes[rng.IntN(len(g.nodes))]
}

// gauges reads the gateways' connections and subscriptions (plain and
// group), summed, from their /metrics; -1 when one cannot be read.
func (g *tortureGateway) gauges(ctx context.Context) (conns, subs int64) {
	for _, nd := range g.nodes {
		m, err := scrapeSeries(ctx, http.DefaultClient, nd.httpURL, []string{"switchyard_connections",
			`switchyard_subscriptions{kind="plain"}`, `switchyard_subscriptions{kind="group"}`})
		if err != nil {
			return -1, -1
		}
		conns += m["switchyard_connections"]
		subs += m[`switchyard_subscriptions{kind="plain"}`] + m[`switchyard_subscriptions{kind="group"}`]
	}
	return conns, subs
}

// tortureNATS is the NATS servers of the embedded engine: one in this
// process without a port, or (--cluster) three clustered on loopback
// routes. Each keeps its files in a directory of its own that outlives
// its restarts.
type tortureNATS struct {
	cluster bool
	dirs    []string
	routes  []int

	mu      sync.Mutex // guards servers
	servers []*server.Server
}

func startTortureNATS(n int) (*tortureNATS, error) {
	nn := &tortureNATS{cluster: n > 1, servers: make([]*server.Server, n)}
	for range n {
		dir, err := os.MkdirTemp("", "switchyard-torture-")
		if err != nil {
			nn.close()
			return nil, err
		}
		nn.dirs = append(nn.dirs, dir)
	}
	if nn.cluster {
		// Route ports, held together so that they differ, then released.
		var ls []net.Listener
		for range n {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				nn.close()
				return nil, err
			}
			ls = append(ls, l)
			nn.routes = append(nn.routes, l.Addr().(*net.TCPAddr).Port)
		}
		for _, l := range ls {
			l.Close()
		}
	}
	// Start them together: a clustered server's JetStream waits for its
	// peers.
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = nn.startServer(i) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		nn.close()
		return nil, err
	}
	if nn.cluster {
		if err := nn.waitCluster(60 * time.Second); err != nil {
			nn.close()
			return nil, err
		}
	}
	return nn, nil
}

// startServer starts server i on its directory (and routes).
func (nn *tortureNATS) startServer(i int) error {
	opts := &server.Options{ServerName: fmt.Sprintf("switchyard-torture-%d", i), JetStream: true,
		StoreDir: nn.dirs[i], DontListen: true, NoSigs: true}
	if nn.cluster {
		var routes []*url.URL
		for j, p := range nn.routes {
			if j != i {
				routes = append(routes, &url.URL{Scheme: "nats", Host: fmt.Sprintf("127.0.0.1:%d", p)})
			}
		}
		opts.DontListen = false
		opts.Host, opts.Port = "127.0.0.1", server.RANDOM_PORT
		opts.Cluster = server.ClusterOpts{Name: "switchyard-torture", Host: "127.0.0.1", Port: nn.routes[i]}
		opts.Routes = routes
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return fmt.Errorf("embedded nats %d: %w", i, err)
	}
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return fmt.Errorf("embedded nats %d: not ready within 30s", i)
	}
	nn.mu.Lock()
	nn.servers[i] = ns
	nn.mu.Unlock()
	return nil
}

// waitCluster waits until every server is routed to the others and the
// cluster's JetStream has a meta leader that knows every peer.
func (nn *tortureNATS) waitCluster(d time.Duration) error {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		ready, leader := true, false
		for _, ns := range nn.servers {
			if ns.NumRoutes() < len(nn.servers)-1 || !ns.JetStreamIsCurrent() {
				ready = false
			}
			if ns.JetStreamIsLeader() && len(ns.JetStreamClusterPeers()) >= len(nn.servers) {
				leader = true
			}
		}
		if ready && leader {
			return nil
		}
		pause(context.Background(), 50*time.Millisecond) // the servers have no event for it
	}
	return fmt.Errorf("embedded nats cluster: not ready within %v", d)
}

// waitStreams waits, for a cluster, until every stream (the topics' and
// the buckets') has a leader and every other replica current: a follower
// makes a stream's replica after the leader, and a baseline measured
// before it has (a CI run's: 40 goroutines and 10 descriptors fewer than
// once settled) would count the follower's catching up as the clients'.
func (nn *tortureNATS) waitStreams(ctx context.Context, d time.Duration) error {
	if !nn.cluster {
		return nil
	}
	nn.mu.Lock()
	ns := nn.servers[0]
	nn.mu.Unlock()
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		return fmt.Errorf("embedded nats: connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	unsettled := ""
	for ctx.Err() == nil {
		unsettled = ""
		names := js.StreamNames(ctx)
		for name := range names.Name() {
			s, err := js.Stream(ctx, name)
			if err != nil {
				unsettled = name + ": " + err.Error()
				break
			}
			ci := s.CachedInfo().Cluster
			if !jsengine.Settled(ci, len(nn.servers)) {
				unsettled = name
				break
			}
		}
		if unsettled == "" && names.Err() == nil {
			return nil
		}
		pause(ctx, 100*time.Millisecond) // the servers tell no event for it
	}
	return fmt.Errorf("embedded nats cluster: stream %s not settled on %d replicas within %v", unsettled, len(nn.servers), d)
}

// running reports whether server i runs.
func (nn *tortureNATS) running(i int) bool {
	nn.mu.Lock()
	defer nn.mu.Unlock()
	return nn.servers[i] != nil
}

// stopServer shuts server i down; its directory stays.
func (nn *tortureNATS) stopServer(i int) {
	nn.mu.Lock()
	ns := nn.servers[i]
	nn.servers[i] = nil
	nn.mu.Unlock()
	if ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}

// close stops every server and removes the directories.
func (nn *tortureNATS) close() {
	for i := range nn.servers {
		nn.stopServer(i)
	}
	for _, d := range nn.dirs {
		os.RemoveAll(d)
	}
}

// engine starts the JetStream engine of gateway i on an in-process
// connection to server i; closeConn closes the connection once the
// engine is closed.
func (nn *tortureNATS) engine(i int, logger *slog.Logger, policy engine.GroupPolicy) (*jsengine.Engine, func(), error) {
	nn.mu.Lock()
	ns := nn.servers[i]
	nn.mu.Unlock()
	if ns == nil {
		return nil, nil, fmt.Errorf("embedded nats %d: not running", i)
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))
	if err != nil {
		return nil, nil, fmt.Errorf("embedded nats %d: connect: %w", i, err)
	}
	replicas := 1
	if nn.cluster {
		replicas = len(nn.servers)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e, err := jsengine.New(ctx, jsengine.Options{Conn: nc, Prefix: "torture", Policy: policy,
		Logger: logger, MemberTTL: 3 * time.Second, Replicas: replicas})
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("engine embedded %d: %w", i, err)
	}
	return e, nc.Close, nil
}
