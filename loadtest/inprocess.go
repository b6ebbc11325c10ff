package main

// This file is the generator's only tie to the gateway's own packages: with
// --inprocess it embeds a gateway (the router on the in-memory engine) so
// that a quick run needs no separate process. Everything else speaks to the
// gateway over the wire.

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/session"
)

// inproc is an embedded gateway on a loopback port.
type inproc struct {
	wsURL, httpURL string
	problems       *problemLog
	stop           func() error
}

func startInProcess(cfg *config) (*inproc, error) {
	eng := memengine.New(memengine.Options{
		Policy: engine.GroupPolicy{AckTimeout: cfg.ackTimeout},
	})
	problems := &problemLog{}
	opts := router.Options{
		Engine:        eng,
		Registry:      prometheus.NewRegistry(),
		StatsInterval: -1,
		Logger:        slog.New(problems),
		Session:       session.Options{QueueMessages: cfg.queueMessages},
	}
	srvOpts := router.ServerOptions{ErrorLog: log.New(problems.writer(), "http: ", 0)}
	if cfg.hostile {
		// Short HTTP timeouts, so that trickling and stalled clients meet
		// them within the run, and a topic limit for the spray.
		// A shorter unfinished-message timeout, so that parked fragments
		// are closed within a short run.
		opts.MaxTopics = hostileMaxTopics
		opts.Session.MessageTimeout = time.Second
		srvOpts.ReadTimeout, srvOpts.WriteTimeout, srvOpts.IdleTimeout = 2*time.Second, 2*time.Second, 5*time.Second
		// A connect hook, slow for the connect storm's address only
		// (hostile_hook.go); each address's share of it is above the
		// bystanders' simultaneous connects.
		hook, err := startConnectHook()
		if err != nil {
			_ = eng.Close(context.Background())
			return nil, fmt.Errorf("in-process gateway: connect hook: %w", err)
		}
		opts.Hooks = router.HookOptions{URL: hook.url, Connect: true, MaxConcurrent: 4 * stormHookShare, MaxConcurrentPerIP: stormHookShare}
		hostileHook.Store(hook)
	}
	gs, err := serveGateway(gatewayServe{
		name: "in-process gateway", router: opts, server: srvOpts,
		smallSendBuffers: cfg.scenario == "soak", stopTimeout: 10 * time.Second,
		closeEngine: func(ctx context.Context) error {
			var errs []error
			if err := closeHostileHook(); err != nil {
				errs = append(errs, fmt.Errorf("connect hook: %w", err))
			}
			if err := eng.Close(ctx); err != nil {
				errs = append(errs, fmt.Errorf("engine close: %w", err))
			}
			return errors.Join(errs...)
		},
	})
	if err != nil {
		return nil, err
	}
	return &inproc{wsURL: gs.wsURL, httpURL: gs.httpURL, problems: problems, stop: gs.stop}, nil
}

// gatewayServe says how serveGateway runs a gateway.
type gatewayServe struct {
	name   string // names the gateway in errors
	addr   string // the address to listen on; "": a new loopback port
	router router.Options
	server router.ServerOptions
	// smallSendBuffers gives accepted connections small send buffers
	// (see smallSendBuffers).
	smallSendBuffers bool
	stopTimeout      time.Duration
	// closeEngine closes what router.Engine needs once the server has
	// stopped, or when the gateway cannot start.
	closeEngine func(context.Context) error
}

// servedGateway is a gateway serveGateway runs.
type servedGateway struct {
	addr, wsURL, httpURL string
	// stop shuts the router down gracefully (sessions told to go away),
	// then the HTTP server, then closes the engine; it waits for the
	// serving goroutine.
	stop func() error
}

// serveGateway runs the router of o on a loopback listener in this
// process: the one way the soak's in-process gateway and the torture run's
// gateways start and stop. Its serving goroutine exits when stop returns.
func serveGateway(o gatewayServe) (*servedGateway, error) {
	fail := func(err error) (*servedGateway, error) {
		if o.closeEngine != nil {
			_ = o.closeEngine(context.Background())
		}
		return nil, fmt.Errorf("%s: %w", o.name, err)
	}
	rt, err := router.New(o.router)
	if err != nil {
		return fail(err)
	}
	addr := o.addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		// The router holds nothing before it serves; shut it anyway.
		_ = rt.Shutdown(context.Background())
		return fail(err)
	}
	if o.smallSendBuffers {
		ln = smallSendBuffers{ln}
	}
	srv := rt.NewServer(o.server)
	ln = rt.Listener(ln)
	done := make(chan struct{})
	var serveErr error
	go func() { // exits when stop closes the server
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr = fmt.Errorf("%s: serve: %w", o.name, err)
		}
	}()
	bound := ln.Addr().String()
	return &servedGateway{
		addr: bound, wsURL: "ws://" + bound + "/v1/ws", httpURL: "http://" + bound,
		stop: func() error {
			ctx, cancel := context.WithTimeout(context.Background(), o.stopTimeout)
			defer cancel()
			var errs []error
			if err := rt.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s: shutdown: %w", o.name, err))
			}
			if err := srv.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s: http shutdown: %w", o.name, err))
			}
			<-done
			if o.closeEngine != nil {
				if err := o.closeEngine(ctx); err != nil {
					errs = append(errs, fmt.Errorf("%s: %w", o.name, err))
				}
			}
			return errors.Join(append(errs, serveErr)...)
		},
	}, nil
}

// smallSendBuffers gives every accepted connection a fixed 64 KiB send
// buffer. Linux otherwise grows a loopback socket's send buffer to 4 MiB,
// which would hide a slow reader's backlog from the gateway's queue for
// tens of seconds; with it, the soak's slow readers reach their drop policy
// within seconds. 64 KiB is still over a second of the soak's traffic for
// one subscriber, so readers that keep up never notice.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(64 << 10) // best effort
	}
	return c, err
}

// problemLog is a slog.Handler that keeps the embedded gateway's warnings
// and errors (and the HTTP server's error log, where a recovered handler
// panic lands) so a run can report them. It is safe for concurrent use by
// multiple goroutines.
type problemLog struct {
	mu    sync.Mutex // guards following
	count int
	first []string // the first few, for the report
}

const problemsKept = 5

func (p *problemLog) add(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count++
	if len(p.first) < problemsKept {
		p.first = append(p.first, s)
	}
}

// snapshot returns how many problems were logged and the first few.
func (p *problemLog) snapshot() (int, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.count, append([]string(nil), p.first...)
}

func (p *problemLog) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }

func (p *problemLog) Handle(_ context.Context, r slog.Record) error {
	s := r.Level.String() + " " + r.Message
	r.Attrs(func(a slog.Attr) bool {
		s += " " + a.String()
		return true
	})
	p.add(s)
	return nil
}

func (p *problemLog) WithAttrs([]slog.Attr) slog.Handler { return p }
func (p *problemLog) WithGroup(string) slog.Handler      { return p }

// writer adapts p to log.Logger output (one Write per line).
func (p *problemLog) writer() problemWriter { return problemWriter{p} }

type problemWriter struct{ p *problemLog }

func (w problemWriter) Write(b []byte) (int, error) {
	w.p.add(string(b))
	return len(b), nil
}
