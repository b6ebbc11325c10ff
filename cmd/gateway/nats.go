package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
)

// newNATSEngine connects the JetStream engine. Gateway nodes started with the
// same --nats-url and --nats-prefix share one log and its groups; the streams
// and buckets get --nats-replicas copies.
func newNATSEngine(cfg config, defaults engine.TopicConfig, policy engine.GroupPolicy, log *slog.Logger) (engine.Engine, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	e, err := jsengine.New(ctx, jsengine.Options{
		URL:      cfg.JetStream.URL,
		Prefix:   cfg.JetStream.Prefix,
		Defaults: defaults,
		Strict:   cfg.Strict,
		Policy:   policy,
		Logger:   log,
		Replicas: cfg.JetStream.Replicas,
	})
	if err != nil {
		return nil, fmt.Errorf("engine nats (%s): %w", cfg.JetStream.URL, err)
	}
	return e, nil
}
