package router

// Topic policies: the settings of topics a publish or subscribe creates,
// by pattern (Options.TopicPolicies; the gateway's config file calls them
// "topics:" entries), and the router's settings of subscriptions and
// publishes on them (max_last, presence, anonymous grants, MQTT retained:
// topic_policies_access.go).
//
// When a publish (WebSocket, SSE-less HTTP, MQTT, a will, an embedded
// Publish) names a topic this node does not know to exist, the router
// looks the topic up; when it does not exist and the first policy whose
// pattern matches it says so, the router creates it with that policy's
// settings (zero fields take the engine's topic defaults) before the
// append. A topic created meanwhile by another publish or node
// (engine.ErrTopicExists) is used as it is. Policies are live settings: a
// reload applies them to the next topic created; existing topics keep
// their settings. A WebSocket or SSE subscribe (plain or group) to an
// exact topic (no wildcard) that does not exist creates it the same way
// when a policy matches it and the subscriber may also publish to it
// (createOnSubscribe), once every check that can
// refuse the subscribe has passed (grants, hooks, presence join, session
// and lease bounds) and right before its replay, live start or group
// join, so a refused subscribe leaves no topic behind; a creation that
// fails (too_many_topics) refuses the subscribe and undoes what it
// registered. With no policy matching, it creates nothing, as before.
//
// GET /v1/topics/{name} shows "policy":"<pattern>" when the first policy
// matching the topic's name sets no field the topic does not have, which
// is so for every topic that policy created (on any node, before or
// after a restart) and for a topic created otherwise with the same
// settings.
//
// Concurrency: the policies are part of the immutable live settings; a
// creation takes no lock of the router (the engine serializes creations).

import (
	"context"
	"errors"
	"fmt"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/trie"
)

// TopicPolicy gives the settings of the topics whose name matches Pattern
// (the trie's syntax: "*" one segment, "#" one or more trailing
// segments): the engine's settings of those a publish or subscribe
// creates, and the router's own settings of subscriptions and publishes
// on them (topic_policies_access.go). Config.Name is ignored; its zero
// fields take the engine's topic defaults.
type TopicPolicy struct {
	Pattern string
	Config  engine.TopicConfig
	// MaxLast bounds N of {"last": N} on subscriptions this policy
	// applies to, below or above Options.MaxLast; 0: Options.MaxLast.
	MaxLast int
	// Presence, when not nil, says whether a subscribe with presence is
	// allowed on the topics; nil: allowed (the router's default).
	Presence *bool
	// Anonymous adds Pattern to the anonymous grants (AuthOptions.Anonymous)
	// when anonymous clients are allowed in at all.
	Anonymous TopicAnonymous
	// MQTTRetain, when not nil, says whether a retained MQTT PUBLISH to
	// the topics is stored; nil: stored (the router's default).
	MQTTRetain *bool
}

// TopicAnonymous are the anonymous grants a topic policy adds.
type TopicAnonymous struct {
	Publish   bool
	Subscribe bool
}

// checkPolicies validates policies: a pattern each, settings an engine
// takes.
func checkPolicies(policies []TopicPolicy) error {
	for i, p := range policies {
		if err := trie.ValidatePattern(p.Pattern); err != nil {
			return fmt.Errorf("router: topic policy %d: %w", i+1, err)
		}
		if p.MaxLast < 0 {
			return fmt.Errorf("router: topic policy %d (%s): MaxLast %d is negative", i+1, p.Pattern, p.MaxLast)
		}
		c := p.Config.WithDefaults(engine.Defaults)
		c.Name = "policy.check"
		if err := c.Validate(); err != nil {
			return fmt.Errorf("router: topic policy %d (%s): %w", i+1, p.Pattern, err)
		}
	}
	return nil
}

// policyFor returns the first policy of set matching topic, or nil.
func (s *liveSettings) policyFor(topic string) *TopicPolicy {
	for i := range s.policies {
		if trie.Matches(s.policies[i].Pattern, topic) {
			return &s.policies[i]
		}
	}
	return nil
}

// createByPolicy creates topic, known not to exist a moment ago, with the
// settings of the first policy of set matching it; nothing when none
// does (the engine's first append creates it with its defaults).
func (rt *Router) createByPolicy(ctx context.Context, set *liveSettings, topic string) error {
	p := set.policyFor(topic)
	if p == nil || trie.IsSystem(topic) {
		return nil
	}
	cfg := p.Config
	cfg.Name = topic
	if _, err := rt.eng.CreateTopic(ctx, cfg); err != nil && !errors.Is(err, engine.ErrTopicExists) {
		return err
	}
	rt.limits.known.Store(topic, struct{}{})
	rt.log.Debug("topic created by policy", "topic", topic, "policy", p.Pattern)
	return nil
}

// policyOf names the policy whose settings topic t has (see the top of
// this file); "" when none.
func (rt *Router) policyOf(t engine.TopicInfo) string {
	p := rt.settings().policyFor(t.Config.Name)
	if p == nil {
		return ""
	}
	c, have := p.Config, t.Config
	switch {
	case c.Partitions != 0 && c.Partitions != have.Partitions,
		c.MaxMessages != 0 && c.MaxMessages != have.MaxMessages,
		c.MaxAge != 0 && c.MaxAge != have.MaxAge,
		c.OnFull != "" && c.OnFull != have.OnFull,
		c.Partitioner != "" && c.Partitioner != have.Partitioner,
		c.BlockTimeout != 0 && c.BlockTimeout != have.BlockTimeout:
		return ""
	}
	return p.Pattern
}
