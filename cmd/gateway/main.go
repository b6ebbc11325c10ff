// Command gateway runs a Switchyard WebSocket pub/sub gateway.
//
// Every setting is a flag, an environment variable (SWITCHYARD_ plus the
// flag name in upper case with '-' as '_') and a key of the optional YAML
// config file (--config), in that order of precedence. Run with -h for the
// list.
package main

import (
	"context"
	"crypto"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/session"
	"github.com/switchyard/switchyard/web"
)

// version is the gateway's version, set at build time with
// -ldflags "-X main.version=v1.2.3"; empty means the module version from
// the build information (router.BuildVersion).
var version = ""

// gatewayVersion returns version, or the build information's.
func gatewayVersion() string {
	if version != "" {
		return version
	}
	return router.BuildVersion()
}

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println("switchyard gateway", gatewayVersion())
		return
	}
	if len(os.Args) == 3 && os.Args[1] == "--healthcheck" {
		// For container health checks in images without a shell or curl.
		if err := healthcheck(os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, "gateway: healthcheck:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "gateway:", err)
		os.Exit(1)
	}
}

// config is every setting of the gateway.
type config struct {
	Addr         string
	Engine       string
	NATSURL      string
	NATSPrefix   string
	DataDir      string
	EmbedListen  string
	NATSReplicas int
	DataSync     string
	LogLevel     string
	LogJSON      bool

	Strict            bool
	Partitions        int
	RetentionMessages int64
	RetentionAge      time.Duration
	OnFull            string
	BlockTimeout      time.Duration

	AckTimeout   time.Duration
	MaxAttempts  int
	BackoffMin   time.Duration
	BackoffMax   time.Duration
	MaxInFlight  int
	DedupeWindow time.Duration
	GroupIdleTTL time.Duration
	DeadLetters  deadLetterBounds

	QueueMessages        int
	WriteDelay           time.Duration
	WriteDelayFrames     int
	MaxFrameBytes        int64
	MaxMessageBytes      int
	MaxSubscriptions     int
	Groups               router.GroupBounds
	MaxLast              int
	SSE                  router.SSEOptions
	Compression          onOff
	PublishRate          float64
	PublishPipeline      int
	PublishPipelineBytes int
	AllowedOrigins       string
	PingInterval         time.Duration
	StatsInterval        time.Duration
	ShutdownTimeout      time.Duration
	DebugAddr            string
	HandshakeTimeout     time.Duration
	ReadTimeout          time.Duration
	WriteTimeout         time.Duration
	IdleTimeout          time.Duration
	Wire                 wireConfig

	JWTHMACSecret       string
	JWTHMACSecretFile   string
	JWTPublicKey        string
	JWTRefreshLead      time.Duration
	JWTAudience         string
	JWTIssuer           string
	JWTJWKSURL          string
	JWTJWKSFile         string
	JWTJWKSRefresh      time.Duration
	JWTClaimsPrefix     string
	JWTClaims           string
	HookURL             string
	MaxPresencePerTopic int
	PresenceJoinRate    float64
	PresenceJoinBurst   int
	PresenceQueueBytes  int
	Hooks               string
	HookTimeout         time.Duration
	HookFailOpen        bool
	HookHeaders         string
	HookCookies         string
	HookMaxConcurrent   int
	HookMaxConcurrentIP int
	HookCacheEntries    int
	HookCacheBytes      int
	AdminKey            string
	AdminKeyFile        string
	AllowAnonymous      bool
	AnonymousSubscribe  string
	AnonymousPublish    string
	MaxConnections      int
	MaxConnectionsPerIP int
	ConnectRatePerIP    float64
	MaxTopics           int
	MaxPartitions       int
	HTTPPublishRate     float64
	TrustedProxies      string

	Version bool
}

func newFlagSet(cfg *config, out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(out)
	d := engine.Defaults
	p := engine.DefaultGroupPolicy
	fs.String("config", "", "YAML file of settings (keys are the flag names)")
	fs.StringVar(&cfg.Addr, "addr", ":8080", "listen address for WebSocket, HTTP API, metrics and dashboard")
	fs.StringVar(&cfg.Engine, "engine", "memory", `log engine: "memory" (in process, lost on restart), "embedded" (JetStream in process, files in --data-dir) or "nats" (an external JetStream at --nats-url)`)
	fs.StringVar(&cfg.NATSURL, "nats-url", "nats://127.0.0.1:4222", "NATS server URL(s) for --engine nats")
	fs.StringVar(&cfg.DataDir, "data-dir", "data", "directory of the log's files for --engine embedded (created if missing); one gateway per directory")
	fs.StringVar(&cfg.DataSync, "data-sync", defaultDataSync, `how often --engine embedded syncs its files to disk: a duration, or "always" (after every write: survives a power loss, slower publishes)`)
	fs.StringVar(&cfg.EmbedListen, "embedded-nats-listen", "", "host:port where the embedded NATS server accepts clients, for other gateway nodes (--engine nats) and NATS tools (empty: no TCP port)")
	fs.IntVar(&cfg.NATSReplicas, "nats-replicas", 1, "copies a NATS cluster keeps of each stream and bucket the gateway creates, 1 to 5, for --engine nats (existing ones are scaled to it; 3 survives losing one NATS server)")
	fs.StringVar(&cfg.NATSPrefix, "nats-prefix", "switchyard", "name prefix of the JetStream streams and buckets; nodes with the same prefix share a log")
	fs.StringVar(&cfg.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&cfg.LogJSON, "log-json", false, "log JSON lines instead of text")
	fs.BoolVar(&cfg.Strict, "strict", false, "refuse publishes to topics that were not created (unknown_topic)")
	fs.IntVar(&cfg.Partitions, "partitions", d.Partitions, "partitions of auto-created topics")
	fs.Int64Var(&cfg.RetentionMessages, "retention-messages", d.MaxMessages, "default records kept per partition")
	fs.DurationVar(&cfg.RetentionAge, "retention-age", d.MaxAge, "default maximum record age (0: no limit)")
	fs.StringVar(&cfg.OnFull, "on-full", string(d.OnFull), `default topic full policy: "drop_oldest" or "block"`)
	fs.DurationVar(&cfg.BlockTimeout, "block-timeout", d.BlockTimeout, "how long a publish to a full block-policy topic waits")
	fs.DurationVar(&cfg.AckTimeout, "ack-timeout", p.AckTimeout, "group delivery lease before redelivery")
	fs.IntVar(&cfg.MaxAttempts, "max-attempts", p.MaxAttempts, "group delivery attempts before a dead letter")
	fs.DurationVar(&cfg.BackoffMin, "backoff-min", p.BackoffMin, "first redelivery backoff (doubles per attempt)")
	fs.DurationVar(&cfg.BackoffMax, "backoff-max", p.BackoffMax, "redelivery backoff cap")
	fs.IntVar(&cfg.MaxInFlight, "max-in-flight", p.MaxInFlight, "unacked records per group, topic and partition")
	fs.DurationVar(&cfg.DedupeWindow, "dedupe-window", p.DedupeWindow, "msg_id deduplication window")
	fs.DurationVar(&cfg.GroupIdleTTL, "group-idle-ttl", p.IdleTTL, "delete a consumer group (and its positions) after it has had no member this long (0: keep groups)")
	addDeadLetterFlags(fs, &cfg.DeadLetters, p)
	fs.IntVar(&cfg.QueueMessages, "queue-messages", 1024, "outbound queue bound per session, in message frames")
	fs.DurationVar(&cfg.WriteDelay, "write-delay", 0, "write coalescing: how long a session's writer waits for more frames before a write (0: off, write at once); replies are never held")
	fs.IntVar(&cfg.WriteDelayFrames, "write-delay-frames", session.DefaultWriteDelayFrames, "with --write-delay: most frames per write, and the queued frames at which the writer stops waiting")
	fs.Int64Var(&cfg.MaxFrameBytes, "max-frame-bytes", 0, fmt.Sprintf("largest inbound WebSocket message, fragments included (close 1009 past it); 0: --max-message-bytes plus the largest publish envelope that --max-key-bytes, --max-msg-id-bytes, --max-header-bytes, --max-headers, --max-topic-bytes and --max-id-bytes allow, escaped (%d bytes with the defaults), so that a publish over --max-message-bytes gets message_too_large and its session stays open", defaultMaxMessageBytes+router.PublishEnvelopeBytes(router.Bounds{})))
	fs.IntVar(&cfg.MaxMessageBytes, "max-message-bytes", defaultMaxMessageBytes, "largest publish data, as written in the frame (message_too_large)")
	fs.IntVar(&cfg.MaxSubscriptions, "max-subscriptions", 1000, "subscriptions per session")
	fs.IntVar(&cfg.Groups.MaxPullMembers, "max-pull-members", router.DefaultMaxPullMembers, "HTTP pull members this gateway holds at once (one per group polled here in the last minute); a poll that would make another gets 429 too_many_subscriptions (negative: no bound)")
	fs.IntVar(&cfg.Groups.MaxPullMembersPerClient, "max-pull-members-per-client", router.DefaultMaxPullMembersPerClient, "pull members one client (token subject, or IP without one) may make this gateway hold; past it 429 too_many_subscriptions (negative: no bound)")
	fs.IntVar(&cfg.Groups.MaxSessionLeases, "max-session-leases", 0, "records one WebSocket session may hold leased over all its group memberships; past it deliveries pause until it acks, and a subscribe that finds none left gets too_many_subscriptions (0: 4 × --queue-messages; negative: no bound)")
	fs.IntVar(&cfg.Groups.MaxGroups, "max-groups", router.DefaultMaxGroups, "consumer groups made through this gateway (a subscribe or poll naming a new group) that still exist; past it too_many_subscriptions (HTTP 429) until groups are deleted or expire (--group-idle-ttl) (negative: no bound)")
	fs.Int64Var(&cfg.Groups.MaxGroupBytes, "max-group-bytes", router.DefaultMaxGroupBytes, "bytes of those groups (name, pattern, filter and 4 KiB each), as --max-groups (negative: no bound)")
	fs.IntVar(&cfg.Groups.MaxGroupsPerClient, "max-groups-per-client", router.DefaultMaxGroupsPerClient, "consumer groups one client (token subject, or IP without one) made through this gateway that still exist, as --max-groups (negative: no bound)")
	fs.Int64Var(&cfg.Groups.MaxGroupBytesPerClient, "max-group-bytes-per-client", router.DefaultMaxGroupBytesPerClient, "bytes of one client's groups, as --max-groups-per-client (negative: no bound)")
	fs.Int64Var(&cfg.Groups.MaxSessionLeaseBytes, "max-session-lease-bytes", router.DefaultMaxSessionLeaseBytes, "bytes of the records one WebSocket session may hold leased over all its group memberships, as --max-session-leases (negative: no bound)")
	fs.Var(&cfg.Compression, "compression", `WebSocket permessage-deflate, "off" or "on" (no context takeover; frames of 512 bytes and more): off by default since it costs CPU per subscriber and frame, which pays only when clients are short of bandwidth and payloads are large`)
	fs.IntVar(&cfg.MaxLast, "max-last", 100, `largest N of a subscribe's "from": {"last": N} (records per matched partition)`)
	fs.IntVar(&cfg.SSE.MaxPositions, "sse-max-positions", router.DefaultSSEMaxPositions, "positions (pattern, topic, partition) a Server-Sent Events stream keeps for its resumption, and that a Last-Event-ID of the earlier self-contained form may name (400 past it)")
	fs.IntVar(&cfg.SSE.MaxTokenBytes, "sse-max-token-bytes", router.DefaultSSEMaxTokenBytes, "largest Last-Event-ID of a Server-Sent Events stream (400 past it)")
	fs.DurationVar(&cfg.SSE.ResumeTTL, "sse-resume-ttl", router.DefaultSSEResumeTTL, "how long an ended Server-Sent Events stream stays resumable by its last event id")
	fs.Int64Var(&cfg.SSE.ResumeBytes, "sse-resume-bytes", router.DefaultSSEResumeBytes, "memory for the positions of ended Server-Sent Events streams kept for resumption; past it the oldest are forgotten")
	fs.Float64Var(&cfg.PublishRate, "publish-rate", 0, "publishes per second per session (0: unlimited)")
	fs.IntVar(&cfg.PublishPipeline, "publish-pipeline", router.DefaultPublishPipeline, "publishes in flight per WebSocket session; past it the session's reader waits (1: one at a time)")
	fs.IntVar(&cfg.PublishPipelineBytes, "publish-pipeline-bytes", router.DefaultPublishPipelineBytes, "data bytes of the publishes in flight per WebSocket session; past it the session's reader waits")
	fs.StringVar(&cfg.AllowedOrigins, "allowed-origins", "", "comma-separated extra browser origins (host patterns) allowed to open WebSockets and to POST/PUT/DELETE over HTTP (CORS answered for them)")
	fs.DurationVar(&cfg.PingInterval, "ping-interval", 25*time.Second, "WebSocket keepalive ping period")
	fs.DurationVar(&cfg.StatsInterval, "stats-interval", time.Second, "$sys.stats period (negative: no system topics)")
	fs.DurationVar(&cfg.ShutdownTimeout, "shutdown-timeout", 10*time.Second, "bound on graceful shutdown")
	fs.StringVar(&cfg.DebugAddr, "debug-addr", "", "if set, serve Go's pprof profiles on this address (keep it on loopback), e.g. 127.0.0.1:6060")
	fs.DurationVar(&cfg.HandshakeTimeout, "handshake-timeout", router.DefaultReadHeaderTimeout, "time a client has to send its HTTP request headers (and so the WebSocket handshake)")
	fs.DurationVar(&cfg.ReadTimeout, "read-timeout", router.DefaultReadTimeout, "time a client has to send a whole HTTP request, headers and body (not WebSocket sessions once upgraded)")
	fs.DurationVar(&cfg.WriteTimeout, "write-timeout", router.DefaultWriteTimeout, "time an HTTP response may take to write once its request is read (polls get wait_ms on top; not WebSocket sessions)")
	fs.DurationVar(&cfg.IdleTimeout, "idle-timeout", router.DefaultIdleTimeout, "how long a keep-alive HTTP connection may wait for its next request")
	addWireFlags(fs, &cfg.Wire)
	fs.StringVar(&cfg.JWTHMACSecret, "jwt-hmac-secret", "", "HS256 token secret, at least 32 bytes (prefer the environment or --jwt-hmac-secret-file)")
	fs.StringVar(&cfg.JWTHMACSecretFile, "jwt-hmac-secret-file", "", "file of HS256 token secrets, one per line (several during a rotation)")
	fs.StringVar(&cfg.JWTPublicKey, "jwt-public-key", "", "comma-separated PEM files of RSA (RS256) or ECDSA (ES256/384/512) token verification keys")
	fs.StringVar(&cfg.JWTAudience, "jwt-audience", "", "if set, tokens must carry this audience (aud)")
	fs.StringVar(&cfg.JWTIssuer, "jwt-issuer", "", "if set, tokens must carry this issuer (iss)")
	fs.StringVar(&cfg.JWTJWKSURL, "jwt-jwks-url", "", "identity provider's JWKS URL (RSA and EC keys selected by kid)")
	fs.StringVar(&cfg.JWTJWKSFile, "jwt-jwks-file", "", "JWKS file (RSA and EC keys selected by kid), read again every --jwt-jwks-refresh")
	fs.DurationVar(&cfg.JWTJWKSRefresh, "jwt-jwks-refresh", 5*time.Minute, "how often the JWKS is read again (also on an unknown kid, at most every 10s)")
	fs.StringVar(&cfg.JWTClaimsPrefix, "jwt-claims-prefix", "", "prefix of the grant claims (publish, subscribe, groups), e.g. https://example.com/")
	fs.StringVar(&cfg.JWTClaims, "jwt-claims", "", "grant claim names, e.g. publish=pub,subscribe=https://x/sub,groups=grp (overrides --jwt-claims-prefix)")
	fs.IntVar(&cfg.MaxPresencePerTopic, "max-presence-per-topic", 1000, "members a topic's presence lists and announces; beyond it they are only counted")
	fs.Float64Var(&cfg.PresenceJoinRate, "presence-join-rate", router.DefaultPresenceJoinRate, "presence joins (subscribes with presence) per second per session; past it rate_limited (negative: unlimited)")
	fs.IntVar(&cfg.PresenceJoinBurst, "presence-join-burst", router.DefaultPresenceJoinBurst, "presence joins a session may make at once")
	fs.IntVar(&cfg.PresenceQueueBytes, "presence-queue-bytes", router.DefaultPresenceQueueBytes, "control bytes a member may have queued for presence join/leave frames to be queued to it; past it they are dropped and a resync frame follows (at most half of --control-queue-bytes)")
	fs.StringVar(&cfg.HookURL, "hook-url", "", "base URL of the application's authorization hooks (POST URL/connect, URL/subscribe, URL/publish)")
	fs.StringVar(&cfg.Hooks, "hooks", "connect,subscribe", "comma-separated hooks to call with --hook-url: connect, subscribe, publish")
	fs.DurationVar(&cfg.HookTimeout, "hook-timeout", 2*time.Second, "bound on each hook call, waiting for a free slot included")
	fs.BoolVar(&cfg.HookFailOpen, "hook-fail-open", false, "allow subscribes and publishes when their hook fails (default: refuse)")
	fs.StringVar(&cfg.HookHeaders, "hook-headers", "", "comma-separated request headers sent to the connect hook")
	fs.StringVar(&cfg.HookCookies, "hook-cookies", "", "comma-separated cookie names sent to the connect hook")
	fs.IntVar(&cfg.HookMaxConcurrent, "hook-max-concurrent", 64, "hook requests in flight at most")
	fs.IntVar(&cfg.HookMaxConcurrentIP, "hook-max-concurrent-per-ip", 0, "connect hook requests of one client IP in flight or waiting for a slot at most; past it a connect gets 429 (0: a quarter of --hook-max-concurrent)")
	fs.IntVar(&cfg.HookCacheEntries, "hook-cache-entries", 10000, "cached subscribe hook answers at most")
	fs.IntVar(&cfg.HookCacheBytes, "hook-cache-bytes", 4<<20, "bytes of cached subscribe hook answers at most")
	fs.DurationVar(&cfg.JWTRefreshLead, "jwt-refresh-lead", 0, "how long before a session's token expires it gets refresh_required (0: 30s or a tenth of the token's lifetime, whichever is less; negative: never)")
	fs.StringVar(&cfg.AdminKey, "admin-key", "", "bearer key for the admin calls (topic create/delete, seek, dead letters), at least 16 characters")
	fs.StringVar(&cfg.AdminKeyFile, "admin-key-file", "", "file holding the admin key")
	fs.BoolVar(&cfg.AllowAnonymous, "allow-anonymous", false, "with keys configured, let clients without a token in with the anonymous grants")
	fs.StringVar(&cfg.AnonymousSubscribe, "anonymous-subscribe", "#,$sys.#", "comma-separated patterns anonymous clients may subscribe to (with --allow-anonymous)")
	fs.StringVar(&cfg.AnonymousPublish, "anonymous-publish", "", "comma-separated patterns anonymous clients may publish to (with --allow-anonymous)")
	fs.IntVar(&cfg.MaxConnections, "max-connections", 0, "open WebSocket sessions (0: unlimited)")
	fs.IntVar(&cfg.MaxConnectionsPerIP, "max-connections-per-ip", 0, "open WebSocket sessions per client IP (0: unlimited)")
	fs.Float64Var(&cfg.ConnectRatePerIP, "connect-rate-per-ip", 0, "WebSocket and SSE connects a client IP may attempt per second, checked before any token check or hook (0: unlimited)")
	fs.IntVar(&cfg.MaxTopics, "max-topics", 0, "topics that may exist, not counting $ topics (0: unlimited)")
	fs.IntVar(&cfg.MaxPartitions, "max-partitions", engine.MaxPartitions, "partitions of a topic created over HTTP")
	fs.Float64Var(&cfg.HTTPPublishRate, "http-publish-rate", 0, "HTTP publishes per second per client IP (0: unlimited)")
	fs.BoolVar(&cfg.Version, "version", false, "print the version and exit")
	fs.StringVar(&cfg.TrustedProxies, "trusted-proxies", "", "comma-separated CIDRs of reverse proxies whose X-Forwarded-For names the client IP")
	return fs
}

// loadConfig applies defaults, then the YAML file, then the environment,
// then the command line.
func loadConfig(args []string, getenv func(string) string, out io.Writer) (config, error) {
	var cfg config
	fs := newFlagSet(&cfg, out)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	explicit := map[string]string{}
	fs.Visit(func(f *flag.Flag) { explicit[f.Name] = f.Value.String() })

	path := explicit["config"]
	if path == "" {
		path = getenv("SWITCHYARD_CONFIG")
	}
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return cfg, fmt.Errorf("config: %w", err)
		}
		var kv map[string]any
		if err := yaml.Unmarshal(data, &kv); err != nil {
			return cfg, fmt.Errorf("config %s: %w", path, err)
		}
		keys := make([]string, 0, len(kv))
		for k := range kv {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if k == "config" || fs.Lookup(k) == nil {
				return cfg, fmt.Errorf("config %s: unknown setting %q", path, k)
			}
			if err := fs.Set(k, fmt.Sprint(kv[k])); err != nil {
				return cfg, fmt.Errorf("config %s: %s: %w", path, k, err)
			}
		}
	}
	var envErr error
	fs.VisitAll(func(f *flag.Flag) {
		if f.Name == "config" || envErr != nil {
			return
		}
		name := "SWITCHYARD_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(name); v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				envErr = fmt.Errorf("%s: %w", name, err)
			}
		}
	})
	if envErr != nil {
		return cfg, envErr
	}
	for k, v := range explicit {
		if err := fs.Set(k, v); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

// onOff is a flag that takes "off" or "on".
type onOff bool

func (v *onOff) String() string {
	if v != nil && *v {
		return "on"
	}
	return "off"
}

func (v *onOff) Set(s string) error {
	switch s {
	case "on":
		*v = true
	case "off":
		*v = false
	default:
		return fmt.Errorf(`must be "off" or "on", not %q`, s)
	}
	return nil
}

func newLogger(cfg config, out io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(cfg.LogLevel)); err != nil {
		return nil, fmt.Errorf("log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogJSON {
		return slog.New(slog.NewJSONHandler(out, opts)), nil
	}
	return slog.New(slog.NewTextHandler(out, opts)), nil
}

// newEngine makes the engine --engine names. emb is the embedded NATS server
// for "embedded" and nil otherwise.
func newEngine(cfg config, emb *embeddedNATS, log *slog.Logger) (engine.Engine, error) {
	defaults := engine.TopicConfig{
		Partitions:   cfg.Partitions,
		MaxMessages:  cfg.RetentionMessages,
		MaxAge:       cfg.RetentionAge,
		OnFull:       engine.FullPolicy(cfg.OnFull),
		BlockTimeout: cfg.BlockTimeout,
	}.WithDefaults(engine.Defaults)
	if err := defaults.Validate(); err != nil {
		return nil, fmt.Errorf("topic defaults: %w", err)
	}
	policy := engine.GroupPolicy{
		AckTimeout:   cfg.AckTimeout,
		MaxAttempts:  cfg.MaxAttempts,
		BackoffMin:   cfg.BackoffMin,
		BackoffMax:   cfg.BackoffMax,
		MaxInFlight:  cfg.MaxInFlight,
		DedupeWindow: cfg.DedupeWindow,
		IdleTTL:      idleTTL(cfg.GroupIdleTTL),

		MaxGroupDeadLetters: cfg.DeadLetters.PerGroup,
		MaxDeadLetters:      cfg.DeadLetters.Count,
		MaxDeadLetterBytes:  cfg.DeadLetters.Bytes,
	}.WithDefaults(engine.DefaultGroupPolicy)
	switch cfg.Engine {
	case "memory":
		return memengine.New(memengine.Options{Defaults: defaults, Strict: cfg.Strict, Policy: policy}), nil
	case "embedded":
		return newEmbeddedEngine(cfg, emb, defaults, policy, log)
	case "nats":
		return newNATSEngine(cfg, defaults, policy, log)
	}
	return nil, fmt.Errorf(`engine must be "memory", "embedded" or "nats", not %q`, cfg.Engine)
}

// run starts the gateway and blocks until ctx is done, then shuts down
// gracefully. listening, when not nil, is told the bound address.
func run(ctx context.Context, args []string, getenv func(string) string, out io.Writer, listening func(addr string)) error {
	cfg, err := loadConfig(args, getenv, out)
	if err != nil {
		return err
	}
	if cfg.Version {
		_, err := fmt.Fprintln(out, "switchyard gateway", gatewayVersion())
		return err
	}
	log, err := newLogger(cfg, out)
	if err != nil {
		return err
	}
	if cfg.NATSReplicas < 1 || cfg.NATSReplicas > 5 {
		return errors.New("nats-replicas must be 1 to 5")
	}
	if cfg.NATSReplicas > 1 && cfg.Engine != "nats" {
		return errors.New("nats-replicas above 1 needs --engine nats (a NATS cluster)")
	}
	var emb *embeddedNATS
	switch cfg.Engine {
	case "embedded":
		sync, err := parseDataSync(cfg.DataSync)
		if err != nil {
			return err
		}
		if emb, err = startEmbeddedNATS(cfg.DataDir, cfg.EmbedListen, sync, log); err != nil {
			return err
		}
		// Deferred, so it runs after every path below has closed the
		// engine: gateway, engine, then the server.
		defer emb.stop()
	case "memory", "nats":
		if cfg.EmbedListen != "" {
			return errors.New("embedded-nats-listen needs --engine embedded")
		}
		if cfg.DataSync != defaultDataSync {
			return errors.New("data-sync needs --engine embedded")
		}
	}
	eng, err := newEngine(cfg, emb, log)
	if err != nil {
		return err
	}
	origins := splitList(cfg.AllowedOrigins)
	auth, proxies, err := securityOptions(cfg)
	if err != nil {
		_ = eng.Close(context.Background())
		return err
	}
	hooks, err := hookOptions(cfg)
	if err != nil {
		_ = eng.Close(context.Background())
		return err
	}
	warnFrameLimit(log, cfg)
	rt, err := router.New(router.Options{
		Engine: eng,
		Logger: log,
		Static: web.FS(),
		Session: session.Options{
			QueueMessages:    cfg.QueueMessages,
			WriteDelay:       cfg.WriteDelay,
			WriteDelayFrames: cfg.WriteDelayFrames,
			ReadLimit:        cfg.MaxFrameBytes,
			PingInterval:     cfg.PingInterval,
			ControlBytes:     cfg.Wire.ControlQueueBytes,
			MessageTimeout:   cfg.Wire.MessageTimeout,
		},
		Bounds:               cfg.Wire.bounds(),
		MaxSubscriptions:     cfg.MaxSubscriptions,
		Groups:               groupBounds(cfg),
		MaxLast:              cfg.MaxLast,
		SSE:                  cfg.SSE,
		Compression:          bool(cfg.Compression),
		MaxMessageBytes:      cfg.MaxMessageBytes,
		PublishRate:          cfg.PublishRate,
		PublishPipeline:      cfg.PublishPipeline,
		PublishPipelineBytes: cfg.PublishPipelineBytes,
		StatsInterval:        cfg.StatsInterval,
		OriginPatterns:       origins,
		ShutdownGrace:        cfg.ShutdownTimeout / 2,

		Auth:                auth,
		Hooks:               hooks,
		MaxPresencePerTopic: cfg.MaxPresencePerTopic,
		Presence:            router.PresenceOptions{JoinRate: cfg.PresenceJoinRate, JoinBurst: cfg.PresenceJoinBurst, QueueBytes: cfg.PresenceQueueBytes},
		MaxConnections:      cfg.MaxConnections,
		MaxConnectionsPerIP: cfg.MaxConnectionsPerIP,
		ConnectRatePerIP:    cfg.ConnectRatePerIP,
		MaxTopics:           cfg.MaxTopics,
		MaxPartitions:       cfg.MaxPartitions,
		HTTPPublishRate:     cfg.HTTPPublishRate,
		TrustedProxies:      proxies,
		Version:             gatewayVersion(),
	})
	if err != nil {
		_ = eng.Close(context.Background())
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		_ = rt.Shutdown(context.Background())
		_ = eng.Close(context.Background())
		return err
	}
	srv := rt.NewServer(router.ServerOptions{
		ReadHeaderTimeout: cfg.HandshakeTimeout, // clients that never finish a handshake
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	})
	ln = rt.Listener(ln)
	log.Info("switchyard gateway listening", "addr", ln.Addr().String(), "version", gatewayVersion(), "engine", cfg.Engine, "epoch", eng.Epoch())
	logEndpoints(log, ln.Addr())
	if cfg.DebugAddr != "" {
		stopDebug, err := serveDebug(cfg.DebugAddr, log)
		if err != nil {
			_ = rt.Shutdown(context.Background())
			_ = eng.Close(context.Background())
			return err
		}
		defer stopDebug()
	}
	if listening != nil {
		listening(ln.Addr().String())
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		_ = rt.Shutdown(context.Background())
		_ = eng.Close(context.Background())
		return err
	}
	log.Info("shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownTimeout)
	defer cancel()
	// Stop taking new connections and HTTP requests while sessions flush.
	httpDone := make(chan error, 1)
	go func() { httpDone <- srv.Shutdown(sctx) }()
	rerr := rt.Shutdown(sctx)
	herr := <-httpDone
	<-serveErr
	eerr := eng.Close(sctx)
	log.Info("stopped")
	return errors.Join(rerr, ignoreClosed(herr), eerr)
}

// splitList splits a comma-separated setting, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// securityOptions reads the key files and builds the router's
// authentication options and trusted proxy networks. Errors name the file,
// never its contents.
func securityOptions(cfg config) (router.AuthOptions, []*net.IPNet, error) {
	var a router.AuthOptions
	if cfg.MaxPartitions < 1 || cfg.MaxPartitions > engine.MaxPartitions {
		return a, nil, fmt.Errorf("max-partitions must be 1 to %d", engine.MaxPartitions)
	}
	if cfg.Partitions > cfg.MaxPartitions {
		return a, nil, fmt.Errorf("partitions (%d) is above max-partitions (%d)", cfg.Partitions, cfg.MaxPartitions)
	}
	if cfg.HandshakeTimeout <= 0 {
		return a, nil, errors.New("handshake-timeout must be positive")
	}
	if cfg.ReadTimeout <= 0 || cfg.WriteTimeout <= 0 || cfg.IdleTimeout <= 0 {
		return a, nil, errors.New("read-timeout, write-timeout and idle-timeout must be positive")
	}
	if cfg.JWTHMACSecret != "" {
		a.HMACSecrets = append(a.HMACSecrets, []byte(cfg.JWTHMACSecret))
	}
	if cfg.JWTHMACSecretFile != "" {
		data, err := os.ReadFile(cfg.JWTHMACSecretFile)
		if err != nil {
			return a, nil, fmt.Errorf("jwt-hmac-secret-file: %w", err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if line = strings.TrimRight(line, "\r"); strings.TrimSpace(line) != "" {
				a.HMACSecrets = append(a.HMACSecrets, []byte(line))
			}
		}
	}
	for _, file := range splitList(cfg.JWTPublicKey) {
		kid, named := "", false
		if k, f, ok := strings.Cut(file, "="); ok {
			kid, file, named = k, f, true
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return a, nil, fmt.Errorf("jwt-public-key: %w", err)
		}
		keys, err := router.ParsePublicKeys(data)
		if err != nil {
			return a, nil, fmt.Errorf("jwt-public-key %s: %w", file, err)
		}
		if named {
			if len(keys) != 1 {
				return a, nil, fmt.Errorf("jwt-public-key %s: a key id names one key; the file holds %d", file, len(keys))
			}
			if a.NamedKeys == nil {
				a.NamedKeys = map[string]crypto.PublicKey{}
			}
			a.NamedKeys[kid] = keys[0]
			continue
		}
		a.PublicKeys = append(a.PublicKeys, keys...)
	}
	a.Audience, a.Issuer = cfg.JWTAudience, cfg.JWTIssuer
	a.JWKSURL, a.JWKSFile, a.JWKSRefresh = cfg.JWTJWKSURL, cfg.JWTJWKSFile, cfg.JWTJWKSRefresh
	a.Claims.Prefix = cfg.JWTClaimsPrefix
	for _, kv := range splitList(cfg.JWTClaims) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || v == "" {
			return a, nil, fmt.Errorf("jwt-claims: %q is not name=claim", kv)
		}
		switch k {
		case "publish":
			a.Claims.Publish = v
		case "subscribe":
			a.Claims.Subscribe = v
		case "groups":
			a.Claims.Groups = v
		default:
			return a, nil, fmt.Errorf("jwt-claims: unknown grant %q (publish, subscribe or groups)", k)
		}
	}
	a.RefreshLead = cfg.JWTRefreshLead
	a.AdminKey = cfg.AdminKey
	if cfg.AdminKeyFile != "" {
		data, err := os.ReadFile(cfg.AdminKeyFile)
		if err != nil {
			return a, nil, fmt.Errorf("admin-key-file: %w", err)
		}
		a.AdminKey = strings.TrimSpace(string(data))
	}
	if cfg.AllowAnonymous {
		a.Anonymous = &router.Grants{Subscribe: splitList(cfg.AnonymousSubscribe), Publish: splitList(cfg.AnonymousPublish)}
	}
	var proxies []*net.IPNet
	for _, c := range splitList(cfg.TrustedProxies) {
		_, n, err := net.ParseCIDR(c)
		if err != nil {
			return a, nil, fmt.Errorf("trusted-proxies: %w", err)
		}
		proxies = append(proxies, n)
	}
	return a, proxies, nil
}

// hookOptions builds the router's authorization hook options.
func hookOptions(cfg config) (router.HookOptions, error) {
	h := router.HookOptions{
		URL:                cfg.HookURL,
		Timeout:            cfg.HookTimeout,
		FailOpen:           cfg.HookFailOpen,
		Headers:            splitList(cfg.HookHeaders),
		Cookies:            splitList(cfg.HookCookies),
		MaxConcurrent:      cfg.HookMaxConcurrent,
		MaxConcurrentPerIP: cfg.HookMaxConcurrentIP,
		CacheEntries:       cfg.HookCacheEntries,
		CacheBytes:         cfg.HookCacheBytes,
	}
	if cfg.HookURL == "" {
		return router.HookOptions{}, nil
	}
	for _, name := range splitList(cfg.Hooks) {
		switch name {
		case "connect":
			h.Connect = true
		case "subscribe":
			h.Subscribe = true
		case "publish":
			h.Publish = true
		default:
			return h, fmt.Errorf("hooks: unknown hook %q (connect, subscribe or publish)", name)
		}
	}
	return h, nil
}

// healthcheck GETs url and succeeds on a 200 reply.
func healthcheck(url string) error {
	c := &http.Client{Timeout: 3 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// logEndpoints logs where the dashboard, the WebSocket endpoint and the
// metrics are, as URLs a user can open: an unspecified listen address
// (":8080") is shown as localhost.
func logEndpoints(log *slog.Logger, addr net.Addr) {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	hp := net.JoinHostPort(host, port)
	log.Info("dashboard", "url", "http://"+hp+"/")
	log.Info("websocket endpoint", "url", "ws://"+hp+"/v1/ws")
	log.Info("metrics", "url", "http://"+hp+"/metrics")
}

// idleTTL maps --group-idle-ttl onto engine.GroupPolicy.IdleTTL, where 0
// means the default and a negative value keeps groups.
func idleTTL(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
