package main

// The embedded engine: --engine embedded runs a NATS server with JetStream
// inside the gateway process, storing its files in --data-dir, and puts the
// JetStream engine on it through an in-process connection (no socket). The
// log, the topics, the groups' committed offsets and the epoch live in those
// files, so a gateway stopped in any way (kill -9 included) and started again
// on the same directory finds every record it acknowledged, its groups resume
// from their committed offsets, and clients resuming with positions get
// recovered: true. The server writes each record to its file and, by
// default (--data-sync always), syncs that file to disk before the publish
// is acknowledged, so neither a process crash nor a power loss loses an
// acknowledged record. --data-sync with a duration (2m is the NATS
// server's own default) syncs only that often: a process crash still loses
// nothing acknowledged, a power loss may lose what was acknowledged since
// the last sync.
//
// The server listens on no TCP port unless --embedded-nats-listen names one:
// then other gateway nodes (--engine nats --nats-url nats://that-address,
// same --nats-prefix) and NATS tools can use the same log while this gateway
// runs.
//
// Shutdown order: the gateway (sessions and HTTP), then the engine, then
// the in-process connection, then the server, whose end run waits for (see
// embeddedNATS.stop).

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
)

// embeddedReadyTimeout bounds the embedded server's start, which includes
// recovering the streams from their files: generous, since a large log takes
// a while to index.
const embeddedReadyTimeout = 60 * time.Second

// embeddedNATS is a NATS server running in the gateway process, with the
// connection the engine uses. Its methods are not safe for concurrent use.
type embeddedNATS struct {
	ns   *server.Server
	nc   *nats.Conn
	lock *os.File     // holds the data dir's lock (see lockDataDir)
	g    *groupSyncer // syncs for nc under --data-sync always (groupsync.go); nil when the server syncs itself
}

// startEmbeddedNATS starts a JetStream server storing in dir (created if
// missing), listening on listen (host:port) or, when listen is empty, on no
// TCP port, syncing its files to disk as sync says, and connects to it in
// process. It returns once the server has
// recovered its streams and accepts clients. It locks dir first, so a
// second gateway on the same directory fails at once. The caller must call
// stop.
func startEmbeddedNATS(dir, listen string, sync dataSync, log *slog.Logger) (*embeddedNATS, error) {
	if dir == "" {
		return nil, fmt.Errorf("data-dir must be set for --engine embedded")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("data-dir: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("data-dir: %w", err)
	}
	lock, err := lockDataDir(abs)
	if err != nil {
		return nil, err
	}
	emb, err := startLocked(abs, listen, sync, log)
	if err != nil {
		lock.Close()
		return nil, err
	}
	emb.lock = lock
	return emb, nil
}

// startLocked is startEmbeddedNATS once the data dir abs is locked.
func startLocked(abs, listen string, sync dataSync, log *slog.Logger) (*embeddedNATS, error) {
	opts := &server.Options{
		ServerName: "switchyard-embedded",
		JetStream:  true,
		StoreDir:   abs,
		DontListen: true,
		NoSigs:     true, // the gateway handles signals and stops the server
		// parseDataSync sets one of the two (both zero would be the
		// server's default, every two minutes).
		SyncAlways:   sync.Always,
		SyncInterval: sync.Interval,
	}
	var g *groupSyncer
	if sync.Always && listen == "" {
		// The in-process connection is the only client: it syncs once
		// per group of replies instead of the server once per write.
		var ok bool
		var err error
		if g, ok, err = newGroupSyncer(abs); err != nil {
			return nil, fmt.Errorf("data-dir: %w", err)
		} else if ok {
			opts.SyncAlways = false
		}
	}
	if listen != "" {
		host, port, err := net.SplitHostPort(listen)
		if err != nil {
			return nil, fmt.Errorf("embedded-nats-listen: %w", err)
		}
		p, err := strconv.Atoi(port)
		if err != nil || p < 0 || p > 65535 {
			return nil, fmt.Errorf("embedded-nats-listen: bad port %q", port)
		}
		if p == 0 {
			p = server.RANDOM_PORT // the server reads 0 as its default port, 4222
		} else {
			// The server would only log a busy port and never become
			// ready: fail at once instead.
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return nil, fmt.Errorf("embedded-nats-listen: %w", err)
			}
			l.Close()
		}
		opts.Host, opts.Port, opts.DontListen = host, p, false
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		g.close()
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	ns.SetLogger(natsLogger{log}, log.Enabled(context.Background(), slog.LevelDebug), false)
	ns.Start()
	if !ns.ReadyForConnections(embeddedReadyTimeout) {
		ns.Shutdown()
		ns.WaitForShutdown()
		g.close()
		return nil, fmt.Errorf("embedded nats: not ready within %v (data-dir %s)", embeddedReadyTimeout, abs)
	}
	var provider nats.InProcessConnProvider = ns
	if g != nil {
		provider = groupSyncProvider{inner: ns, g: g}
	}
	nc, err := nats.Connect("", nats.InProcessServer(provider), nats.Name("switchyard-gateway"),
		// What jsengine asks of a connection it is given (see
		// jsengine.Options.Conn); in process it only matters while the
		// server shuts down.
		nats.MaxReconnects(-1), nats.ReconnectBufSize(-1))
	if err != nil {
		ns.Shutdown()
		ns.WaitForShutdown()
		g.close()
		return nil, fmt.Errorf("embedded nats: connect: %w", err)
	}
	attrs := []any{"data_dir", abs, "data_sync", syncMode(sync, g)}
	if addr := ns.Addr(); addr != nil {
		attrs = append(attrs, "nats_url", "nats://"+addr.String())
	}
	log.Info("embedded NATS server ready", attrs...)
	return &embeddedNATS{ns: ns, nc: nc, g: g}, nil
}

// syncMode names how the embedded server's files reach the disk, for the
// start-up log line.
func syncMode(sync dataSync, g *groupSyncer) string {
	switch {
	case g != nil:
		return "always (grouped: one filesystem sync per group of replies)"
	case sync.Always:
		return "always (the server syncs after every write)"
	}
	return "every " + sync.Interval.String()
}

// stop closes the connection and shuts the server down, waiting until it has
// closed its files. The engine must be closed first. Calling stop on a nil
// embeddedNATS does nothing.
func (e *embeddedNATS) stop() {
	if e == nil {
		return
	}
	e.nc.Close()
	e.ns.Shutdown()
	e.ns.WaitForShutdown()
	e.g.close()
	e.lock.Close()
}

// embeddedMemberTTL is the engine's member TTL when the embedded server
// listens on no TCP port: no other node can exist, so the only stale member
// registrations are a crashed earlier run's, and a short TTL lets the
// groups resume soon after a restart (about 3 s instead of 10 s). It is
// still three heartbeats long, so a busy process does not lose its own
// members.
const embeddedMemberTTL = 3 * time.Second

// newEmbeddedEngine is the JetStream engine on the embedded server's
// in-process connection.
func newEmbeddedEngine(cfg config, emb *embeddedNATS, defaults engine.TopicConfig, policy engine.GroupPolicy, log *slog.Logger) (engine.Engine, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var ttl time.Duration // the engine's default, for nodes that may join
	if cfg.EmbedListen == "" {
		ttl = embeddedMemberTTL
	}
	e, err := jsengine.New(ctx, jsengine.Options{
		MemberTTL: ttl,
		Conn:      emb.nc,
		Prefix:    cfg.JetStream.Prefix,
		Defaults:  defaults,
		Strict:    cfg.Strict,
		Policy:    policy,
		Logger:    log,
	})
	if err != nil {
		return nil, fmt.Errorf("engine embedded (%s): %w", cfg.DataDir, err)
	}
	return e, nil
}

// natsLogger sends the embedded server's log to the gateway's: notices at
// debug level (the server's start-up banner is long), warnings and errors as
// such, debug lines only when the gateway logs at debug level, never traces.
type natsLogger struct{ log *slog.Logger }

func (l natsLogger) Noticef(format string, v ...any) { l.at(slog.LevelDebug, format, v) }
func (l natsLogger) Warnf(format string, v ...any)   { l.at(slog.LevelWarn, format, v) }
func (l natsLogger) Fatalf(format string, v ...any)  { l.at(slog.LevelError, format, v) }
func (l natsLogger) Errorf(format string, v ...any)  { l.at(slog.LevelError, format, v) }
func (l natsLogger) Debugf(format string, v ...any)  { l.at(slog.LevelDebug, format, v) }
func (l natsLogger) Tracef(string, ...any)           {}

func (l natsLogger) at(level slog.Level, format string, v []any) {
	if l.log.Enabled(context.Background(), level) {
		l.log.Log(context.Background(), level, "nats: "+fmt.Sprintf(format, v...))
	}
}
