package main

// The router's settings of a topics entry (router.TopicPolicy): what
// subscriptions and publishes on the topics the entry matches may do.
//
//	topics:
//	  - pattern: 'chat.#'
//	    max_last: 500                 # bound of {"last": N}; default --max-last
//	    presence: false               # refuse subscribes with presence
//	    anonymous: {publish: true, subscribe: true}   # with --allow-anonymous
//	    mqtt: {retained: false}       # retained PUBLISHes are not stored
//
// The first entry matching a topic decides, as for the engine's settings
// (router/topic_policies_access.go has what a wildcard subscription
// takes). A reload applies them to the next subscribe or publish.

import (
	"fmt"
	"slices"

	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/router"
)

// maxPolicyLast bounds a policy's max_last: a subscription replays up to
// that many records per partition it matches, through its session's
// bounded queue.
const maxPolicyLast = 1_000_000

// parseAccess reads key k (max_last, presence, anonymous or mqtt) of an
// entry, with value v, into p; bad makes the error of a key whose value is
// not what it takes (want "" for an unknown key).
func parseAccess(k, v *yaml.Node, p *router.TopicPolicy, bad func(k *yaml.Node, want string, got *yaml.Node) error) error {
	switch k.Value {
	case "max_last":
		want := fmt.Sprintf("an integer from 1 to %d", maxPolicyLast)
		if v.Kind != yaml.ScalarNode || v.Tag != "!!int" || v.Decode(&p.MaxLast) != nil || p.MaxLast < 1 || p.MaxLast > maxPolicyLast {
			return bad(k, want, v)
		}
	case "presence":
		b, ok := yamlBool(v)
		if !ok {
			return bad(k, "true or false", v)
		}
		p.Presence = &b
	case "anonymous":
		return boolMap(k, v, bad, map[string]func(bool){
			"publish":   func(b bool) { p.Anonymous.Publish = b },
			"subscribe": func(b bool) { p.Anonymous.Subscribe = b },
		}, "publish, subscribe")
	case "mqtt":
		return boolMap(k, v, bad, map[string]func(bool){
			"retained": func(b bool) { p.MQTTRetain = &b },
		}, "retained")
	}
	return nil
}

// boolMap reads mapping v of key k whose keys (names, listed in keys) take
// true or false.
func boolMap(k, v *yaml.Node, bad func(k *yaml.Node, want string, got *yaml.Node) error, set map[string]func(bool), keys string) error {
	if v.Kind != yaml.MappingNode {
		return bad(k, "a mapping of "+keys, v)
	}
	given := map[string]bool{}
	for j := 0; j+1 < len(v.Content); j += 2 {
		sk, sv := v.Content[j], v.Content[j+1]
		name := &yaml.Node{Value: k.Value + "." + sk.Value, Line: sk.Line}
		f, ok := set[sk.Value]
		if !ok {
			return bad(name, "one of "+keys, sk)
		}
		if given[sk.Value] {
			return bad(name, "the key once (it is given twice)", sv)
		}
		given[sk.Value] = true
		b, ok := yamlBool(sv)
		if !ok {
			return bad(name, "true or false", sv)
		}
		f(b)
	}
	return nil
}

// yamlBool reads a boolean scalar (true or false; YAML 1.2's words).
func yamlBool(v *yaml.Node) (bool, bool) {
	if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" {
		return false, false
	}
	var b bool
	return b, v.Decode(&b) == nil
}

// accessEntry is the router's settings of an entry as the config file
// writes them (--print-config).
type accessEntry struct {
	MaxLast   int            `yaml:"max_last,omitempty"`
	Presence  *bool          `yaml:"presence,omitempty"`
	Anonymous *anonymousYAML `yaml:"anonymous,omitempty"`
	MQTT      *mqttYAML      `yaml:"mqtt,omitempty"`
}

type anonymousYAML struct {
	Publish   bool `yaml:"publish,omitempty"`
	Subscribe bool `yaml:"subscribe,omitempty"`
}

type mqttYAML struct {
	Retained *bool `yaml:"retained,omitempty"`
}

// printAccess returns p's router settings as the file writes them.
func printAccess(p router.TopicPolicy) accessEntry {
	e := accessEntry{MaxLast: p.MaxLast, Presence: p.Presence}
	if p.Anonymous.Publish || p.Anonymous.Subscribe {
		e.Anonymous = &anonymousYAML{Publish: p.Anonymous.Publish, Subscribe: p.Anonymous.Subscribe}
	}
	if p.MQTTRetain != nil {
		e.MQTT = &mqttYAML{Retained: p.MQTTRetain}
	}
	return e
}

// withPolicyPublish returns auth with the anonymous publish grants of the
// topic policies added, as the router adds them, so that the start-up
// warning about anonymous publishing (warnOpen) names them too. auth is
// copied, never modified.
func withPolicyPublish(auth router.AuthOptions, cfg config) router.AuthOptions {
	if auth.Anonymous == nil {
		return auth
	}
	g := *auth.Anonymous
	g.Publish = slices.Clone(g.Publish)
	for _, s := range cfg.TopicList {
		if s.Access.Anonymous.Publish && !slices.Contains(g.Publish, s.Config.Name) {
			g.Publish = append(g.Publish, s.Config.Name)
		}
	}
	auth.Anonymous = &g
	return auth
}
