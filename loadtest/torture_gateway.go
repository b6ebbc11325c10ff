package main

// The torture run's gateway: the router in this process on a loopback port,
// on the memory engine or on the JetStream engine over a NATS server
// embedded in this process (as the gateway's --engine embedded starts it),
// with a short keepalive ping so that dead connections with a ping
// outstanding are common. The run reads the gateway's own registry for its
// per-session figures (connections, subscriptions).

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/session"
)

// tortureGateway is an embedded gateway under torture.
type tortureGateway struct {
	wsURL, httpURL string
	problems       *problemLog
	stop           func() error
}

// tortureAckTimeout is the group ack timeout: short, so that stalled and
// crashed members' leases go round within a run.
const tortureAckTimeout = 1500 * time.Millisecond

func startTortureGateway(cfg *tortureConfig) (*tortureGateway, error) {
	policy := engine.GroupPolicy{AckTimeout: tortureAckTimeout, MaxAttempts: 4,
		BackoffMin: 50 * time.Millisecond, BackoffMax: 400 * time.Millisecond}
	problems := &problemLog{}
	logger := slog.New(problems)
	var eng engine.Engine
	var closeEngine func(context.Context) error
	switch cfg.engine {
	case "memory":
		m := memengine.New(memengine.Options{Policy: policy})
		eng, closeEngine = m, m.Close
	case "embedded":
		e, stop, err := startTortureJetStream(policy, logger)
		if err != nil {
			return nil, err
		}
		eng, closeEngine = e, func(ctx context.Context) error {
			err := e.Close(ctx)
			stop()
			return err
		}
	default:
		return nil, fmt.Errorf("--engine %q: want memory or embedded", cfg.engine)
	}
	reg := prometheus.NewRegistry()
	rt, err := router.New(router.Options{
		Engine:        eng,
		Registry:      reg,
		StatsInterval: -1,
		Logger:        logger,
		Session: session.Options{
			QueueMessages: 256,
			PingInterval:  cfg.keepalive,
		},
	})
	if err != nil {
		_ = closeEngine(context.Background())
		return nil, fmt.Errorf("torture gateway: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		_ = closeEngine(context.Background())
		return nil, fmt.Errorf("torture gateway: %w", err)
	}
	ln = smallSendBuffers{ln}
	srv := rt.NewServer(router.ServerOptions{ErrorLog: log.New(problems.writer(), "http: ", 0)})
	ln = rt.Listener(ln)
	done := make(chan struct{})
	var serveErr error
	go func() { // exits when stop closes the server
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			serveErr = fmt.Errorf("torture gateway: serve: %w", err)
		}
	}()
	addr := ln.Addr().String()
	return &tortureGateway{
		wsURL: "ws://" + addr + "/v1/ws", httpURL: "http://" + addr,
		problems: problems,
		stop: func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			var errs []error
			if err := rt.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("torture gateway: shutdown: %w", err))
			}
			if err := srv.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("torture gateway: http shutdown: %w", err))
			}
			<-done
			if err := closeEngine(ctx); err != nil {
				errs = append(errs, fmt.Errorf("torture gateway: engine close: %w", err))
			}
			return errors.Join(append(errs, serveErr)...)
		},
	}, nil
}

// startTortureJetStream starts a NATS server with JetStream in this process
// (no TCP port, files in a temporary directory) and the JetStream engine on
// an in-process connection to it. stop shuts the server down and removes
// the directory; the engine must be closed first.
func startTortureJetStream(policy engine.GroupPolicy, logger *slog.Logger) (*jsengine.Engine, func(), error) {
	dir, err := os.MkdirTemp("", "switchyard-torture-")
	if err != nil {
		return nil, nil, err
	}
	ns, err := server.NewServer(&server.Options{ServerName: "switchyard-torture", JetStream: true,
		StoreDir: dir, DontListen: true, NoSigs: true})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, fmt.Errorf("embedded nats: %w", err)
	}
	ns.Start()
	stopServer := func() {
		ns.Shutdown()
		ns.WaitForShutdown()
		os.RemoveAll(dir)
	}
	if !ns.ReadyForConnections(30 * time.Second) {
		stopServer()
		return nil, nil, errors.New("embedded nats: not ready within 30s")
	}
	nc, err := nats.Connect("", nats.InProcessServer(ns), nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))
	if err != nil {
		stopServer()
		return nil, nil, fmt.Errorf("embedded nats: connect: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	e, err := jsengine.New(ctx, jsengine.Options{Conn: nc, Prefix: "torture", Policy: policy,
		Logger: logger, MemberTTL: 3 * time.Second})
	if err != nil {
		nc.Close()
		stopServer()
		return nil, nil, fmt.Errorf("engine embedded: %w", err)
	}
	return e, func() { nc.Close(); stopServer() }, nil
}

// gauges reads the gateway's connections and subscriptions (plain and
// group) from its /metrics; -1 when it cannot be read.
func (g *tortureGateway) gauges(ctx context.Context) (conns, subs int64) {
	m, err := scrapeSeries(ctx, http.DefaultClient, g.httpURL, []string{"switchyard_connections",
		`switchyard_subscriptions{kind="plain"}`, `switchyard_subscriptions{kind="group"}`})
	if err != nil {
		return -1, -1
	}
	return m["switchyard_connections"], m[`switchyard_subscriptions{kind="plain"}`] + m[`switchyard_subscriptions{kind="group"}`]
}
