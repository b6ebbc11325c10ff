package main

// Topics declared in the config file: a "topics:" list of the topics the
// gateway makes sure exist, with their settings, at start and on every
// reload.
//
//	topics:
//	  - name: orders.created          # or pattern: with an exact name
//	    partitions: 4
//	    partitioner: key_hash         # key_hash, round_robin or sticky
//	    retention: {max_messages: 500000, max_age: 24h}
//	    on_full: block                # block or drop_oldest
//	    block_timeout: 2s
//
// A field left out takes the gateway's topic defaults (--partitions,
// --retention-messages, --retention-age, --on-full, --block-timeout; key
// hash). A topic that does not exist is created; one that exists with
// other settings is left as it is and a warning names each difference,
// since no engine changes an existing topic's settings (delete it and
// reload to have it created again). Errors of the list name the file, the
// line, the entry and what it takes; --check-config reports them.
//
// Every entry is a topic policy (router.TopicPolicy), in the file's order:
// the first one matching a topic a publish or subscribe creates gives
// that topic its settings (GET /v1/topics/{name} names it as "policy"),
// and the first one matching a topic decides its max_last, presence,
// anonymous and mqtt settings (topic_policies.go). An entry whose pattern
// has a wildcard ("*" one segment, "#" one or more trailing) creates
// nothing by itself; an exact name's is created at start. A reload
// applies changed policies to the next topic created, subscribe or
// publish.
//
// Not yet: a byte bound of retention (no engine keeps one).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/trie"
)

// topicSpec is one entry of the topics list: the settings it gives, zero
// where it gives none.
type topicSpec struct {
	Config   engine.TopicConfig
	Line     int  // in the config file, for messages
	Wildcard bool // Config.Name is a pattern: a topic policy
	// Access are the router's settings of the entry (max_last, presence,
	// anonymous, mqtt); their Pattern and Config are unused.
	Access router.TopicPolicy
}

// topicKeys are the keys of an entry, as errors list them.
const topicKeys = "name, partitions, partitioner, retention (max_messages, max_age), on_full, block_timeout, max_last, presence, anonymous (publish, subscribe), mqtt (retained)"

// parseTopics reads the topics list of the config file at path.
func parseTopics(path string, n *yaml.Node) ([]topicSpec, error) {
	at := func(line int, format string, args ...any) error {
		return fmt.Errorf("config %s: line %d: topics: %s", path, line, fmt.Sprintf(format, args...))
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, at(n.Line, "expected a list of topics (- name: …), got %s", describeNode(n))
	}
	var out []topicSpec
	seen := map[string]int{}
	for i, item := range n.Content {
		entry := fmt.Sprintf("entry %d", i+1)
		if item.Kind != yaml.MappingNode {
			return nil, at(item.Line, "%s: expected a mapping of %s, got %s", entry, topicKeys, describeNode(item))
		}
		spec := topicSpec{Line: item.Line}
		c := &spec.Config
		keyLine := map[string]int{} // a key given twice is refused, not overwritten
		for j := 0; j+1 < len(item.Content); j += 2 {
			k, v := item.Content[j], item.Content[j+1]
			if line, dup := keyLine[k.Value]; dup {
				return nil, at(k.Line, "%s: %s given twice (first on line %d)", entry, k.Value, line)
			}
			keyLine[k.Value] = k.Line
			bad := func(want string) error {
				return at(k.Line, "%s: %s: expected %s, got %s", entry, k.Value, want, describeNode(v))
			}
			switch k.Value {
			case "name", "pattern":
				if v.Kind != yaml.ScalarNode || v.Value == "" {
					return nil, bad("a topic name")
				}
				if c.Name != "" {
					return nil, at(k.Line, "%s: give name or pattern once", entry)
				}
				c.Name = v.Value
				entry = fmt.Sprintf("%s (%s)", entry, c.Name)
			case "partitions":
				if v.Decode(&c.Partitions) != nil || v.Kind != yaml.ScalarNode {
					return nil, bad("an integer")
				}
			case "partitioner":
				if v.Kind != yaml.ScalarNode {
					return nil, bad(`"key_hash", "round_robin" or "sticky"`)
				}
				c.Partitioner = engine.PartitionerKind(v.Value)
			case "on_full":
				if v.Kind != yaml.ScalarNode {
					return nil, bad(`"block" or "drop_oldest"`)
				}
				c.OnFull = engine.FullPolicy(v.Value)
			case "block_timeout":
				d, ok := yamlDuration(v)
				if !ok {
					return nil, bad("a duration such as 500ms or 2s")
				}
				c.BlockTimeout = d
			case "retention":
				if err := parseRetention(v, c, func(k *yaml.Node, want string, got *yaml.Node) error {
					if want == "" {
						return at(k.Line, "%s: retention: unknown key %q (max_messages, max_age; the engines bound retention by records and age, not bytes)", entry, k.Value)
					}
					return at(k.Line, "%s: retention.%s: expected %s, got %s", entry, k.Value, want, describeNode(got))
				}); err != nil {
					return nil, err
				}
			case "max_last", "presence", "anonymous", "mqtt":
				if err := parseAccess(k, v, &spec.Access, func(k *yaml.Node, want string, got *yaml.Node) error {
					return at(k.Line, "%s: %s: expected %s, got %s", entry, k.Value, want, describeNode(got))
				}); err != nil {
					return nil, err
				}
			default:
				return nil, at(k.Line, "%s: unknown key %q (%s)", entry, k.Value, topicKeys)
			}
		}
		if c.Name == "" {
			return nil, at(item.Line, "%s: name is missing", entry)
		}
		if err := trie.ValidateTopic(c.Name); err != nil {
			if trie.ValidatePattern(c.Name) != nil {
				return nil, at(item.Line, "%s: %v", entry, err)
			}
			spec.Wildcard = true
		}
		if trie.IsSystem(c.Name) {
			return nil, at(item.Line, "%s: %q is a $ topic, reserved for the gateway", entry, c.Name)
		}
		if line, dup := seen[c.Name]; dup {
			return nil, at(item.Line, "%s: given twice (first on line %d)", entry, line)
		}
		seen[c.Name] = item.Line
		out = append(out, spec)
	}
	return out, nil
}

// parseRetention reads an entry's retention mapping into c; bad makes the
// error of key k (want "" for an unknown key).
func parseRetention(n *yaml.Node, c *engine.TopicConfig, bad func(k *yaml.Node, want string, got *yaml.Node) error) error {
	if n.Kind != yaml.MappingNode {
		return bad(&yaml.Node{Value: "retention", Line: n.Line}, "a mapping of max_messages and max_age", n)
	}
	for j := 0; j+1 < len(n.Content); j += 2 {
		k, v := n.Content[j], n.Content[j+1]
		switch k.Value {
		case "max_messages":
			if v.Kind != yaml.ScalarNode || v.Decode(&c.MaxMessages) != nil {
				return bad(k, "an integer", v)
			}
		case "max_age":
			d, ok := yamlDuration(v)
			if !ok {
				return bad(k, "a duration such as 90s or 24h", v)
			}
			c.MaxAge = d
		default:
			return bad(k, "", v)
		}
	}
	return nil
}

// yamlDuration reads a duration scalar.
func yamlDuration(v *yaml.Node) (time.Duration, bool) {
	if v.Kind != yaml.ScalarNode {
		return 0, false
	}
	d, err := time.ParseDuration(v.Value)
	return d, err == nil
}

// topicConfigs returns the declared topics' settings with the gateway's
// topic defaults filled in.
func topicConfigs(cfg config) []engine.TopicConfig {
	defaults := cfg.Topics.WithDefaults(engine.Defaults)
	var out []engine.TopicConfig
	for _, s := range cfg.TopicList {
		if !s.Wildcard {
			out = append(out, s.Config.WithDefaults(defaults))
		}
	}
	return out
}

// topicPolicies returns the config's entries as the router's topic
// policies, in the file's order: a wildcard entry's for the topics it
// matches, an exact name's for that topic alone (created at start too:
// its policy gives it its settings again when a publish or subscribe
// creates it after a delete, and its router settings apply to it). Zero
// fields take the engine's topic defaults when a topic is created.
func topicPolicies(cfg config) []router.TopicPolicy {
	var out []router.TopicPolicy
	for _, s := range cfg.TopicList {
		p := s.Access
		p.Pattern, p.Config = s.Config.Name, s.Config
		p.Config.Name = ""
		out = append(out, p)
	}
	return out
}

// validateTopics checks the declared topics' and policies' settings as the
// engine and --max-partitions would.
func validateTopics(cfg config) error {
	var errs []error
	defaults := cfg.Topics.WithDefaults(engine.Defaults)
	for _, s := range cfg.TopicList {
		c := s.Config.WithDefaults(defaults)
		where := fmt.Sprintf("topics: %q (line %d)", c.Name, s.Line)
		if s.Wildcard {
			c.Name = "policy.check" // the settings, not the pattern
		}
		if err := c.Validate(); err != nil {
			lines := strings.Split(err.Error(), "\n") // engine: invalid config\n<why>
			errs = append(errs, fmt.Errorf("%s: %s", where, lines[len(lines)-1]))
			continue
		}
		if p := cfg.Router.MaxPartitions; p > 0 && c.Partitions > p {
			errs = append(errs, fmt.Errorf("%s: partitions (%d) is above max-partitions (%d)", where, c.Partitions, p))
		}
	}
	return errors.Join(errs...)
}

// topicApplyTimeout bounds making sure the declared topics exist.
const topicApplyTimeout = 30 * time.Second

// ensureTopics creates the declared topics that do not exist and warns of
// those that exist with other settings. It returns the names it created.
func ensureTopics(ctx context.Context, eng engine.Engine, cfg config, log *slog.Logger) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, topicApplyTimeout)
	defer cancel()
	var created []string
	for _, want := range topicConfigs(cfg) {
		info, err := eng.CreateTopic(ctx, want)
		switch {
		case err == nil:
			created = append(created, want.Name)
			continue
		case errors.Is(err, engine.ErrTopicExists):
			if info, err = eng.Topic(ctx, want.Name); err != nil {
				return created, fmt.Errorf("topics: %q: %w", want.Name, err)
			}
		default:
			return created, fmt.Errorf("topics: creating %q: %w", want.Name, err)
		}
		if diff := topicDiff(info.Config, want); len(diff) > 0 {
			log.Warn("a topic of the config exists with other settings, kept as it is: delete it (DELETE /v1/topics/{name}) and reload to create it with the config's",
				"topic", want.Name, "differences", diff)
		}
	}
	return created, nil
}

// topicDiff names the settings in which have differs from want.
func topicDiff(have, want engine.TopicConfig) []string {
	var out []string
	add := func(name string, h, w any) {
		if h != w {
			out = append(out, fmt.Sprintf("%s %v (the config says %v)", name, h, w))
		}
	}
	add("partitions", have.Partitions, want.Partitions)
	add("partitioner", have.Partitioner, want.Partitioner)
	add("retention.max_messages", have.MaxMessages, want.MaxMessages)
	add("retention.max_age", have.MaxAge, want.MaxAge)
	add("on_full", have.OnFull, want.OnFull)
	if want.OnFull == engine.Block {
		add("block_timeout", have.BlockTimeout, want.BlockTimeout)
	}
	return out
}

// sameTopics reports whether two configs declare the same topics.
func sameTopics(a, b []topicSpec) bool {
	return slices.EqualFunc(a, b, func(x, y topicSpec) bool {
		return x.Config == y.Config && reflect.DeepEqual(x.Access, y.Access)
	})
}

// printTopics writes the topics list as the config file gives it.
func printTopics(b *strings.Builder, cfg *config) error {
	if len(cfg.TopicList) == 0 {
		return nil
	}
	type retention struct {
		MaxMessages int64  `yaml:"max_messages,omitempty"`
		MaxAge      string `yaml:"max_age,omitempty"`
	}
	type entry struct {
		Name         string     `yaml:"name,omitempty"`
		Pattern      string     `yaml:"pattern,omitempty"`
		Partitions   int        `yaml:"partitions,omitempty"`
		Partitioner  string     `yaml:"partitioner,omitempty"`
		Retention    *retention `yaml:"retention,omitempty"`
		OnFull       string     `yaml:"on_full,omitempty"`
		BlockTimeout string     `yaml:"block_timeout,omitempty"`
		accessEntry  `yaml:",inline"`
	}
	var list []entry
	for _, s := range cfg.TopicList {
		c := s.Config
		e := entry{Name: c.Name, Partitions: c.Partitions, Partitioner: string(c.Partitioner), OnFull: string(c.OnFull)}
		if s.Wildcard {
			e.Name, e.Pattern = "", c.Name
		}
		if c.MaxMessages != 0 || c.MaxAge != 0 {
			e.Retention = &retention{MaxMessages: c.MaxMessages}
			if c.MaxAge != 0 {
				e.Retention.MaxAge = c.MaxAge.String()
			}
		}
		if c.BlockTimeout != 0 {
			e.BlockTimeout = c.BlockTimeout.String()
		}
		e.accessEntry = printAccess(s.Access)
		list = append(list, e)
	}
	data, err := yaml.Marshal(map[string]any{"topics": list})
	if err != nil {
		return err
	}
	b.WriteString("\n# Topics: made sure to exist at start and on reload; entries set the topics a publish or subscribe creates (and their max_last, presence, anonymous and mqtt settings) by the first matching pattern # file\n")
	b.Write(data)
	return nil
}
