package faults

// The cluster under test: NATS servers in this process whose routes run
// through proxies, and gateways (router and JetStream engine in this
// process, or the gateway command in a child process: gatewayproc.go)
// whose NATS connections run through proxies of their own.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/router"
)

// Options shape a Cluster.
type Options struct {
	// Servers and Gateways: how many of each (3 and 3 when zero).
	Servers, Gateways int
	// Prefix is the engine's stream prefix ("faults" when empty).
	Prefix string
	// PingInterval is the NATS servers' ping interval to clients and
	// routes: with two pings outstanding a silent link is declared dead
	// (1s when zero; NATS's default is 2 minutes).
	PingInterval time.Duration
	// Logger receives the gateways' logs (discarded when nil).
	Logger *slog.Logger
	// Processes are the gateways (by index) that run the gateway command
	// Binary in a child process (gatewayproc.go); the others run in
	// this process. ProcessOutput receives the processes' stdout and
	// stderr, a line at a time (discarded when nil).
	Processes     []int
	Binary        string
	ProcessOutput io.Writer
}

// Cluster is NATS servers routed to each other through proxies, and
// gateways connected to every server through proxies. Its methods are safe
// for concurrent use; Close stops everything and removes the stores.
type Cluster struct {
	opts    Options
	name    string
	servers []*natsServer
	// routes[i][j] carries the route connections server i dials to
	// server j.
	routes [][]*Proxy
	gmu    sync.Mutex // guards the elements of gateways, and procs
	// gateways is made once by NewCluster; RestartGateway replaces one.
	gateways []*Gateway
	// procs is every gateway process the cluster started that became
	// ready, killed ones too (ProcessFailures).
	procs []*gatewayProc
}

type natsServer struct {
	i           int
	port, route int
	dir         string

	mu sync.Mutex // guards ns
	ns *server.Server
}

// Gateway is one gateway: a router serving WebSocket and HTTP on a
// loopback port, on a JetStream engine connected through Links[j] to NATS
// server j; or the gateway command in a child process, connected the same
// way, when Options.Processes lists it.
type Gateway struct {
	I     int
	Addr  string // host:port of its HTTP and WebSocket listener
	Links []*Proxy
	Eng   *jsengine.Engine // nil for a process
	proc  *gatewayProc     // the process, or nil

	rt     *router.Router
	srv    *http.Server
	conns  *connSet // its clients' connections (see Cluster.KillGateway)
	done   chan struct{}
	killed bool // by KillGateway, which stopped it; set before it is shared again

}

// WSURL is the gateway's WebSocket URL.
func (g *Gateway) WSURL() string { return "ws://" + g.Addr + "/v1/ws" }

// NewCluster starts the servers and gateways and returns once the NATS
// cluster has a JetStream leader and every gateway's engine is up.
func NewCluster(ctx context.Context, opts Options) (*Cluster, error) {
	c, err := newCluster(ctx, opts)
	if err != nil {
		c.Close()
		return c, err
	}
	return c, nil
}

func newCluster(ctx context.Context, opts Options) (c *Cluster, err error) {
	if opts.Servers == 0 {
		opts.Servers = 3
	}
	if opts.Gateways == 0 {
		opts.Gateways = 3
	}
	if opts.Prefix == "" {
		opts.Prefix = "faults"
	}
	if opts.PingInterval == 0 {
		opts.PingInterval = time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	c = &Cluster{opts: opts, name: fmt.Sprintf("faults-%d", os.Getpid())}
	if len(opts.Processes) > 0 && opts.Binary == "" {
		return c, errors.New("faults: gateway processes need Options.Binary (BuildGateway)")
	}
	ports, err := freePorts(2 * opts.Servers)
	if err != nil {
		return c, err
	}
	for i := range opts.Servers {
		dir, err := os.MkdirTemp("", "switchyard-faults-")
		if err != nil {
			return c, err
		}
		c.servers = append(c.servers, &natsServer{i: i, port: ports[2*i], route: ports[2*i+1], dir: dir})
	}
	c.routes = make([][]*Proxy, opts.Servers)
	for i := range c.servers {
		c.routes[i] = make([]*Proxy, opts.Servers)
		for j, s := range c.servers {
			if i == j {
				continue
			}
			p, err := NewProxy(fmt.Sprintf("route %d->%d", i, j), fmt.Sprintf("127.0.0.1:%d", s.route))
			if err != nil {
				return c, err
			}
			c.routes[i][j] = p
		}
	}
	// Start them together: a clustered server's JetStream waits for its
	// peers.
	errs := make([]error, len(c.servers))
	var wg sync.WaitGroup
	for i := range c.servers {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = c.Start(i) }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return c, err
	}
	for g := range opts.Gateways {
		gw, err := c.startGateway(ctx, g, "")
		if err != nil {
			return c, err
		}
		c.gateways = append(c.gateways, gw)
	}
	return c, nil
}

func freePorts(n int) ([]int, error) {
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
			return nil, err
		}
		ls = append(ls, l)
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

// Start starts NATS server i on its ports and store (it must be stopped).
func (c *Cluster) Start(i int) error {
	s := c.servers[i]
	var routes []*url.URL
	for j := range c.servers {
		if j != i {
			routes = append(routes, &url.URL{Scheme: "nats", Host: c.routes[i][j].Addr()})
		}
	}
	opts := &server.Options{
		ServerName:   fmt.Sprintf("faults-%d", i),
		Host:         "127.0.0.1",
		Port:         s.port,
		JetStream:    true,
		StoreDir:     s.dir,
		NoLog:        os.Getenv("SYTEST_LOG") == "",
		NoSigs:       true,
		PingInterval: c.opts.PingInterval,
		MaxPingsOut:  2,
		Cluster: server.ClusterOpts{
			Name: c.name, Host: "127.0.0.1", Port: s.route,
			// Clients are given no other server's address (they would
			// bypass their proxies), and the servers learn no route
			// address but the proxies they are given: a gossiped one
			// is a closed port.
			NoAdvertise: true,
			Advertise:   "127.0.0.1:1",
		},
		Routes: routes,
	}
	ns, err := startServer(opts, serverReady, serverStarts)
	if err != nil {
		return fmt.Errorf("faults: nats server %d: %w", i, err)
	}
	s.mu.Lock()
	s.ns = ns
	s.mu.Unlock()
	return nil
}

// Kill stops NATS server i without a goodbye: the connections through its
// proxies are reset first, then it shuts down; its store stays for Start.
func (c *Cluster) Kill(i int) {
	for _, p := range c.serverLinks(i) {
		p.Reset()
	}
	s := c.servers[i]
	s.mu.Lock()
	ns := s.ns
	s.ns = nil
	s.mu.Unlock()
	if ns != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
	}
}

// Server is NATS server i while it runs, else nil.
func (c *Cluster) Server(i int) *server.Server {
	s := c.servers[i]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ns
}

// serverLinks is every proxy that carries server i's traffic: its routes
// both ways and the gateways' links to it.
func (c *Cluster) serverLinks(i int) []*Proxy {
	var ps []*Proxy
	for j := range c.servers {
		if j != i {
			ps = append(ps, c.routes[i][j], c.routes[j][i])
		}
	}
	for _, g := range c.gateways {
		ps = append(ps, g.Links[i])
	}
	return ps
}

// Pause cuts every link of server i both ways (see the package doc: it
// stands for SIGSTOP); Resume heals them.
func (c *Cluster) Pause(i int) {
	for _, p := range c.serverLinks(i) {
		p.CutBoth()
	}
}

// Resume heals every link of server i.
func (c *Cluster) Resume(i int) {
	for _, p := range c.serverLinks(i) {
		p.Heal()
	}
}

// Partition cuts the routes between the servers of side and the others
// both ways; gateways' links are untouched.
func (c *Cluster) Partition(side ...int) {
	in := map[int]bool{}
	for _, i := range side {
		in[i] = true
	}
	for i := range c.servers {
		for j := range c.servers {
			if i != j && in[i] != in[j] {
				c.routes[i][j].CutBoth()
			}
		}
	}
}

// HealRoutes heals every route.
func (c *Cluster) HealRoutes() {
	for i := range c.routes {
		for _, p := range c.routes[i] {
			if p != nil {
				p.Heal()
			}
		}
	}
}

// Isolate cuts gateway g off every NATS server, both ways; its clients'
// connections to it are untouched.
func (c *Cluster) Isolate(g int) {
	for _, p := range c.gateways[g].Links {
		p.CutBoth()
	}
}

// Rejoin heals gateway g's links.
func (c *Cluster) Rejoin(g int) {
	for _, p := range c.gateways[g].Links {
		p.Heal()
	}
}

// SetLatency sets a one-way latency on every link (routes and gateways'),
// both directions; zero heals.
func (c *Cluster) SetLatency(d time.Duration) {
	for _, p := range c.allLinks() {
		p.Set(Up, Faults{Latency: d})
		p.Set(Down, Faults{Latency: d})
	}
}

func (c *Cluster) allLinks() []*Proxy {
	var ps []*Proxy
	for i := range c.routes {
		for _, p := range c.routes[i] {
			if p != nil {
				ps = append(ps, p)
			}
		}
	}
	for _, g := range c.gateways {
		ps = append(ps, g.Links...)
	}
	return ps
}

// Gateways is the gateways. A gateway restarted later
// (RestartGateway) takes its index in the slice returned.
func (c *Cluster) Gateways() []*Gateway {
	c.gmu.Lock()
	defer c.gmu.Unlock()
	return c.gateways
}

// Leader is the index of the server leading the stream in the global
// account, or -1 when none does.
func (c *Cluster) Leader(stream string) int {
	for i := range c.servers {
		if ns := c.Server(i); ns != nil && ns.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
			return i
		}
	}
	return -1
}

// RecordStream is the engine's log stream.
func (c *Cluster) RecordStream() string { return c.opts.Prefix + "_rec" }

// WaitHealthy waits until every server runs, is routed to every other and
// JetStream has a leader that knows every peer; the servers have no event
// for it, so it looks every 50ms.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		ready, leader := true, false
		for i := range c.servers {
			ns := c.Server(i)
			if ns == nil || ns.NumRoutes() < len(c.servers)-1 || !ns.JetStreamIsCurrent() {
				ready = false
				continue
			}
			if ns.JetStreamIsLeader() && len(ns.JetStreamClusterPeers()) >= len(c.servers) {
				leader = true
			}
		}
		if ready && leader {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("faults: nats cluster not healthy: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// startGateway starts gateway g listening on addr (any free port when
// empty).
func (c *Cluster) startGateway(ctx context.Context, g int, addr string) (*Gateway, error) {
	gw := &Gateway{I: g, done: make(chan struct{}), conns: &connSet{m: map[net.Conn]struct{}{}}}
	var urls []string
	for i, s := range c.servers {
		p, err := NewProxy(fmt.Sprintf("gateway %d->nats %d", g, i), fmt.Sprintf("127.0.0.1:%d", s.port))
		if err != nil {
			gw.closeLinks()
			return nil, err
		}
		gw.Links = append(gw.Links, p)
	}
	// Gateway g prefers server g, as an operator lists the nearest first.
	for k := range gw.Links {
		urls = append(urls, "nats://"+gw.Links[(g+k)%len(gw.Links)].Addr())
	}
	if slices.Contains(c.opts.Processes, g) {
		if err := c.startProcessGateway(ctx, gw, urls, addr); err != nil {
			gw.closeLinks()
			return nil, err
		}
		return gw, nil
	}
	// The live bucket's TTL is its creator's: with a gateway process,
	// the process's (see processMemberTTL).
	ttl := 3 * time.Second
	if len(c.opts.Processes) > 0 {
		ttl = processMemberTTL
	}
	logger := c.opts.Logger.With("gateway", g)
	// A cluster just formed may still be placing its first streams (an
	// election right after the meta leader's): an engine whose start
	// times out or finds NATS unavailable is started again, a second
	// later, three times at most.
	var eng *jsengine.Engine
	var err error
	for try := 0; try < 3 && (try == 0 || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, engine.ErrUnavailable)); try++ {
		if try > 0 && !pause(ctx, time.Second) {
			break
		}
		ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
		eng, err = jsengine.New(ectx, jsengine.Options{URL: strings.Join(urls, ","), Prefix: c.opts.Prefix,
			Replicas: len(c.servers), Logger: logger, MemberTTL: ttl,
			Policy: engine.GroupPolicy{AckTimeout: 3 * time.Second, MaxAttempts: 5,
				BackoffMin: 100 * time.Millisecond, BackoffMax: 500 * time.Millisecond}})
		cancel()
	}
	if err != nil {
		gw.closeLinks()
		return nil, fmt.Errorf("faults: gateway %d: engine: %w", g, err)
	}
	gw.Eng = eng
	rt, err := router.New(router.Options{Engine: eng, Registry: prometheus.NewRegistry(), StatsInterval: -1, Logger: logger})
	if err != nil {
		_ = eng.Close(ctx)
		gw.closeLinks()
		return nil, fmt.Errorf("faults: gateway %d: router: %w", g, err)
	}
	ln, err := net.Listen("tcp", cmp.Or(addr, "127.0.0.1:0"))
	if err != nil {
		_ = rt.Shutdown(ctx)
		_ = eng.Close(ctx)
		gw.closeLinks()
		return nil, err
	}
	gw.rt, gw.srv, gw.Addr = rt, rt.NewServer(router.ServerOptions{}), ln.Addr().String()
	ln = rt.Listener(&trackListener{Listener: ln, set: gw.conns})
	go func() { // exits when stop closes the server
		defer close(gw.done)
		_ = gw.srv.Serve(ln)
	}()
	return gw, nil
}

func (gw *Gateway) closeLinks() {
	for _, p := range gw.Links {
		p.Close()
	}
}

// stop shuts the gateway down: sessions, HTTP server, engine, links; a
// process is killed with SIGKILL and reaped. A killed gateway
// (KillGateway, Kill9Gateway) is stopped already.
func (gw *Gateway) stop() {
	if gw.killed {
		return
	}
	if gw.proc != nil {
		_ = gw.proc.stop() // a process that ended on its own is reported by ProcessFailures
		gw.closeLinks()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_ = gw.rt.Shutdown(ctx)
	_ = gw.srv.Shutdown(ctx)
	<-gw.done
	// Heal first so that the engine's goodbyes are not held.
	for _, p := range gw.Links {
		p.Heal()
	}
	_ = gw.Eng.Close(ctx)
	gw.closeLinks()
}

// Close stops the gateways, the servers and the proxies, and removes the
// stores.
func (c *Cluster) Close() {
	c.gmu.Lock()
	gws := append([]*Gateway(nil), c.gateways...)
	c.gmu.Unlock()
	for _, g := range gws {
		g.stop()
	}
	for i := range c.servers {
		c.Kill(i)
	}
	for i := range c.routes {
		for _, p := range c.routes[i] {
			if p != nil {
				p.Close()
			}
		}
	}
	for _, s := range c.servers {
		os.RemoveAll(s.dir)
	}
}

// How long a NATS server of the cluster gets to be ready, and how many
// times it is started before its Start fails: on a loaded machine (CI runs
// every package at once) a start can be slow, and a port freePorts chose
// can be taken meanwhile as another connection's local port, then given
// back.
const (
	serverReady  = 20 * time.Second
	serverStarts = 3
)

// startServer starts a NATS server with opts, up to starts times, each
// given ready to accept connections; a failure says which of its ports
// another socket holds, if one does.
func startServer(opts *server.Options, ready time.Duration, starts int) (*server.Server, error) {
	var err error
	for range starts {
		var ns *server.Server
		if ns, err = server.NewServer(opts); err != nil {
			return nil, err
		}
		if os.Getenv("SYTEST_LOG") != "" {
			ns.ConfigureLogger()
		}
		ns.Start()
		if ns.ReadyForConnections(ready) {
			return ns, nil
		}
		ns.Shutdown()
		ns.WaitForShutdown()
		err = fmt.Errorf("not ready after %v%s", ready, portsInUse(opts.Port, opts.Cluster.Port))
	}
	return nil, fmt.Errorf("%w (%d starts)", err, starts)
}

// portsInUse names those of ports another socket holds on 127.0.0.1.
func portsInUse(ports ...int) string {
	var held string
	for _, p := range ports {
		if p <= 0 {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			held += fmt.Sprintf(", port %d in use", p)
			continue
		}
		l.Close()
	}
	return held
}
