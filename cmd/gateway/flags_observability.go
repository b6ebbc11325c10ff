package main

// Settings of observability: logs, system topics and profiles.

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/switchyard/switchyard/router"
)

// defaultLogLevel logs starts, stops and trouble, not every session.
const defaultLogLevel = "info"

func (c *config) observabilityFlags(r *registry) {
	r.in(groupObservability)
	r.string(&c.LogLevel, "log-level", defaultLogLevel, "debug, info, warn or error")
	r.bool(&c.LogJSON, "log-json", false, "log JSON lines instead of text")
	r.duration(&c.Router.StatsInterval, "stats-interval", router.DefaultStatsInterval, "$sys.stats period (negative: no system topics)")
	r.string(&c.DebugAddr, "debug-addr", "", "if set, serve Go's pprof profiles on this address (keep it on loopback), e.g. 127.0.0.1:6060")
}

// logLevel parses --log-level.
func logLevel(s string) (slog.Level, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(s)); err != nil {
		return level, fmt.Errorf("log-level: %w", err)
	}
	return level, nil
}

// newLogger returns the gateway's logger and its level, which a reload
// may change.
func newLogger(cfg config, out io.Writer) (*slog.Logger, *slog.LevelVar, error) {
	level, err := logLevel(cfg.LogLevel)
	if err != nil {
		return nil, nil, err
	}
	lv := new(slog.LevelVar)
	lv.Set(level)
	opts := &slog.HandlerOptions{Level: lv}
	if cfg.LogJSON {
		return slog.New(slog.NewJSONHandler(out, opts)), lv, nil
	}
	return slog.New(slog.NewTextHandler(out, opts)), lv, nil
}
