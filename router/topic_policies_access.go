package router

// The router's own settings in topic policies (TopicPolicy): what a
// subscription or publish on a topic may do, beside the engine's settings
// of the topics a policy creates (topic_policies.go).
//
//   - MaxLast bounds {"last": N} of a subscription. An exact topic takes
//     the first policy matching it; a wildcard subscription takes the
//     first policy whose pattern covers its whole pattern ("orders.#"
//     covers "orders.*.eu", "orders.*.eu" does not cover "orders.#"), so
//     that the bound it gets is one a policy gives every topic it can
//     match. The policy that decides without a max_last, or no policy,
//     leaves Options.MaxLast. The replay then takes, of each topic it
//     reads, at most the bound of that topic's own first policy (else
//     Options.MaxLast) per partition (topicMaxLast), so a wider policy
//     or the global bound of a wildcard never replays more of a topic
//     than its policy allows.
//   - Presence: false refuses a subscribe with "presence": true on the
//     topics (forbidden); presence is for exact topics only, so the first
//     policy matching the topic decides.
//   - Anonymous grants: added to the anonymous principal's grants when the
//     settings are built (withPolicyGrants, auth.go), so they are checked
//     where every grant is, and a reload that takes one away narrows the
//     open anonymous sessions as a change of the global grants does.
//   - MQTTRetain: false keeps a retained MQTT PUBLISH on the topics from
//     being stored; it is published as any PUBLISH (mqtt_retain.go).
//
// Every one is read from the live settings on each decision: a reload
// applies them to the next subscribe or publish. Concurrency: the
// functions read immutable settings and are safe for concurrent use.

import (
	"context"
	"errors"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/trie"
)

// maxLastFor returns the bound of {"last": N} of a subscription to
// pattern (see the top of this file).
func (s *liveSettings) maxLastFor(pattern string) int {
	for i := range s.policies {
		p := &s.policies[i]
		if trie.Covers(p.Pattern, pattern) {
			if p.MaxLast > 0 {
				return p.MaxLast
			}
			break
		}
	}
	return s.maxLast
}

// topicMaxLast returns the bound of {"last": N} on topic's own records:
// the max_last of the first policy matching it, else Options.MaxLast.
// A replay takes at most that many of each of its partitions, whatever
// pattern the subscription has.
func (s *liveSettings) topicMaxLast(topic string) int {
	if p := s.policyFor(topic); p != nil && p.MaxLast > 0 {
		return p.MaxLast
	}
	return s.maxLast
}

// presenceOff returns the pattern of the policy that turns presence off
// on topic, "" when presence is allowed there.
func (s *liveSettings) presenceOff(topic string) string {
	if p := s.policyFor(topic); p != nil && p.Presence != nil && !*p.Presence {
		return p.Pattern
	}
	return ""
}

// retainOff reports whether the policy of topic keeps retained MQTT
// PUBLISHes from being stored, counting each one it keeps
// (switchyard_mqtt_retained_total{result="off"}). An empty payload, which
// removes a retained message, is never kept back: a message stored before
// the policy said so can still be removed.
func (rt *Router) retainOff(msg *engine.Message) bool {
	if len(msg.Data) == 0 {
		return false
	}
	p := rt.settings().policyFor(msg.Topic)
	if p == nil || p.MQTTRetain == nil || *p.MQTTRetain {
		return false
	}
	rt.mq.rm.stores.WithLabelValues("off").Inc()
	return true
}

// createOnSubscribe creates pattern, when it is an exact topic that does
// not exist, a policy matches it and who may publish to it (its grants,
// the anonymous ones included), with that policy's settings, within
// MaxTopics. It does nothing otherwise: a subscribe to a topic nobody
// configured, or by a client that could not create it by publishing,
// is made on the name and leaves the topic to its first publish, as
// before policies.
func (rt *Router) createOnSubscribe(ctx context.Context, who *principal, pattern string) error {
	set := rt.settings()
	if len(set.policies) == 0 || trie.IsSystem(pattern) || trie.ValidateTopic(pattern) != nil || set.policyFor(pattern) == nil {
		return nil
	}
	if !who.CanPublish(pattern) {
		return nil
	}
	if _, ok := rt.limits.known.Load(pattern); ok {
		return nil
	}
	if _, err := rt.eng.Topic(ctx, pattern); err == nil {
		rt.limits.known.Store(pattern, struct{}{})
		return nil
	} else if !errors.Is(err, engine.ErrUnknownTopic) {
		return err
	}
	if err := rt.roomForTopic(ctx); err != nil {
		return err
	}
	return rt.createByPolicy(ctx, set, pattern)
}
