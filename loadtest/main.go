// Command loadtest drives a Switchyard gateway with WebSocket publishers and
// subscribers and reports what arrived and how fast.
//
//	go run ./loadtest <scenario> [flags]
//
// Scenarios:
//
//	fanout    N subscribers on one topic, publishers at a total rate R
//	wildcard  N subscribers over P patterns across T topics
//	groups    M members of one consumer group acking, a share nacking
//	          first attempts and a share stalling (never acking), with
//	          the group window --max-in-flight; reports acked records/s,
//	          publish-to-ack latency, records lost and records acked
//	          then delivered again
//	slow      N subscribers on one topic, a share of them reading slowly,
//	          under the --on-full drop policy
//	connect   N connections opened as fast as possible
//	idle      N connections held open, one subscription each, with a
//	          trickle of publishes
//	smoke     a few seconds, a few subscribers (exact and wildcard
//	          patterns on one topic); exits non-zero on any loss or
//	          duplicate. Used by CI.
//	soak      mixed load for --duration (default 60s): WebSocket and HTTP
//	          publishers with keys over several topics; literal and
//	          wildcard subscribers, some slow under drop_old; consumer-group
//	          members that ack and sometimes nack or disconnect mid-ack;
//	          subscribers that disconnect and resume from their positions.
//	          It samples the gateway's goroutines and heap and exits
//	          non-zero when an invariant fails (see soak.go). Used by CI.
//	          With --hostile, hostile clients run beside it (oversized
//	          errors, huge filters and ids, unfinished fragments, stalled
//	          readers, topic spray, trickling HTTP, cross-site POSTs) and
//	          the gateway's peak heap is bounded too (see hostile.go).
//	torture   a seeded, randomised run of hostile and ordinary clients
//	          against an embedded gateway that checks the delivery,
//	          stall, group, baseline and liveness promises and prints a
//	          verdict per invariant (see torture.go; its own flags:
//	          go run ./loadtest torture -h). Used by CI.
//
// The generator refuses gateways that are not on a loopback address. Every
// loop is bounded by --duration (and --messages), so a run ends by itself;
// after publishing stops it waits up to --drain for deliveries in flight.
//
// Publishers embed their send time in the payload (a JSON string starting
// with "T" and 19 digits of unix nanoseconds); subscribers read it by byte
// search from a reused buffer, without decoding JSON, so the generator
// itself stays cheap. End-to-end latency goes into HDR histograms.
//
// With --inprocess the generator starts an embedded gateway (the router on
// the in-memory engine) on a loopback port; this is the only part of the
// generator that imports the gateway's packages, and its CPU time is then
// part of the generator's. Use --server-pid with an external gateway to
// report its CPU seconds, CPU per delivery and peak RSS from /proc.
//
// A progress line goes to stderr every second; the report goes to stdout,
// as a table or, with --json, as JSON.
//
// The generator targets Linux: it reads /proc for --server-pid, and slow
// subscribers shrink their socket receive buffer (SO_RCVBUF) so that the
// gateway's queue, not the kernel, absorbs their backlog. After publishing
// stops, slow subscribers read at full speed, so what the gateway dropped
// is reported as gaps rather than left as a backlog.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"
)

// config holds the flags of a run.
type config struct {
	rounds      int // dashboard: rounds of each kind (dashboard.go)
	scenario    string
	target      string // targetSwitchyard or targetNATS
	lean        bool   // subscribers connect with ?envelope=lean
	url         string
	subURLs     []string // subscribers spread over url and these
	subURLsRaw  string
	httpURL     string
	duration    time.Duration
	drain       time.Duration
	rate        float64
	messages    int64
	topicPrefix string // the run's topic prefix; empty: lt.<time>
	subscribers int
	publishers  int
	size        int
	window      int
	topics      int
	patterns    int
	members     int
	partitions  int
	maxInFlight int
	nackShare   float64
	stallShare  float64
	slowShare   float64
	slowDelay   time.Duration
	onFull      string
	ackTimeout  time.Duration
	concurrency int
	serverPID   int
	jsonOut     bool
	inprocess   bool
	maxConns    int
	quiet       bool
	cpuProfile  string
	ackBatch    bool
	coalesce    bool

	// --publish-over (publishover.go)
	overRaw   string
	over      []string // publish modes, one phase each
	httpConns int
	batch     int

	// soak
	queueMessages   int
	churners        int
	sampleInterval  time.Duration
	goroutineSlack  int
	maxHeapGrowthMB int
	hostile         bool
	hostileHeapMB   int
	hostileLimits   bool

	mqttConfig // --target mqtt (mqtt_compare.go)
}

var scenarios = []string{"fanout", "wildcard", "groups", "slow", "connect", "idle", "smoke", "soak", "dashboard"}

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command; it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "torture" {
		ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
		defer stop()
		return tortureCommand(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "chart" {
		if err := chartCommand(args[1:], stdout); err != nil {
			fmt.Fprintln(stderr, "loadtest chart:", err)
			return 1
		}
		return 0
	}
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	if cfg.scenario == "dashboard" {
		if err := dashboardCommand(ctx, cfg, stdout); err != nil {
			fmt.Fprintln(stderr, "loadtest:", err)
			return 1
		}
		return 0
	}
	if cfg.target == targetMQTT {
		return mqttCommand(ctx, cfg, stdout, stderr)
	}
	rep, err := execute(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 1
	}
	if cfg.jsonOut {
		_ = writeJSON(stdout, rep)
	} else {
		writeTable(stdout, rep)
	}
	if rep.Soak != nil && len(rep.Soak.Violations) > 0 {
		fmt.Fprintf(stderr, "loadtest: soak failed: %d invariant(s) violated:\n", len(rep.Soak.Violations))
		for _, v := range rep.Soak.Violations {
			fmt.Fprintln(stderr, "  -", v)
		}
		return 1
	}
	if cfg.scenario == "smoke" && (rep.Lost != 0 || rep.Duplicates != 0 || rep.Delivered != rep.Expected || rep.Sent == 0 || rep.ConnectErrors != 0) {
		fmt.Fprintf(stderr, "loadtest: smoke failed: sent=%d expected=%d delivered=%d lost=%d duplicates=%d\n",
			rep.Sent, rep.Expected, rep.Delivered, rep.Lost, rep.Duplicates)
		return 1
	}
	return 0
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: go run ./loadtest <%s> [flags]\n", strings.Join(scenarios, "|"))
		fs.PrintDefaults()
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help") {
			fs.Usage()
			return nil, flag.ErrHelp
		}
		fs.Usage()
		return nil, errors.New("missing scenario")
	}
	cfg := &config{scenario: args[0]}
	known := false
	for _, s := range scenarios {
		known = known || s == cfg.scenario
	}
	if !known {
		return nil, fmt.Errorf("unknown scenario %q (want one of %s)", cfg.scenario, strings.Join(scenarios, ", "))
	}
	d := defaultsFor(cfg.scenario)
	fs.StringVar(&cfg.url, "url", "ws://127.0.0.1:8080", "gateway WebSocket URL (loopback only); the path defaults to /v1/ws (--target switchyard)")
	fs.StringVar(&cfg.target, "target", targetSwitchyard, "what --url is: switchyard, nats for a NATS server's WebSocket listener (fanout and idle; see nats.go), or mqtt: the gateway's native and MQTT-over-WebSocket subscribers and Mosquitto's, in phases (fanout and idle; see mqtt_compare.go)")
	mqttFlags(fs, &cfg.mqttConfig)
	fs.BoolVar(&cfg.lean, "lean", false, "subscribers connect with ?envelope=lean: messages without time, and without pattern on literal subscriptions (--target switchyard)")
	fs.StringVar(&cfg.subURLsRaw, "sub-urls", "", "comma-separated WebSocket URLs of further gateway nodes; subscribers are spread round-robin over --url and these (publishers stay on --url)")
	fs.StringVar(&cfg.httpURL, "http", "", "gateway HTTP base URL (default: derived from --url)")
	fs.DurationVar(&cfg.duration, "duration", d.duration, "how long to publish (or hold connections)")
	fs.DurationVar(&cfg.drain, "drain", d.drain, "how long to wait for deliveries after publishing stops")
	fs.Float64Var(&cfg.rate, "rate", d.rate, "publishes per second over all publishers; 0: as fast as the window allows")
	fs.StringVar(&cfg.topicPrefix, "topic-prefix", "", "prefix of the run's topics (default lt.<start time>); two loadtests given the same one publish into the same topics, e.g. through two gateway nodes")
	fs.Int64Var(&cfg.messages, "messages", 0, "stop after this many publishes; 0: no count bound besides --duration")
	fs.IntVar(&cfg.subscribers, "subscribers", d.subscribers, "subscribers (connections, for connect and idle)")
	fs.IntVar(&cfg.publishers, "publishers", 1, "publishing connections")
	fs.IntVar(&cfg.size, "size", d.size, fmt.Sprintf("payload bytes (at least %d)", minPayload))
	fs.IntVar(&cfg.window, "window", 64, "outstanding publishes per publisher")
	fs.StringVar(&cfg.overRaw, "publish-over", overWS, "how the plain scenarios publish: ws, http (one record per POST /v1/publish), http-batch (--batch records per request), or a comma-separated list run as phases against the same subscribers (see publishover.go)")
	fs.IntVar(&cfg.httpConns, "http-conns", 8, "keep-alive connections of the http and http-batch publishers")
	fs.IntVar(&cfg.batch, "batch", 100, "records per request of the http-batch publishers (1 to 1000)")
	fs.IntVar(&cfg.topics, "topics", d.topics, "topics (wildcard, idle; soak: plain topics besides the group topic)")
	fs.IntVar(&cfg.patterns, "patterns", 4, "patterns (wildcard); the last one is a '#' over every topic")
	fs.IntVar(&cfg.members, "members", 4, "group members (groups, soak)")
	fs.IntVar(&cfg.partitions, "partitions", 0, "partitions of the groups topic; 0: --members")
	fs.IntVar(&cfg.maxInFlight, "max-in-flight", 0, "the group's window per partition, sent as max_in_flight on subscribe (groups); 0: the gateway's default")
	fs.BoolVar(&cfg.ackBatch, "ack-batch", true, `group members ack the records of each received frame in one ack per partition ("offsets"); false: one ack frame per record (groups)`)
	fs.BoolVar(&cfg.coalesce, "coalesce-writes", true, "publishers and members write the frames queued meanwhile in one syscall (groups; see coalesce.go); false: one write per frame")
	fs.Float64Var(&cfg.nackShare, "nack-share", d.nackShare, "share of first deliveries a member nacks (groups, soak)")
	fs.Float64Var(&cfg.stallShare, "stall-share", 0, "share of members that never ack until publishing stops (groups)")
	fs.Float64Var(&cfg.slowShare, "slow-share", d.slowShare, "share of subscribers that read slowly (slow, soak)")
	fs.DurationVar(&cfg.slowDelay, "slow-delay", d.slowDelay, "pause per message of a slow subscriber (slow, soak)")
	fs.StringVar(&cfg.onFull, "on-full", "", `drop policy of plain subscriptions: drop_old, drop_new or disconnect (default: the gateway's)`)
	fs.DurationVar(&cfg.ackTimeout, "ack-timeout", 2*time.Second, "group ack timeout of the --inprocess gateway")
	fs.IntVar(&cfg.concurrency, "concurrency", 64, "connections dialed at once")
	fs.IntVar(&cfg.serverPID, "server-pid", 0, "gateway process id, to report its CPU time and peak RSS from /proc")
	fs.BoolVar(&cfg.jsonOut, "json", false, "print the report as JSON")
	fs.BoolVar(&cfg.inprocess, "inprocess", false, "start an embedded gateway in this process and test it")
	fs.IntVar(&cfg.maxConns, "max-conns", 20000, "refuse runs that would open more connections than this")
	fs.BoolVar(&cfg.quiet, "quiet", false, "no progress lines")
	fs.StringVar(&cfg.cpuProfile, "cpu-profile", "", "write a CPU profile of this process (the generator and, with --inprocess, the gateway) to this file; empty: none")
	fs.IntVar(&cfg.queueMessages, "queue-messages", d.queueMessages, "outbound queue bound per session of the --inprocess gateway; 0: the gateway's default (1024)")
	fs.IntVar(&cfg.churners, "churners", 4, "subscribers that disconnect and resume from their positions (soak)")
	fs.DurationVar(&cfg.sampleInterval, "sample-interval", 5*time.Second, "how often the gateway's goroutines and memory are sampled (soak)")
	fs.IntVar(&cfg.goroutineSlack, "goroutine-slack", 10, "goroutines the gateway may keep above its baseline once the load has stopped (soak)")
	fs.IntVar(&cfg.maxHeapGrowthMB, "max-heap-growth-mib", 64, "heap growth in MiB allowed from the first sample after warm-up to the last (soak)")
	fs.IntVar(&cfg.rounds, "rounds", 3, "rounds of plain and of delta subscriptions, alternating (dashboard); rounds of the phases (--target mqtt)")
	fs.BoolVar(&cfg.hostile, "hostile", false, "run hostile clients beside the load (soak; see hostile.go)")
	fs.BoolVar(&cfg.hostileLimits, "hostile-require-limits", true, "with --hostile: fail unless every targeted limit was met; a run of a few seconds under the race detector may end before the slowest one is (soak)")
	fs.IntVar(&cfg.hostileHeapMB, "hostile-heap-mib", 128, "with --hostile: peak live heap in MiB allowed above the baseline during the load (soak)")
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return cfg, cfg.validate()
}

type scenarioDefaults struct {
	duration    time.Duration
	rate        float64
	subscribers int
	topics      int
	size        int
	slowDelay   time.Duration
	drain       time.Duration
	slowShare   float64
	nackShare   float64

	queueMessages int
}

func defaultsFor(s string) scenarioDefaults {
	d := scenarioDefaults{duration: 10 * time.Second, rate: 1000, subscribers: 100, topics: 16,
		size: 64, slowDelay: 2 * time.Millisecond, drain: 5 * time.Second, slowShare: 0.1, nackShare: 0.1}
	switch s {
	case "smoke":
		d.duration, d.rate, d.subscribers = 2*time.Second, 200, 4
	case "slow":
		// Large enough payloads fill the slow readers' socket buffers
		// within seconds, so the gateway's queue (not the kernel) has to
		// act.
		d.rate, d.size, d.slowDelay = 2000, 1024, 10*time.Millisecond
	case "connect":
		d.subscribers = 1000
	case "idle":
		d.subscribers, d.rate = 1000, 10
	case "dashboard":
		d.duration, d.rate, d.subscribers, d.drain = 5*time.Second, 200, 200, 10*time.Second
	case "soak":
		// See soak.go for why these values.
		d.duration, d.rate, d.subscribers, d.size, d.topics = 60*time.Second, 500, 12, 256, 4
		d.slowDelay, d.slowShare, d.nackShare, d.drain = 5*time.Millisecond, 0.25, 0.05, 20*time.Second
		d.queueMessages = 256
	}
	return d
}

func (c *config) validate() error {
	switch {
	case c.duration <= 0:
		return errors.New("--duration must be positive")
	case c.rate < 0:
		return errors.New("--rate must not be negative")
	case c.subscribers < 0 || c.publishers < 1 || c.window < 1 || c.concurrency < 1:
		return errors.New("--subscribers must be >= 0; --publishers, --window and --concurrency >= 1")
	case c.size < minPayload:
		return fmt.Errorf("--size must be at least %d", minPayload)
	case c.topics < 1 || c.patterns < 1 || c.members < 1 || c.churners < 0 || c.sampleInterval <= 0 || c.queueMessages < 0:
		return errors.New("--topics, --patterns and --members must be >= 1, --churners and --queue-messages >= 0, --sample-interval positive")
	case c.maxInFlight < 0 || c.maxInFlight > 1000:
		return errors.New("--max-in-flight must be 0 to 1000")
	case c.nackShare < 0 || c.nackShare > 1 || c.stallShare < 0 || c.stallShare >= 1 || c.slowShare < 0 || c.slowShare > 1:
		return errors.New("--nack-share and --slow-share must be in [0,1], --stall-share in [0,1)")
	}
	over, err := parsePublishOver(c.overRaw)
	if err != nil {
		return err
	}
	c.over = over
	switch {
	case c.httpConns < 1 || c.batch < 1 || c.batch > 1000:
		return errors.New("--http-conns must be >= 1, --batch 1 to 1000")
	case c.overRaw != overWS && (c.target != targetSwitchyard || !plainScenario(c.scenario)):
		return errors.New("--publish-over other than ws needs --target switchyard and a plain scenario (fanout, wildcard, slow, idle, smoke)")
	}
	switch c.onFull {
	case "", "drop_old", "drop_new", "disconnect":
	default:
		return fmt.Errorf("--on-full %q: want drop_old, drop_new or disconnect", c.onFull)
	}
	if err := c.checkTarget(); err != nil {
		return err
	}
	if n := c.connections(); n > c.maxConns {
		return fmt.Errorf("this run needs %d connections, over --max-conns %d", n, c.maxConns)
	}
	return nil
}

// plainScenario reports whether s publishes to plain subscribers
// (runPlain).
func plainScenario(s string) bool {
	switch s {
	case "fanout", "wildcard", "slow", "idle", "smoke":
		return true
	}
	return false
}

// connections is how many connections the run opens.
func (c *config) connections() int {
	switch c.scenario {
	case "connect":
		return c.subscribers
	case "groups":
		return c.members + c.publishers
	case "soak":
		n := c.subscribers + c.churners + c.members + c.publishers
		if c.hostile {
			n += hostileConns
		}
		return n
	}
	return c.subscribers + c.publishers
}

// execute resolves the gateway (starting one with --inprocess), checks that
// it is on loopback and runs the scenario.
func execute(ctx context.Context, cfg *config, stderr io.Writer) (*Report, error) {
	if cfg.cpuProfile != "" {
		stop, err := startCPUProfile(cfg.cpuProfile)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	if cfg.inprocess {
		gw, err := startInProcess(cfg)
		if err != nil {
			return nil, err
		}
		stopped := false
		defer func() {
			if !stopped {
				_ = gw.stop()
			}
		}()
		cfg.url, cfg.httpURL = gw.wsURL, gw.httpURL
		if cfg.scenario == "soak" {
			// The soak checks that the embedded gateway stops cleanly and
			// logged no warning or error.
			rep, err := runResolved(ctx, cfg, stderr)
			stopped = true
			stopErr := gw.stop()
			if err != nil {
				return nil, err
			}
			rep.Soak.checkInProcess(stopErr, gw.problems)
			return rep, nil
		}
	}
	return runResolved(ctx, cfg, stderr)
}

// runResolved checks the URLs and runs the scenario.
func runResolved(ctx context.Context, cfg *config, stderr io.Writer) (*Report, error) {
	wsu, httpu, err := resolveURLs(ctx, cfg.url, cfg.httpURL, cfg.target == targetSwitchyard)
	if err != nil {
		return nil, err
	}
	cfg.url, cfg.httpURL = wsu, httpu
	cfg.subURLs = []string{wsu}
	for _, raw := range strings.Split(cfg.subURLsRaw, ",") {
		if raw = strings.TrimSpace(raw); raw == "" {
			continue
		}
		u, _, err := resolveURLs(ctx, raw, "", cfg.target == targetSwitchyard)
		if err != nil {
			return nil, fmt.Errorf("--sub-urls: %w", err)
		}
		cfg.subURLs = append(cfg.subURLs, u)
	}
	if cfg.quiet {
		stderr = io.Discard
	}
	r := newRunner(cfg, stderr)
	return r.run(ctx)
}

// resolveURLs normalizes the WebSocket URL (with gatewayPath, an empty path
// becomes /v1/ws), derives the HTTP one and refuses hosts that are not
// loopback.
func resolveURLs(ctx context.Context, wsRaw, httpRaw string, gatewayPath bool) (string, string, error) {
	u, err := url.Parse(wsRaw)
	if err != nil {
		return "", "", fmt.Errorf("--url: %w", err)
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", "", fmt.Errorf("--url %q: scheme must be ws or wss", wsRaw)
	}
	if gatewayPath && (u.Path == "" || u.Path == "/") {
		u.Path = "/v1/ws"
	}
	if err := checkLoopback(ctx, u.Hostname()); err != nil {
		return "", "", err
	}
	if httpRaw == "" {
		h := url.URL{Scheme: "http", Host: u.Host}
		if u.Scheme == "wss" {
			h.Scheme = "https"
		}
		httpRaw = h.String()
	} else {
		hu, err := url.Parse(httpRaw)
		if err != nil {
			return "", "", fmt.Errorf("--http: %w", err)
		}
		if err := checkLoopback(ctx, hu.Hostname()); err != nil {
			return "", "", err
		}
	}
	return u.String(), strings.TrimRight(httpRaw, "/"), nil
}

// checkLoopback fails unless every address host resolves to is loopback.
func checkLoopback(ctx context.Context, host string) error {
	if host == "" {
		return errors.New("gateway URL has no host")
	}
	if ip := net.ParseIP(host); ip != nil {
		if !ip.IsLoopback() {
			return fmt.Errorf("refusing %s: the load generator only targets loopback addresses", host)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return fmt.Errorf("resolving %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("%s resolves to no address", host)
	}
	for _, a := range addrs {
		if !a.IP.IsLoopback() {
			return fmt.Errorf("refusing %s: it resolves to %s, which is not loopback", host, a.IP)
		}
	}
	return nil
}

func itoa(n int) string { return strconv.Itoa(n) }
