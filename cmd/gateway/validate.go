package main

import (
	"errors"
	"fmt"

	"github.com/switchyard/switchyard/engine"
)

// maxNATSReplicas is the most copies a NATS cluster keeps of a stream.
const maxNATSReplicas = 5

// validate refuses settings that cannot work, alone or together, before
// anything starts; the errors name the settings and what they need. It
// reads no files (authOptions reads the key files) and leaves to the
// router what router.New checks of its own options (the bounds, JWKS).
func validate(cfg config) error {
	var errs []error
	check := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	check(validateEngine(cfg))
	check(cfg.TLS.validate())
	_, err := logLevel(cfg.LogLevel)
	check(err)
	if err := cfg.Topics.WithDefaults(engine.Defaults).Validate(); err != nil {
		check(fmt.Errorf("topic defaults: %w", err))
	}
	check(validateTopics(cfg))
	if p := cfg.Router.MaxPartitions; p < 1 || p > engine.MaxPartitions {
		check(fmt.Errorf("max-partitions must be 1 to %d", engine.MaxPartitions))
	} else if cfg.Topics.Partitions > p {
		check(fmt.Errorf("partitions (%d) is above max-partitions (%d)", cfg.Topics.Partitions, p))
	}
	if cfg.HTTP.ReadHeaderTimeout <= 0 {
		check(errors.New("handshake-timeout must be positive"))
	}
	if cfg.HTTP.ReadTimeout <= 0 || cfg.HTTP.WriteTimeout <= 0 || cfg.HTTP.IdleTimeout <= 0 {
		check(errors.New("read-timeout, write-timeout and idle-timeout must be positive"))
	}
	_, err = claimNames(cfg.Keys.Claims, cfg.Router.Auth.Claims)
	check(err)
	_, err = hookOptions(cfg)
	check(err)
	return errors.Join(errs...)
}

// validateEngine checks --engine and the settings that only one engine
// takes.
func validateEngine(cfg config) error {
	replicas := cfg.JetStream.Replicas
	switch {
	case replicas < 1 || replicas > maxNATSReplicas:
		return fmt.Errorf("nats-replicas must be 1 to %d", maxNATSReplicas)
	case replicas > 1 && cfg.Engine != "nats":
		return errors.New("nats-replicas above 1 needs --engine nats (a NATS cluster)")
	}
	switch cfg.Engine {
	case "embedded":
		if cfg.DataDir == "" {
			return errors.New("data-dir must be set for --engine embedded")
		}
		_, err := parseDataSync(cfg.DataSync)
		return err
	case "memory", "nats":
		if cfg.EmbedListen != "" {
			return errors.New("embedded-nats-listen needs --engine embedded")
		}
		if cfg.DataSync != defaultDataSync {
			return errors.New("data-sync needs --engine embedded")
		}
		return nil
	}
	return fmt.Errorf(`engine must be "memory", "embedded" or "nats", not %q`, cfg.Engine)
}
