// Command gateway runs a Switchyard WebSocket pub/sub gateway.
//
// Every setting is a flag, an environment variable (SWITCHYARD_ plus the
// flag name in upper case with '-' as '_') and a key of the optional YAML
// config file (--config), in that order of precedence. Run with --help for
// the list, grouped by subject; registry.go says how the settings are
// declared and config.go how they are loaded. --check-config checks them
// and --print-config prints them (printconfig.go); SIGHUP loads them again
// (reload.go); --tls-cert and --tls-key serve https and wss (tls.go).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
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

// newEngine makes the engine --engine names. emb is the embedded NATS server
// for "embedded" and nil otherwise.
func newEngine(cfg config, emb *embeddedNATS, log *slog.Logger) (engine.Engine, error) {
	defaults := cfg.Topics.WithDefaults(engine.Defaults)
	if err := defaults.Validate(); err != nil {
		return nil, fmt.Errorf("topic defaults: %w", err)
	}
	policy := groupPolicy(cfg)
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
	cfg, err := loadConfig(commandArgs(args), getenv, out)
	if err != nil {
		return err
	}
	switch {
	case cfg.Version:
		_, err := fmt.Fprintln(out, "switchyard gateway", gatewayVersion())
		return err
	case cfg.PrintConfig || cfg.CheckConfig:
		if cfg.PrintConfig {
			if err := printConfig(out, &cfg); err != nil {
				return err
			}
		}
		if !cfg.CheckConfig {
			return nil
		}
		if err := checkConfig(cfg); err != nil {
			return err
		}
		_, err := fmt.Fprintln(out, "gateway: the settings are valid")
		return err
	}
	if err := validate(cfg); err != nil {
		return err
	}
	log, level, err := newLogger(cfg, out)
	if err != nil {
		return err
	}
	// The certificate is read before anything starts, and its watcher is
	// shared by every TLS listener of the gateway (serverTLSConfig).
	var certs *certWatcher
	if cfg.TLS.enabled() {
		if certs, err = startCertWatcher(cfg.TLS, log); err != nil {
			return err
		}
		defer certs.close()
	}
	var emb *embeddedNATS
	if cfg.Engine == "embedded" {
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
	}
	eng, err := newEngine(cfg, emb, log)
	if err != nil {
		return err
	}
	opts, err := routerOptions(cfg, eng, log)
	if err != nil {
		_ = eng.Close(context.Background())
		return err
	}
	if created, err := ensureTopics(ctx, eng, cfg, log); err != nil {
		_ = eng.Close(context.Background())
		return err
	} else if len(created) > 0 {
		log.Info("topics of the config created", "topics", created)
	}
	rl, err := newReloader(cfg, args, getenv, level, log)
	if err != nil {
		_ = eng.Close(context.Background())
		return err
	}
	opts.Reloader = rl.reloadHTTP
	if certs != nil && opts.MQTT.Addr != "" {
		// --mqtt-addr serves MQTT over TLS with the listener's certificate
		// and client CAs, reloaded as they are (docs/mqtt.md). No ALPN:
		// MQTT clients offer none, or names of their own (AWS's).
		if opts.MQTT.TLS, err = serverTLSConfig(certs, cfg.TLS.ClientCAFile); err != nil {
			_ = eng.Close(context.Background())
			return err
		}
	}
	warnFrameLimit(log, cfg)
	rt, err := router.New(opts)
	if err != nil {
		_ = eng.Close(context.Background())
		return err
	}
	rl.apply = func(next config) error {
		o, err := routerOptions(next, eng, log)
		if err != nil {
			return err
		}
		return rt.Reload(o)
	}
	rl.applyTopics = func(next config) error {
		created, err := ensureTopics(context.Background(), eng, next, log)
		if len(created) > 0 {
			log.Info("topics of the config created", "topics", created)
		}
		return err
	}
	defer rl.watchSignal(syscall.SIGHUP)()
	return serve(ctx, cfg, rt, eng, opts.Auth, certs, log, listening)
}

// commandArgs turns the command form "check-config FILE [flags]" into
// "--check-config --config FILE [flags]"; other arguments are returned as
// they are.
func commandArgs(args []string) []string {
	if len(args) >= 2 && args[0] == "check-config" && !strings.HasPrefix(args[1], "-") {
		return append([]string{"--check-config", "--config", args[1]}, args[2:]...)
	}
	return args
}

// routerOptions returns the router's options: those the settings are bound
// to, with the session's options and the bounds from cfg.Wire, the keys
// read, and what is not a setting.
func routerOptions(cfg config, eng engine.Engine, log *slog.Logger) (router.Options, error) {
	o := cfg.Router
	o.Engine, o.EngineName, o.Logger, o.Static, o.Version = eng, cfg.Engine, log, web.FS(), gatewayVersion()
	o.Session = cfg.Wire.Options
	o.Bounds = cfg.Wire.bounds()
	o.TopicPolicies = topicPolicies(cfg) // topics.go
	o.Groups.DefaultWindow = cfg.MaxInFlight
	o.ShutdownGrace = cfg.ShutdownTimeout / 2
	var err error
	if o.Auth, err = authOptions(cfg); err != nil {
		return o, err
	}
	if o.Hooks, err = hookOptions(cfg); err != nil {
		return o, err
	}
	return o, nil
}

// serve serves rt on --addr until ctx is done or serving fails, then shuts
// rt, the HTTP server and eng down within --shutdown-timeout. With certs,
// the listener serves TLS with the certificate they hold.
func serve(ctx context.Context, cfg config, rt *router.Router, eng engine.Engine, auth router.AuthOptions, certs *certWatcher, log *slog.Logger, listening func(string)) error {
	abort := func(err error) error {
		_ = rt.Shutdown(context.Background())
		_ = eng.Close(context.Background())
		return err
	}
	var tlsConfig *tls.Config
	if certs != nil {
		var err error
		if tlsConfig, err = serverTLSConfig(certs, cfg.TLS.ClientCAFile, httpALPN); err != nil {
			return abort(err)
		}
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return abort(err)
	}
	httpOpts := cfg.HTTP
	httpOpts.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	srv := rt.NewServer(httpOpts)
	ln = rt.Listener(ln)
	if tlsConfig != nil {
		ln = serveTLS(srv, ln, tlsConfig)
	}
	log.Info("switchyard gateway listening", "addr", ln.Addr().String(), "version", gatewayVersion(), "engine", cfg.Engine, "epoch", eng.Epoch(), "tls", tlsConfig != nil)
	if a := rt.MQTTAddr(); a != nil {
		log.Info("mqtt listening", "addr", a.String(), "tls", tlsConfig != nil)
	}
	logEndpoints(log, ln.Addr(), tlsConfig != nil)
	warnOpen(log, ln.Addr(), withPolicyPublish(auth, cfg)) // topic_policies.go
	if cfg.DebugAddr != "" {
		stopDebug, err := serveDebug(cfg.DebugAddr, log)
		if err != nil {
			_ = ln.Close()
			return abort(err)
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
		return abort(err)
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
func logEndpoints(log *slog.Logger, addr net.Addr, secure bool) {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	hp := net.JoinHostPort(host, port)
	web, ws := "http://", "ws://"
	if secure {
		web, ws = "https://", "wss://"
	}
	log.Info("dashboard", "url", web+hp+"/")
	log.Info("websocket endpoint", "url", ws+hp+"/v1/ws")
	log.Info("metrics", "url", web+hp+"/metrics")
}
