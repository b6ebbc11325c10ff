package main

import (
	"errors"
	"log/slog"

	"github.com/switchyard/switchyard/engine"
)

func newNATSEngine(cfg config, defaults engine.TopicConfig, policy engine.GroupPolicy, log *slog.Logger) (engine.Engine, error) {
	return nil, errors.New("engine nats: not available in this build yet")
}
