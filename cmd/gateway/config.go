package main

// The gateway's configuration: the option structs the settings are bound
// to (registry.go, flags_*.go), and how they are loaded: defaults, then the
// YAML file, then the environment, then the command line.
//
// A loaded config is a plain value: loading again (a reload) makes another,
// and newRegistry(&cfg) lists any config's settings with their values
// (value.String()) without changing it, so that two configs can be
// compared setting by setting and one shown with cfg.sources (as
// --print-config would).

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/router"
)

// config is every setting of the gateway, held in the option structs it
// configures: the flags write into their fields, and run hands the structs
// on (see routerOptions and newEngine), filling in only what is not a
// setting (the engine, the logger) or is derived from several.
type config struct {
	gateway            // the gateway's own settings: listener, engine choice, logs
	Wire               // per-session and per-request bounds
	engine.GroupPolicy // group delivery rules

	// Topics holds the defaults of auto-created topics.
	Topics engine.TopicConfig
	// JetStream holds URL, Prefix and Replicas for --engine nats (and the
	// prefix for embedded).
	JetStream jsengine.Options
	// Router holds the router's options; Session and Bounds come from
	// Wire, the key material of Auth and the switches of Hooks from Keys
	// and HookNames (see routerOptions).
	Router router.Options
	// HTTP holds the HTTP server's timeouts.
	HTTP router.ServerOptions
	// Keys names the token keys, the admin key file and the anonymous
	// grants, read or parsed into Router.Auth at start.
	Keys keySettings
	// HookNames lists the hooks to call ("connect,subscribe").
	HookNames string
	// TLS names the listener's certificate files (tls.go).
	TLS tlsSettings
	// TopicList are the topics the config file declares (topics.go),
	// made sure to exist at start and on reload.
	TopicList []topicSpec

	// sources says where each setting that is not at its default came from.
	sources map[string]source
}

// gateway holds the settings that no package's options hold.
type gateway struct {
	ConfigFile      string
	Addr            string
	Engine          string
	DataDir         string
	DataSync        string
	EmbedListen     string
	Strict          bool
	LogLevel        string
	LogJSON         bool
	DebugAddr       string
	ShutdownTimeout time.Duration
	Version         bool
	CheckConfig     bool
	PrintConfig     bool
}

// newFlagSet returns the gateway's flags bound to cfg, with their defaults
// stored.
func newFlagSet(cfg *config, out io.Writer) *flag.FlagSet {
	r := newRegistry(cfg)
	r.setDefaults()
	return r.flagSet(out)
}

// loadConfig applies defaults, then the YAML file, then the environment,
// then the command line.
func loadConfig(args []string, getenv func(string) string, out io.Writer) (config, error) {
	var cfg config
	r := newRegistry(&cfg)
	r.setDefaults()
	fs := r.flagSet(out)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	cfg.sources = map[string]source{}
	if cfg.ConfigFile == "" {
		cfg.ConfigFile = getenv("SWITCHYARD_CONFIG")
		if cfg.ConfigFile != "" {
			cfg.sources["config"] = fromEnv
		}
	}
	if cfg.ConfigFile != "" {
		if err := r.loadFile(cfg.ConfigFile, cfg.sources); err != nil {
			return cfg, err
		}
	}
	if err := r.loadEnv(getenv, cfg.sources); err != nil {
		return cfg, err
	}
	// The command line again, over the file and the environment.
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	fs.Visit(func(f *flag.Flag) { cfg.sources[f.Name] = fromFlag })
	return cfg, nil
}

// loadEnv sets every setting whose environment variable is set and not
// empty.
func (r *registry) loadEnv(getenv func(string) string, sources map[string]source) error {
	for _, s := range r.settings {
		if s.name == "config" || s.action {
			continue // read before the file, by loadConfig; or command line only
		}
		name := envName(s.name)
		v := getenv(name)
		if v == "" {
			continue
		}
		if err := s.value.Set(v); err != nil {
			return fmt.Errorf("%s=%q: %w", name, v, err)
		}
		sources[s.name] = fromEnv
	}
	return nil
}

// loadFile sets the settings the YAML file at path gives: a mapping of
// setting names to scalar values, and the topics list (topics.go). Errors name the file, the line, the key
// and what it takes.
func (r *registry) loadFile(path string, sources map[string]source) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil // empty
	}
	top := doc.Content[0]
	if top.Kind == yaml.ScalarNode && top.Tag == "!!null" {
		return nil // comments only
	}
	if top.Kind != yaml.MappingNode {
		return fmt.Errorf("config %s: line %d: expected settings as name: value lines, got %s", path, top.Line, describeNode(top))
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		name := k.Value
		if name == "topics" {
			if _, dup := seen[name]; dup {
				return fmt.Errorf("config %s: line %d: topics: given twice", path, k.Line)
			}
			seen[name] = k.Line
			list, err := parseTopics(path, v)
			if err != nil {
				return err
			}
			*r.topics = list
			sources[name] = fromFile
			continue
		}
		s := r.byName[name]
		if name == "config" || s == nil {
			return fmt.Errorf("config %s: line %d: unknown setting %q%s", path, k.Line, name, r.suggest(name))
		}
		if s.action {
			return fmt.Errorf("config %s: line %d: %s is given on the command line only (--%s)", path, k.Line, name, name)
		}
		at := fmt.Sprintf("config %s: line %d: %s", path, k.Line, name)
		if line, dup := seen[name]; dup {
			return fmt.Errorf("%s: given twice (first on line %d)", at, line)
		}
		seen[name] = k.Line
		if v.Kind == yaml.AliasNode && v.Alias != nil {
			v = v.Alias
		}
		if v.Kind != yaml.ScalarNode || v.Tag == "!!null" {
			return fmt.Errorf("%s: expected %s, got %s", at, s.value.kind().want, describeNode(v))
		}
		var x any
		if err := v.Decode(&x); err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
		text := fmt.Sprint(x)
		if err := s.value.Set(text); err != nil {
			return fmt.Errorf("%s: %w, got %q", at, err, text)
		}
		sources[name] = fromFile
	}
	return nil
}

// describeNode names what a YAML node holds, for an error message.
// suggest names the setting an unknown name was likely meant to be (the
// same with dashes for underscores, or one or two letters away), as
// ": did you mean \"x\"?", or "" when none is close.
func (r *registry) suggest(name string) string {
	if s := r.byName[strings.ReplaceAll(name, "_", "-")]; s != nil && !s.action {
		return fmt.Sprintf(`: the settings are the flag names, did you mean %q?`, strings.ReplaceAll(name, "_", "-"))
	}
	best, bestD := "", 3
	for n, s := range r.byName {
		if s.action || n == "config" {
			continue
		}
		if d := editDistance(name, n, bestD+1); d < bestD || d == bestD && best != "" && n < best {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(": did you mean %q?", best)
}

// editDistance is the Levenshtein distance of a and b, or limit when it is
// limit or more.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d >= limit || -d >= limit {
		return limit
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return min(prev[len(b)], limit)
}

func describeNode(n *yaml.Node) string {
	switch {
	case n.Kind == yaml.SequenceNode:
		return "a list"
	case n.Kind == yaml.MappingNode:
		return "a mapping"
	case n.Tag == "!!null":
		return "no value"
	}
	return fmt.Sprintf("%q", n.Value)
}
