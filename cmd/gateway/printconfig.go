package main

// --print-config and --check-config: the effective settings shown as a
// config file, and the settings checked without starting.
//
// --print-config writes every setting, grouped as --help groups them, as a
// YAML file that --config reads back to the same settings, each line
// followed by where its value came from (flag, env, file or default).
// Secrets are never written: a setting holding key material (--admin-key,
// --jwt-hmac-secret) and a URL with a password (nats://user:pass@host) are
// written as comments saying that they are set and where from, so that
// the file reads back to everything but them. Settings that name files
// (--admin-key-file, --tls-key) are shown: the path is not the secret.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

// printConfig writes cfg's settings as a config file.
func printConfig(out io.Writer, cfg *config) error {
	r := newRegistry(cfg) // bound to cfg; does not reset it
	var b strings.Builder
	b.WriteString("# The effective settings of the Switchyard gateway, each with where it\n")
	b.WriteString("# came from; --config reads this file back. Secrets are not shown.\n")
	if cfg.ConfigFile != "" {
		fmt.Fprintf(&b, "# Loaded from the file %s.\n", cfg.ConfigFile)
	}
	for g := range numGroups {
		heading := false
		for _, s := range r.settings {
			if s.group != g || s.action || s.name == "config" {
				continue
			}
			if !heading {
				fmt.Fprintf(&b, "\n# %s\n", g.title())
				heading = true
			}
			from := describeSource(s.name, cfg.sources[s.name])
			text := s.value.String()
			if hidden(s, text) {
				fmt.Fprintf(&b, "# %s: (set, not shown) # %s\n", s.name, from)
				continue
			}
			line, err := yamlLine(s, text)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, "%s # %s\n", line, from)
		}
	}
	if err := printTopics(&b, cfg); err != nil {
		return err
	}
	_, err := io.WriteString(out, b.String())
	return err
}

// describeSource says where a setting's value came from.
func describeSource(name string, from source) string {
	switch from {
	case "":
		return string(fromDefault)
	case fromEnv:
		return "env " + envName(name)
	}
	return string(from)
}

// hidden reports whether a setting's value must not be shown: key
// material, or a URL carrying a password.
func hidden(s *setting, text string) bool {
	if text == "" {
		return false
	}
	if s.secret {
		return true
	}
	if s.value.kind().arg != "string" && s.value.kind().arg != "list" {
		return false
	}
	for _, part := range strings.Split(text, ",") {
		if u, err := url.Parse(strings.TrimSpace(part)); err == nil && u.User != nil {
			if _, ok := u.User.Password(); ok {
				return true
			}
		}
	}
	return false
}

// yamlLine returns "name: value" in YAML that loadFile reads back to text:
// numbers and switches plain, everything else double-quoted (so that "on",
// "off" or ":8080" stay strings).
func yamlLine(s *setting, text string) (string, error) {
	v := &yaml.Node{Kind: yaml.ScalarNode, Value: text, Tag: "!!str", Style: yaml.DoubleQuotedStyle}
	switch s.value.kind().arg {
	case "int", "float", "duration", "":
		v.Style, v.Tag = 0, ""
	}
	doc := &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: s.name}, v}}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return "", fmt.Errorf("print-config: %s: %w", s.name, err)
	}
	return strings.TrimRight(string(out), "\n"), nil
}

// checkConfig checks cfg as a start would, short of opening the listener
// and the engine: the settings alone and together (validate), the key
// files, the token options and hooks, the certificate files. It returns
// every error found.
func checkConfig(cfg config) error {
	var errs []error
	if err := validate(cfg); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		// The router checks its own options (bounds, key lengths, hooks):
		// one is made on an empty memory engine and shut down at once.
		errs = append(errs, checkRouter(cfg))
	}
	if cfg.TLS.enabled() && cfg.TLS.validate() == nil {
		w, err := loadCertWatcher(cfg.TLS, slog.New(slog.DiscardHandler))
		if err == nil {
			_, err = serverTLSConfig(w, cfg.TLS.ClientCAFile, httpALPN)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// checkRouter makes a router of cfg's options on a memory engine and shuts
// both down.
func checkRouter(cfg config) error {
	eng := memengine.New(memengine.Options{})
	defer eng.Close(context.Background())
	log := slog.New(slog.DiscardHandler)
	opts, err := routerOptions(cfg, eng, log)
	if err != nil {
		return err
	}
	opts.StatsInterval = -1 // no system topics
	rt, err := router.New(opts)
	if err != nil {
		return err
	}
	return rt.Shutdown(context.Background())
}
